"""`npu-rl sandbox serve` as a service: SandboxFusion's answers, bad requests, a bounded queue under a flood,
the stop, and the refusals to start where nothing could be isolated."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import SANDBOX_PYTHON, Server, serve_argv, wait_no_sandbox_processes

pytestmark = [pytest.mark.slow, pytest.mark.setup, pytest.mark.timeout(300)]
UID_BASE = 61100  # this module's slot users (tests/sandbox/conftest.py); its own servers: 62000, 62100, 62200, 62300


def test_sandboxfusions_statuses(server):
    ok = server.run("import sys; print(sys.stdin.read().upper())", stdin="abc")
    assert ok["status"] == "Success" and ok["run_result"]["status"] == "Finished"
    assert ok["run_result"]["stdout"] == "ABC\n" and ok["run_result"]["return_code"] == 0
    assert isinstance(ok["run_result"]["execution_time"], float)
    failed = server.run("echo to stderr >&2; exit 3", "bash")
    assert failed["status"] == "Failed" and failed["run_result"]["status"] == "Finished"
    assert failed["run_result"]["return_code"] == 3 and failed["run_result"]["stderr"] == "to stderr\n"
    slow = server.run("import time; time.sleep(30)", run_timeout=1)
    assert slow["status"] == "Failed" and slow["run_result"]["status"] == "TimeLimitExceeded"
    # verl's own request: stdin null, files and fetch_files empty.
    status, answer = server.post(
        {
            "code": "print(2)",
            "language": "python",
            "stdin": None,
            "compile_timeout": 10,
            "run_timeout": 10,
            "memory_limit_MB": 1024,
            "files": {},
            "fetch_files": [],
        }
    )
    assert status == 200 and answer["run_result"]["stdout"] == "2\n"


BAD = [
    (b"{not json", 400, "not JSON"),
    (b"[1, 2]", 400, "JSON object"),
    ({"language": "python"}, 400, "code"),
    ({"code": "print(1)", "language": "cobol"}, 400, "cobol"),
    ({"code": "x" * ((1 << 20) + 1)}, 413, "over"),
    ({"code": "print(1)", "run_timeout": -1}, 400, "run_timeout"),
    ({"code": "print(1)", "run_timeout": 1e9}, 400, "run_timeout"),
    ({"code": "print(1)", "run_timeout": "soon"}, 400, "run_timeout"),
    ({"code": "print(1)", "memory_limit_MB": 1 << 40}, 400, "memory_limit_MB"),
    ({"code": "print(1)", "files": {"a.txt": "eA=="}}, 400, "files"),
    (b"x" * (10 << 20), 413, "Too Large"),
    ({"code": "print(1)", "stdin": "\ud800"}, 400, "surrogate"),
    (b"[" * 200_000, 400, "not JSON"),
]


@pytest.mark.parametrize("body,status,says", BAD, ids=range(len(BAD)))
def test_a_bad_request_gets_a_4xx_and_one_line(server, body, status, says):
    code, answer = server.post(body)
    assert code == status and set(answer) == {"error"}, answer
    assert says in answer["error"] and "\n" not in answer["error"] and "Traceback" not in answer["error"]


def test_other_paths_and_methods_get_one_line_too(server):
    for url, method in ((server.url + "/nowhere", "GET"), (server.url + "/run_code", "GET")):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=30)
        assert e.value.code in (404, 405) and set(json.loads(e.value.read())) == {"error"}
    with urllib.request.urlopen(server.url + "/v1/ping", timeout=30) as r:
        assert r.read() == b"pong"


def _post_all(s: Server, bodies: list[dict]) -> list[tuple[int, dict, float]]:
    results: list = [None] * len(bodies)

    def one(i: int) -> None:
        t = time.monotonic()
        code, answer = s.post(bodies[i])
        results[i] = (code, answer, time.monotonic() - t)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def test_a_flood_is_turned_away_at_the_queue_and_a_healthy_request_still_answered():
    s = Server(serve_argv("--slots", "2", "--queue", "2", "--uid-base", "62000"))
    try:
        spin = {"code": "while True: pass", "run_timeout": 3}
        flood: list = []
        flooding = threading.Thread(target=lambda: flood.extend(_post_all(s, [spin] * 24)))
        flooding.start()
        time.sleep(1)
        # A client that retries on 503 as SandboxFusion clients do: answered within the flood's bounded wait.
        t0 = time.monotonic()
        while True:
            code, answer = s.post({"code": "print(6 * 7)"})
            if code != 503:
                break
            time.sleep(0.5)
        assert code == 200 and answer["run_result"]["stdout"] == "42\n", answer
        assert time.monotonic() - t0 < 30
        flooding.join(timeout=120)
        codes = sorted(c for c, _, _ in flood)
        assert codes.count(200) <= 24 and codes.count(503) >= 18, codes  # at most 4 held: 2 running, 2 waiting
        rejected = [(a, t) for c, a, t in flood if c == 503]
        assert all(t < 5 for _, t in rejected) and "busy" in rejected[0][0]["error"]
        health = s.health()
        assert health["rejected"]["503"] >= 18 and health["running"] == 0 and health["queue_depth"] == 0
    finally:
        assert s.stop() == 128 + signal.SIGTERM


def test_sigterm_ends_every_execution_and_the_service():
    s = Server(serve_argv("--slots", "2", "--uid-base", "62100"))
    sleepers = threading.Thread(target=_post_all, args=(s, [{"code": "sleep 50", "language": "bash"}] * 2))
    sleepers.start()
    time.sleep(2)
    assert s.health()["running"] == 2
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=30) == 143 and time.monotonic() - t0 < 10
    assert "stopped (signal 15)" in s.proc.stdout.read()
    sleepers.join(timeout=30)
    assert wait_no_sandbox_processes(62100) == []


def _refused(argv: list[str], env: dict | None = None) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("npu-rl: error: sandbox: "), out.stderr
    return lines[0]


def test_users_another_process_runs_as_are_not_taken():
    """Each execution's leftovers are killed by its slot's user after it: a service whose users another
    service (or anything) already runs as would kill that one's executions. It refuses to start instead."""
    other = subprocess.Popen(["sleep", "60"], user=62301, group=62301)
    try:
        line = _refused(serve_argv("--uid-base", "62300"))
    finally:
        other.kill()
        other.wait()
    assert "user 62301 of slot 1 already runs processes here" in line and "--uid-base" in line, line


