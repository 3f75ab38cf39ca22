"""A recipe whose policy's code runs in a sandbox (``sandbox.enabled``): the launch exports the sandbox's
/run_code to every process, waits for it to answer, and stops in one line, before Ray starts, where it never
does; `npu-rl doctor` shows it. (Against the real service: tests/sandbox/test_service.py.)"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from npu_rl.cli import main
from npu_rl.cluster.probe import free_port
from npu_rl.launcher.spec import build_launch
from npu_rl.recipe import load_recipe
from npu_rl.sandbox import client


@pytest.fixture
def workspace(tmp_path, monkeypatch, tiny_model):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    tiny_model(tmp_path / "models/tiny-qwen2", steps=1)
    assert main(["data", "math", "--from", "sample", "--out", str(tmp_path / "data/math-sample")]) == 0
    return tmp_path


class _Pong(BaseHTTPRequestHandler):
    body = b"pong"

    def do_GET(self):  # noqa: N802 (http.server's name)
        status = 200 if self.path == "/v1/ping" else 404
        self.send_response(status)
        self.end_headers()
        self.wfile.write(self.body if status == 200 else b"")

    def log_message(self, *args):
        pass


@pytest.fixture
def answering():
    """A SandboxFusion's ping on 127.0.0.1, started ``after`` seconds late: (port, start)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pong)
    port = server.server_address[1]
    started = []

    def start(after: float = 0.0) -> None:
        started.append(threading.Thread(target=lambda: (time.sleep(after), server.serve_forever()), daemon=True))
        started[-1].start()

    # Not yet answering: the socket is bound, and a connection waits in its backlog until serve_forever.
    yield port, start
    if started:
        server.shutdown()  # returns once serve_forever has run and stopped
    server.server_close()


def test_a_sandbox_that_never_answers_stops_the_launch_in_one_line_before_ray(workspace, capsys):
    port = free_port()  # nothing listens there
    sets = ["--set", "sandbox.enabled=true", "--set", f"sandbox.port={port}", "--set", "sandbox.wait_s=1"]
    t0 = time.monotonic()
    assert main(["train", "--recipe", "tiny_math_cpu", *sets]) == 2
    assert time.monotonic() - t0 < 60
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("npu-rl: error:")]
    assert len(errors) == 1, err
    assert errors[0].startswith(f"npu-rl: error: sandbox: nothing answers at http://127.0.0.1:{port}/v1/ping")
    assert f"after 1s; fix: start it beside the run: `npu-rl sandbox serve --port {port}`" in errors[0]
    assert "waiting up to 1s for the sandbox" in "\n".join(err)  # the wait said what it waited for
    assert not (workspace / "logs").exists() or not any((workspace / "logs").rglob("console.log"))


def test_the_launch_waits_for_a_sandbox_that_answers_late_and_exports_its_url(workspace, answering):
    from npu_rl.launcher.preflight import wait_for_sandbox

    port, start = answering
    recipe = load_recipe("tiny_math_cpu", {"sandbox.enabled": True, "sandbox.port": port, "sandbox.wait_s": 30})
    start(after=3)
    t0 = time.monotonic()
    wait_for_sandbox(recipe, warn=lambda _: None)
    assert 2.5 < time.monotonic() - t0 < 30
    spec = build_launch(recipe)
    url = f"http://127.0.0.1:{port}/run_code"
    assert spec.env[client.URL_ENV] == url
    # ...and to every Ray worker, through the runtime_env (a code reward or a tool reads it there).
    assert any(a.endswith(f"runtime_env.env_vars.{client.URL_ENV}='{url}'") for a in spec.argv), spec.argv


def _row(table: str, name: str) -> list[str]:
    """The doctor table's row of check ``name`` (its first line)."""
    return [ln for ln in table.splitlines() if ln.startswith("│") and ln.split("│")[1].strip() == name]


def test_doctor_shows_whether_the_sandbox_answers(workspace, answering, capsys):
    port, start = answering
    sets = ["--set", "sandbox.enabled=true", "--set", f"sandbox.url=http://127.0.0.1:{port}/run_code"]
    main(["doctor", "--recipe", "tiny_math_cpu", *sets])
    out = capsys.readouterr().out
    (row,) = _row(out, "sandbox")
    assert "fail" in row
    start()
    main(["doctor", "--recipe", "tiny_math_cpu", *sets])
    out = capsys.readouterr().out
    (row,) = _row(out, "sandbox")
    assert "│ ok " in row and "answers" in row
    # The sandbox is another host's (a URL): this host's isolation is not its business.
    (host,) = _row(out, "sandbox host")
    assert "not here" in host


def test_a_ping_answered_by_something_else_is_no_sandbox():
    class Other(_Pong):
        body = b"<html>a web server</html>"

    server = ThreadingHTTPServer(("127.0.0.1", 0), Other)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        why = client.unanswered(f"http://127.0.0.1:{server.server_address[1]}/run_code")
    finally:
        server.shutdown()
        server.server_close()
    assert why is not None and "not pong" in why
