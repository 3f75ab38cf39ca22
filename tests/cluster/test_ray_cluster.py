"""Real Ray on this machine: one head and two workers started by `npu-rl ray`, each its own raylet.

One cluster is shared by the tests below, which follow its life in order:
a worker started before its head, the head waiting for all nodes before its
job, `wait` blocking until the last worker joins, a timeout naming what is
missing, and finally the job's exit code and the workers leaving with the head.
Every process gets its own ports and a temp dir unique to this module;
teardown kills only processes whose command line names that temp dir.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from npu_rl.cluster import rayauth, rayports
from npu_rl.cluster.supervisor import Exit

NPUS = 2  # NPU per node: a custom resource count, no device needed
JOB_EXIT = 7

PROBE = textwrap.dedent("""
    import json, os, pathlib, sys, time
    import ray
    ray.init(logging_level="ERROR", log_to_driver=False)
    nodes = [n for n in ray.nodes() if n["Alive"]]
    out = {"address": os.environ["RAY_ADDRESS"], "total_npu": ray.cluster_resources().get("NPU"),
           "node_npus": sorted(n["Resources"].get("NPU", 0) for n in nodes),
           "hccl_if_ip": os.environ.get("HCCL_IF_IP")}
    ray.shutdown()
    pathlib.Path(sys.argv[1]).write_text(json.dumps(out))
    gate = pathlib.Path(sys.argv[2])
    while not gate.exists():
        time.sleep(0.1)
    sys.exit(int(sys.argv[3]))
""")


# The port options a node of the product chooses for itself; the tests pass them explicitly where they
# must know a port (to occupy it, or to find a raylet by it).
NODE_PORT_FLAGS = rayports.NODE_PORT_FLAGS
HEAD_PORT_FLAGS = rayports.HEAD_PORT_FLAGS
# Below the 20000 up from which each Ray node npu-rl starts chooses its own ports: a port chosen here is
# bound only when its node starts, and another node must not have taken it by then. Below the kernel's
# ephemeral range too: a port from there is what any bind to port 0 gets (Ray's workers, its exporters),
# seen in CI as a runtime-env-agent port answered by an exporter ("HTTP 405: POST; use OPTIONS or GET").
TEST_PORTS = (12000, 19999)


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free right now, from TEST_PORTS."""
    return rayports.choose_ports(n, TEST_PORTS)


def port_args(flags, ports) -> str:
    # Raylets sharing one machine must not race for the same "free" port (each host has one raylet in a pod).
    return " ".join(f"{flag} {port}" for flag, port in zip(flags, ports))