def test_no_bubblewrap_no_service(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}
    assert "bubblewrap is not installed" in _refused(serve_argv(), env)


def test_an_interpreter_the_jail_cannot_run_is_refused_before_serving():
    """This machine's .venv Python lives under /root, which the slots' users cannot enter: nothing would run,
    so nothing is served (and nothing runs unisolated instead)."""
    line = _refused(serve_argv("--python", sys.executable))
    assert "no execution can be isolated here" in line and "Permission denied" in line
    assert SANDBOX_PYTHON.exists()


def test_an_interpreter_under_tmp_is_seen_over_the_jails_own_tmp():
    """A checkout under /tmp (a CI clone, once this suite's own: every execution failed with bwrap's "execvp
    ...: No such file or directory") keeps its .venv-sandbox visible inside the jail, whose /tmp is a tmpfs of
    its own: the interpreter is bound over it, read-only."""
    root = Path(tempfile.mkdtemp(prefix="npu-rl-checkout-", dir="/tmp"))
    try:
        root.chmod(0o755)  # as a clone's directories are: the slots' users must reach the interpreter
        shutil.copytree(SANDBOX_PYTHON.parents[1], root / ".venv-sandbox", symlinks=True)
        s = Server(serve_argv("--python", str(root / ".venv-sandbox" / "bin" / "python"), "--uid-base", "62200"))
        try:
            answer = s.run("import numpy, os, sys; print(sys.prefix, numpy.__version__, os.listdir('/tmp'))")
            assert answer["status"] == "Success", answer
            prefix, _, listed = answer["run_result"]["stdout"].split(" ", 2)
            assert prefix == str(root / ".venv-sandbox") and "npu-rl-checkout-" in listed
            # Read-only there; the rest of the jail's /tmp is the code's own.
            write = s.run(f"open({str(root / '.venv-sandbox' / 'x')!r}, 'w')")["run_result"]
            assert "Read-only file system" in write["stderr"], write
            assert s.run("open('/tmp/x', 'w').write('ok')")["status"] == "Success"
        finally:
            s.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_launch_finds_the_service_and_doctor_runs_this_hosts_isolation_probe(server, tmp_path):
    """What a recipe with ``sandbox.enabled`` checks (tests/launch/test_sandbox_launch.py without the service):
    the launch's wait ends at the service's ping, and `npu-rl doctor` runs the probe `serve` runs, here."""
    from npu_rl.launcher.preflight import wait_for_sandbox
    from npu_rl.recipe import load_recipe

    recipe = load_recipe("tiny_math_cpu", {"sandbox.enabled": True, "sandbox.url": server.url + "/run_code"})
    wait_for_sandbox(recipe, warn=pytest.fail)  # answers at once: no wait to report
    env = {**os.environ, "NPU_RL_WORKSPACE": str(tmp_path), "NPU_RL_SANDBOX_PYTHON": str(SANDBOX_PYTHON)}
    doctor = [sys.executable, "-m", "npu_rl", "doctor", "--recipe", "tiny_math_cpu", "--set", "sandbox.enabled=true"]
    out = subprocess.run(doctor, capture_output=True, text=True, env=env, timeout=120).stdout
    (row,) = [ln for ln in out.splitlines() if ln.startswith("│") and ln.split("│")[1].strip() == "sandbox host"]
    assert "│ ok " in row and "an execution isolated" in row, out
    # The same probe with the interpreter gone: refused in the table, with what to do.
    env["NPU_RL_SANDBOX_PYTHON"] = str(tmp_path / "no-python")
    out = subprocess.run(doctor, capture_output=True, text=True, env=env, timeout=120).stdout
    (row,) = [ln for ln in out.splitlines() if ln.startswith("│") and ln.split("│")[1].strip() == "sandbox host"]
    assert "│ fail " in row, out
