"""`npu-rl ray head|worker` end, with one error line, when the Ray under them dies.
A port that another process holds kills a raylet at start, and `ray start` would wait 30 s more before it
fails, while `ray.init` waits for a dead GCS for minutes: each command must end with RAY_FAILED within
30 s, one `npu-rl: error:` line naming the daemon, the port and the option that set it. A raylet that
dies under a running job ends the head the same way, and its worker leaves within its head-lost time."""

from __future__ import annotations

import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from test_ray_cluster import NODE_PORT_FLAGS, Proc, _kill_ours, free_ports, port_args

from npu_rl.cluster.supervisor import Exit

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

FAIL_WITHIN_S = 30
HEAD_LOST_AFTER = 3


def _held(port: int) -> socket.socket:
    """A listening socket on every address: the port is taken, as by another job's Ray on the host."""
    s = socket.socket()
    s.bind(("", port))
    s.listen()
    return s


def _error(proc: Proc) -> str:
    (line,) = [ln for ln in proc.text().splitlines() if ln.startswith("npu-rl: error:")]
    return line


@pytest.fixture
def work():
    path = Path(tempfile.mkdtemp(prefix="nrb", dir="/tmp"))  # short: Ray's socket paths have a length limit
    procs: list[Proc] = []
    yield path, procs
    _kill_ours(str(path / "ray"), procs)
    shutil.rmtree(path, ignore_errors=True)


def _node_args(work: Path, name: str, ports: list[int]) -> str:
    return (
        f"--num-cpus 1 --object-store-memory 80000000 --temp-dir {work / 'ray' / name} "
        f"{port_args(NODE_PORT_FLAGS, ports)}"
    )


def _head(work: Path, procs: list, port: int, ports: list[int], job: list[str]) -> Proc:
    args = ["head", "--port", str(port), "--nodes", "2", "--devices", "1", "--ifname", "lo", "--no-dashboard"]
    args += ["--wait-timeout", "120", "--ray-args", _node_args(work, "head", ports), "--", *job]
    procs.append(Proc("head", args, work))
    return procs[-1]


def _worker(work: Path, procs: list, port: int, ports: list[int], name: str) -> Proc:
    args = ["worker", "--address", f"127.0.0.1:{port}", "--devices", "1", "--ifname", "lo", "--join-timeout", "120"]
    args += ["--head-lost-after", str(HEAD_LOST_AFTER), "--probe-interval", "0.5", "--max-backoff", "1"]
    procs.append(Proc(name, [*args, "--ray-args", _node_args(work, name, ports)], work))
    return procs[-1]


def test_a_head_whose_raylet_cannot_bind_its_port_fails_in_seconds_naming_it(work):
    path, procs = work
    port, *ports = free_ports(1 + len(NODE_PORT_FLAGS))
    taken = _held(ports[0])  # the node manager's
    try:
        t0 = time.monotonic()
        head = _head(path, procs, port, ports, [sys.executable, "-c", "pass"])
        code = head.wait(120)
        took = time.monotonic() - t0
    finally:
        taken.close()
    assert code == Exit.RAY_FAILED, head.text()[-3000:]
    assert took < FAIL_WITHIN_S, (took, head.text()[-3000:])
    line = _error(head)
    assert "Ray did not start on this head: Ray's raylet died" in line, line
    assert f"port {ports[0]} (set by --node-manager-port" in line, line
    assert "Traceback" not in head.text(), head.text()[-3000:]


def test_a_worker_that_cannot_start_and_a_head_whose_raylet_dies_end_at_once(work):
    path, procs = work
    port, *ports = free_ports(1 + 3 * len(NODE_PORT_FLAGS))
    head_ports, bad_ports, good_ports = (ports[i::3] for i in range(3))
    head = _head(path, procs, port, head_ports, ["sleep", "600"])
    head.wait_for("head up at", 120)

    # A worker whose raylet cannot bind its node manager port: no retries, RAY_FAILED, the port named.
    taken = _held(bad_ports[0])
    try:
        t0 = time.monotonic()
        bad = _worker(path, procs, port, bad_ports, "bad")
        code = bad.wait(120)
        took = time.monotonic() - t0
    finally:
        taken.close()
    assert code == Exit.RAY_FAILED and took < FAIL_WITHIN_S, (code, took, bad.text()[-3000:])
    line = _error(bad)
    assert "Ray did not start on this worker: Ray's raylet died" in line, line
    assert f"port {bad_ports[0]} (set by --node-manager-port" in line, line

    # A good worker joins; the head runs its job; then the head's raylet is killed.
    good = _worker(path, procs, port, good_ports, "good")
    good.wait_for("joined head", 120)
    head.wait_for("running: sleep 600", 120)
    (raylet,) = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "raylet" in " ".join(p.info["cmdline"] or [])[:200]
        and f"--node_manager_port={head_ports[0]}" in " ".join(p.info["cmdline"] or [])
    ]
    t0 = time.monotonic()
    raylet.send_signal(signal.SIGKILL)
    assert head.wait(120) == Exit.RAY_FAILED, head.text()[-3000:]
    assert time.monotonic() - t0 < FAIL_WITHIN_S
    line = _error(head)
    assert "Ray on this head died under the job" in line and "raylet" in line, line
    assert good.wait(HEAD_LOST_AFTER + 30) == Exit.HEAD_LOST, good.text()[-3000:]