def wait_until(pred, timeout: float, what: str, poll: float = 0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def job_token(work: Path) -> str:
    """The job's Ray token file in ``work`` (made once, owner-only), as a Secret volume gives it to a pod."""
    path = work / rayauth.TOKEN_FILE
    return str(path if path.exists() else rayauth.new_token(work))


class Proc:
    def __init__(self, name: str, args: list[str], workdir: Path):
        self.name = name
        self.log = workdir / f"{name}.log"
        env = {
            **os.environ,
            "RAY_USAGE_STATS_ENABLED": "0",
            "PYTHONUNBUFFERED": "1",
            "RAY_AUTH_TOKEN_PATH": job_token(workdir),
        }
        for k in (
            "RAY_ADDRESS",
            "VC_TASK_INDEX",
            "KUBERAY_GEN_RAY_START_CMD",
            "MINDX_TASK_ID",
            "NODE_RANK",
            "MASTER_ADDR",
            "NNODES",
        ):
            env.pop(k, None)
        with open(self.log, "w") as log:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "npu_rl", "ray", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def running(self) -> bool:
        return self.popen.poll() is None

    def wait_for(self, text: str, timeout: float) -> None:
        wait_until(lambda: text in self.text() or not self.running(), timeout, f"{self.name}: {text!r}")
        assert text in self.text(), f"{self.name} exited with {self.popen.returncode}:\n{self.text()[-3000:]}"

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running after {timeout}s:\n{self.text()[-3000:]}") from None


def processes_naming(marker: str) -> list[psutil.Process]:
    """Live (not zombie) processes whose command line names ``marker`` (a cluster's temp dir)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(p.info["cmdline"] or []):
                found.append(p)
        except psutil.Error:
            pass
    return found


def _kill_ours(marker: str, procs: list[Proc]) -> None:
    for p in procs:
        if p.running():
            p.popen.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.popen.kill()
    # Ray daemons that outlived their supervisor: only those naming this module's temp dir.
    for proc in processes_naming(marker):
        try:
            proc.kill()
        except psutil.Error:
            pass


@pytest.fixture(scope="module")
def cluster():
    work = Path(tempfile.mkdtemp(prefix="nrl", dir="/tmp"))  # short: Ray's socket paths have a length limit
    temp = work / "ray"
    ports = iter(free_ports(1 + len(HEAD_PORT_FLAGS) + 3 * len(NODE_PORT_FLAGS)))
    port = next(ports)
    address = f"127.0.0.1:{port}"

    def node_ports(name: str) -> str:
        # Each node's temp dir under this module's, so that a leftover process is found by its path.
        return f"--temp-dir {temp / name}"

    common = "--num-cpus 1 --object-store-memory 80000000"
    worker_opts = [
        "worker",
        "--address",
        address,
        "--devices",
        str(NPUS),
        "--join-timeout",
        "120",
        "--head-lost-after",
        "3",
        "--probe-interval",
        "0.5",
        "--max-backoff",
        "1",
    ]
    state: dict = {"work": work, "address": address, "procs": []}

    def spawn(name, args):
        p = Proc(name, args, work)
        state["procs"].append(p)
        return p

    try:
        w1 = spawn("worker1", [*worker_opts, "--ray-args", f"{common} {node_ports('w1')}"])
        w1.wait_for("not reachable yet", 60)
        state["w1_before_head"] = w1.text()
        (work / "probe.py").write_text(PROBE)
        head = spawn(
            "head",
            [
                "head",
                "--port",
                str(port),
                "--nodes",
                "3",
                "--devices",
                str(NPUS),
                "--no-dashboard",
                "--wait-timeout",
                "120",
                "--ray-args",
                f"{common} {node_ports('head')}",
                "--",
                sys.executable,
                str(work / "probe.py"),
                str(work / "probe.json"),
                str(work / "gate"),
                str(JOB_EXIT),
            ],
        )
        head.wait_for("head up at", 120)
        waiter = spawn(
            "wait", ["wait", "--address", address, "--nodes", "3", "--devices", str(NPUS), "--timeout", "120"]
        )
        w1.wait_for("joined head", 120)
        time.sleep(1.0)  # let `wait` see the two-node cluster at least once
        state["wait_running_with_two_nodes"] = waiter.running()
        state["probe_before_last_worker"] = (work / "probe.json").exists()
        w2 = spawn("worker2", [*worker_opts, "--ray-args", f"{common} {node_ports('w2')}"])
        state.update(w1=w1, w2=w2, head=head, waiter=waiter, temp=temp)
        state["wait_rc"] = waiter.wait(120)
        wait_until(lambda: (work / "probe.json").exists() or not head.running(), 120, "the head's job to start")
        yield state
    finally:
        _kill_ours(str(temp), state["procs"])
        shutil.rmtree(work, ignore_errors=True)


def test_worker_started_before_its_head_joins_once_it_appears(cluster):
    assert "joined head" not in cluster["w1_before_head"]
    assert "joined head" in cluster["w1"].text()
    assert cluster["w1"].running()


def test_wait_blocks_until_the_last_worker_joins(cluster):
    assert cluster["wait_running_with_two_nodes"], cluster["waiter"].text()
    assert cluster["wait_rc"] == 0, cluster["waiter"].text()
    assert "cluster ready: 3 nodes, 6 NPUs" in cluster["waiter"].text()


def test_job_on_the_head_starts_after_all_nodes_and_sees_their_npus(cluster):
    assert not cluster["probe_before_last_worker"]
    seen = json.loads((cluster["work"] / "probe.json").read_text())
    assert seen["total_npu"] == 3 * NPUS
    assert seen["node_npus"] == [NPUS] * 3
    assert seen["address"].endswith(cluster["address"].split(":")[1])
    assert seen["hccl_if_ip"]  # network variables reach the job


def test_wait_times_out_naming_what_is_missing(cluster):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "npu_rl",
            "ray",
            "wait",
            "--address",
            cluster["address"],
            "--nodes",
            "4",
            "--devices",
            str(NPUS),
            "--timeout",
            "2",
        ],
        env={**os.environ, "RAY_AUTH_TOKEN_PATH": job_token(cluster["work"])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == Exit.CLUSTER_TIMEOUT, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert "1 of 4 nodes missing" in error
    assert "2 of 8 NPUs missing" in error


DRIVER = "import ray, sys; ray.init(address=sys.argv[1]); print('RAN', ray.get(ray.remote(lambda: 41).remote()) + 1)"


def _outsider_env(token_file: Path | None) -> dict:
    """This machine's environment without the job's token: someone else on the network, or on the host."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    if token_file is not None:
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_file))
    return env


