"""The code sandbox as compose starts it: `docker compose --profile sandbox up -d sandbox`, in the CPU image
built as `make image-cpu` builds it, with the runtime settings the rendered file gives it and nothing else.
The hostile cases of tests/sandbox/test_hostile.py, sent to it over the published port, are contained in it
too; then it still answers a healthy request, and its stop leaves no process of a jail on the host."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from compose_run import compose_project, require_compose
from sandbox_attacks import (
    ALLOC,
    ELSEWHERE,
    ENVIRONS,
    ESCAPE,
    FILL,
    FORKS,
    KEYRING,
    LEAVE,
    LOOK,
    MEMFD,
    PRINT,
    Client,
    read_code,
)

from npu_rl.cluster.probe import free_port
from npu_rl.image.build import build_variant

REPO = Path(__file__).resolve().parents[2]
UID_BASE = 61000  # the service's default: the jails' users as the host sees them (rootful runtime)
CONNECT_ANY = """
import socket
for host, port in (("127.0.0.1", 8080), ("8.8.8.8", 53), ("pypi.org", 443)):
    try:
        socket.create_connection((host, port), timeout=3)
        print("CONNECTED", host)
    except OSError as e:
        print("REFUSED", host, type(e).__name__)
"""

pytestmark = [pytest.mark.image, pytest.mark.timeout(1200)]


def _jail_processes() -> list[psutil.Process]:
    return [
        p for p in psutil.process_iter(["uids"]) if p.info["uids"] and UID_BASE <= p.info["uids"].real < UID_BASE + 8
    ]


def _up(client: Client, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(client.url + "/v1/ping", timeout=5) as r:
                if r.read() == b"pong":
                    return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def test_the_sandbox_service_contains_the_attacks_in_its_container(tmp_path):
    require_compose()
    build_variant("cpu", root=REPO, log=lambda _: None)
    port = free_port()
    with compose_project("sandbox", tmp_path, "npurlsbx", SANDBOX_PORT=str(port), SANDBOX_SLOTS="2") as compose:
        up = compose("up", "-d", "--no-build", "sandbox", timeout=300)
        assert up.returncode == 0, up.stdout + up.stderr
        sandbox = Client(f"http://127.0.0.1:{port}")
        try:
            _up(sandbox)
        except OSError:
            pytest.fail("the sandbox never answered: " + compose("logs", "sandbox", timeout=60).stdout[-3000:])
        run = sandbox.run
        # The container's own secrets and what a workspace would hold are not in the jail's root.
        out = run(read_code(["/etc/passwd", "/etc/hostname", "/workspace", "/opt/npu-rl/pyproject.toml"]))
        assert out["run_result"]["stdout"].count("DENIED") == 4, out
        assert "NPU_RL_SANDBOX_PYTHON" not in run(ENVIRONS)["run_result"]["stdout"]
        assert "CONNECTED" not in run(CONNECT_ANY)["run_result"]["stdout"]
        bomb = run(":(){ :|:& };:", "bash", run_timeout=3)
        assert bomb["run_result"]["status"] in ("Finished", "TimeLimitExceeded"), bomb
        assert int(run(FORKS.format(n=300), run_timeout=5)["run_result"]["stdout"].split()[-1]) < 64
        assert run(ALLOC.format(mb=256), memory_limit_MB=128)["run_result"]["stdout"].strip() == "REFUSED"
        assert run(MEMFD, memory_limit_MB=128)["run_result"]["stdout"].strip() == "REFUSED 1"
        assert run(KEYRING)["run_result"]["stdout"].strip() == "KEYRING -1"
        assert run(ESCAPE, run_timeout=2)["run_result"]["status"] == "TimeLimitExceeded"
        printed = run(PRINT)["run_result"]
        assert len(printed["stdout"]) < (1 << 20) + 200 and "output cut at" in printed["stdout"]
        assert "STOPPED OSError 28" in run(FILL.format(files=32))["run_result"]["stdout"]
        assert "WROTE" not in run(ELSEWHERE)["run_result"]["stdout"]
        run(LEAVE)
        assert run(LOOK)["run_result"]["stdout"].strip() == "False False ['main.py']"
        killer = run('sleep 60 & kill -9 -1; wait $!; echo "ended by $(kill -l $?)"', "bash")
        assert killer["run_result"]["stdout"] == "ended by KILL\n", killer
        healthy = run("import numpy, sympy\nprint(sympy.factorint(int(numpy.int64(2**16 - 1))))")
        assert healthy["status"] == "Success" and healthy["run_result"]["stdout"] == "{3: 1, 5: 1, 17: 1, 257: 1}\n"
        deadline = time.monotonic() + 10
        while _jail_processes() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _jail_processes() == []
        assert sandbox.health()["runs"] >= 16
    assert _jail_processes() == []
