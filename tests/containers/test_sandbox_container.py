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
from sandbox_attacks import Client, contained_in_a_container

from npu_rl.cluster.probe import free_port
from npu_rl.image.build import build_variant

REPO = Path(__file__).resolve().parents[2]
UID_BASE = 61000  # the service's default: the jails' users as the host sees them (rootful runtime)

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
        contained_in_a_container(sandbox)
        deadline = time.monotonic() + 10
        while _jail_processes() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _jail_processes() == []
        assert sandbox.health()["runs"] >= 16
    assert _jail_processes() == []