def _wrong_token(work: Path) -> Path:
    return rayauth.new_token(Path(tempfile.mkdtemp(dir=work)))


@pytest.mark.parametrize("token", ["none", "wrong"])
def test_a_driver_without_the_jobs_token_is_refused_and_runs_nothing(cluster, token):
    env = _outsider_env(_wrong_token(cluster["work"]) if token == "wrong" else None)
    out = subprocess.run(
        [sys.executable, "-c", DRIVER, cluster["address"]], env=env, capture_output=True, text=True, timeout=180
    )
    assert out.returncode != 0 and "RAN" not in out.stdout, out.stdout + out.stderr[-2000:]
    assert "Authentication token is missing or incorrect" in out.stderr, out.stderr[-2000:]


def test_a_driver_with_the_jobs_token_runs(cluster):
    env = {**_outsider_env(None), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": job_token(cluster["work"])}
    out = subprocess.run(
        [sys.executable, "-c", DRIVER, cluster["address"]], env=env, capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0 and "RAN 42" in out.stdout, out.stderr[-2000:]


def test_a_raylet_with_a_wrong_token_does_not_join(cluster):
    temp = cluster["temp"] / "intruder"  # under the module's temp dir: cleaned up with the cluster
    env = _outsider_env(_wrong_token(cluster["work"]))
    out = subprocess.run(
        [str(Path(sys.executable).with_name("ray")), "start", f"--address={cluster['address']}", f"--temp-dir={temp}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode != 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Authentication token is missing or incorrect" in out.stdout + out.stderr, out.stderr[-2000:]
    assert not processes_naming(str(temp))


def test_the_token_is_in_no_process_list_and_no_ray_log(cluster):
    token = Path(job_token(cluster["work"])).read_text()
    argv = [" ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])]
    assert len(argv) > 10 and not [a for a in argv if token in a]
    logs = [f for f in cluster["temp"].rglob("*") if f.is_file()] + [p.log for p in cluster["procs"]]
    assert len(logs) > 10
    held = []
    for f in logs:
        try:
            held += [f] if token in f.read_text(errors="replace") else []
        except FileNotFoundError:  # Ray removed it meanwhile
            pass
    assert not held


def test_head_exits_with_the_jobs_code_and_workers_leave_non_zero(cluster):
    head, w1, w2 = cluster["head"], cluster["w1"], cluster["w2"]
    assert head.running() and w1.running() and w2.running()
    (cluster["work"] / "gate").touch()
    assert head.wait(60) == JOB_EXIT, head.text()[-3000:]
    for worker in (w1, w2):
        assert worker.wait(60) == Exit.HEAD_LOST, worker.text()[-3000:]
        assert "unreachable" in worker.text()
    # Each node stopped its own Ray daemons: none with this cluster's temp dir is left.
    wait_until(lambda: not processes_naming(str(cluster["temp"])), 30, "Ray daemons to exit")
