"""`npu-rl ray head|worker` under SIGTERM (pod deletion, `docker stop`, `timeout`) and a busy GCS port."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from test_ray_cluster import (
    HEAD_PORT_FLAGS,
    NODE_PORT_FLAGS,
    free_ports,
    job_token,
    port_args,
    processes_naming,
    wait_until,
)

pytestmark = pytest.mark.timeout(300)


def _env(ray_args: str, work: Path | None = None) -> dict:
    work = work or Path(tempfile.mkdtemp(prefix="nrt"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VC_", "RAY_ADDRESS", "KUBERAY", "NPU_RL_"))}
    return {
        **env,
        "RAY_AUTH_TOKEN_PATH": job_token(work),
        "NPU_RL_IFNAME": "lo",
        "NPU_RL_RAY_ARGS": ray_args,
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONUNBUFFERED": "1",
    }


def test_sigterm_stops_the_whole_ray_tree_of_head_and_worker():
    work = Path(tempfile.mkdtemp(prefix="nrs", dir="/tmp"))
    temp = work / "ray"
    ports = iter(free_ports(1 + len(HEAD_PORT_FLAGS) + 2 * len(NODE_PORT_FLAGS)))
    gcs = next(ports)
    common = "--num-cpus 1 --object-store-memory 80000000"

    def node(name: str, args: list[str], extra: str = "") -> tuple[subprocess.Popen, Path]:
        log = work / f"{name}.log"
        env = _env(f"{common} {extra} {port_args(NODE_PORT_FLAGS, ports)} --temp-dir {temp / name}", work)
        return subprocess.Popen(
            [sys.executable, "-m", "npu_rl", "ray", *args],
            env=env,
            stdout=open(log, "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        ), log

    procs = []
    try:
        head, head_log = node(
            "head", ["head", "--port", str(gcs), "--devices", "1", "--no-dashboard"], port_args(HEAD_PORT_FLAGS, ports)
        )
        procs.append(head)
        wait_until(lambda: "head up at" in head_log.read_text() or head.poll() is not None, 120, "the head")
        worker, worker_log = node("worker", ["worker", "--address", f"127.0.0.1:{gcs}", "--devices", "1"])
        procs.append(worker)
        wait_until(lambda: "joined head" in worker_log.read_text() or worker.poll() is not None, 120, "the worker")
        assert len(processes_naming(str(temp))) >= 4  # GCS, raylets, agents: a real tree to stop

        for p in (worker, head):
            tree = [p.pid] + [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
            t0 = time.monotonic()
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=30) == 128 + signal.SIGTERM
            wait_until(
                lambda tree=tree: (
                    not [q for q in tree if psutil.pid_exists(q) and psutil.Process(q).status() != psutil.STATUS_ZOMBIE]
                ),
                10,
                "its tree to end",
            )
            assert time.monotonic() - t0 < 20
        wait_until(lambda: not processes_naming(str(temp)), 10, "every Ray process of the cluster to end")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in processes_naming(str(temp)):
            p.kill()
        shutil.rmtree(work, ignore_errors=True)


def test_head_refuses_a_port_in_use_at_once():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        t0 = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "npu_rl", "ray", "head", "--port", str(port), "--devices", "1", "--no-dashboard"],
            env=_env(""),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert time.monotonic() - t0 < 15  # not the 180 s start timeout
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("npu-rl: error: port") and "in use" in last, out.stderr
    assert "Traceback" not in out.stderr


def test_wait_honours_its_timeout_when_something_else_answers_on_the_port():
    # A TCP server that accepts and never speaks: the port probe succeeds, ray.init would hang.
    with socket.socket() as fake:
        fake.bind(("127.0.0.1", 0))
        fake.listen(64)
        port = fake.getsockname()[1]
        t0 = time.monotonic()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "npu_rl",
                "ray",
                "wait",
                "--address",
                f"127.0.0.1:{port}",
                "--nodes",
                "1",
                "--devices",
                "1",
                "--timeout",
                "3",
            ],
            env=_env(""),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert time.monotonic() - t0 < 20
    assert out.returncode == 5  # Exit.CLUSTER_TIMEOUT
    # Ray's own C++ client may still log its connect warning while the process exits (the abandoned
    # ray.init thread): the error is npu-rl's last word, not necessarily stderr's last line.
    (last,) = [ln for ln in out.stderr.splitlines() if ln.startswith("npu-rl")]
    assert last.startswith("npu-rl: error: no Ray cluster answered at 127.0.0.1:") and "within 3s" in last
    assert "Traceback" not in out.stderr


def test_head_names_a_dead_raylet_in_one_line():
    work = Path(tempfile.mkdtemp(prefix="nrd", dir="/tmp"))
    ports = iter(free_ports(1 + len(HEAD_PORT_FLAGS) + len(NODE_PORT_FLAGS)))
    gcs = next(ports)
    env = _env(
        f"--num-cpus 1 --object-store-memory 80000000 --temp-dir {work / 'ray'} "
        f"{port_args(HEAD_PORT_FLAGS, ports)} {port_args(NODE_PORT_FLAGS, ports)}",
        work,
    )
    log = work / "head.log"
    head = subprocess.Popen(
        [sys.executable, "-m", "npu_rl", "ray", "head", "--port", str(gcs), "--devices", "1", "--no-dashboard"],
        env=env,
        stdout=open(log, "w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_until(lambda: "head up at" in log.read_text() or head.poll() is not None, 120, "the head")
        raylets = [p for p in psutil.Process(head.pid).children(recursive=True) if "raylet" in p.name()]
        assert raylets, [p.name() for p in psutil.Process(head.pid).children(recursive=True)]
        raylets[0].kill()
        assert head.wait(timeout=60) == 6  # Exit.RAY_FAILED
        last = log.read_text().strip().splitlines()[-1]
        assert last.startswith("npu-rl: error: Ray on this head exited on its own"), log.read_text()[-2000:]
        wait_until(lambda: not processes_naming(str(work / "ray")), 15, "the head's Ray processes to end")
    finally:
        if head.poll() is None:
            head.kill()
        for p in processes_naming(str(work / "ray")):
            p.kill()
        shutil.rmtree(work, ignore_errors=True)
