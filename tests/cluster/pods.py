"""The pods of a rendered Volcano job, run as processes on this machine.

The head and worker commands and their environment are read from the Volcano manifest that
`npu-rl render k8s` produces for the recipe; only what a pod gets from Kubernetes is supplied here:
the volume mounts (the ConfigMap's recipe file and the workspace claim, mapped to temp dirs),
Volcano's ``env``/``svc`` variables (the head's service on 127.0.0.1), per-raylet ports, since two
raylets share this machine, and an address of each pod's own (``NPU_RL_RAY_ARGS``). Each pod is its own
session, so a signal to its process group reaches everything it started, as the kubelet's does. Running
the same pods again is what Volcano's RestartJob does.

A pod's own network and filesystem, which this stand-in has only in part, matter to Ray: a driver
attaches to the raylet registered under the IP that its node's session directory records
(``node_ip_address.json``; ray 2.46 ``GlobalStateAccessor::GetNodeToConnectForDriver`` takes the first
node with that IP). On a cluster each pod has its own IP and its own /tmp. Here the worker pod gets an
address of its own on lo (``WORKER_IP``) and a mount namespace in which Ray's temp directory is a
private one; without either, the head pod's drivers attach to the worker pod's raylet whenever it
registered first, and a frozen worker pod freezes the head's driver too: a hang no cluster has. What
is still shared: the network stack (ports, hence the per-raylet ports) and the PID space.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml
from console_steps import shown_steps
from test_ray_cluster import HEAD_PORT_FLAGS, NODE_PORT_FLAGS, free_ports, port_args, processes_naming, wait_until

from npu_rl import run_files
from npu_rl.cli import main
from npu_rl.recipe import load_recipe
from npu_rl.render.k8s import K8sOptions, render_text

MOUNTS = ("/etc/npu-rl", "/workspace")
WORKER_IP = "127.0.0.2"  # on lo (127.0.0.0/8) without configuring anything
TASKS = ("worker", "head")


def _pod(doc: dict, task: str) -> dict:
    spec = next(t for t in doc["spec"]["tasks"] if t["name"] == task)["template"]["spec"]
    (container,) = spec["containers"]
    return container


def _mapped(text: str, mounts: dict[str, Path]) -> str:
    for inside, outside in mounts.items():
        text = text.replace(inside, str(outside))
    return text


def _namespace(binds: dict[Path, Path]) -> list[str]:
    """A command prefix that runs the rest in a mount namespace of its own with ``binds`` ({where: what})
    mounted; the command is exec'ed, so the pod's process is the command itself."""
    if not binds:
        return []
    pairs = [str(p) for where, what in binds.items() for p in (what, where)]
    script = (
        'n="$1"; shift; while [ "$n" -gt 0 ]; do mount --bind "$1" "$2" || exit 125; shift 2; '
        'n=$((n - 1)); done; exec "$@"'
    )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(len(binds)), *pairs]


class Pods:
    """One Volcano job's pods on 127.0.0.1; ``start()`` runs them (again), ``kill`` signals one."""

    def __init__(self, recipe, work: Path):
        self.recipe, self.work = recipe, work
        self.ws, self.etc, self.temp = work / "ws", work / "etc", work / "ray"
        for d in (self.ws, self.etc, self.temp):
            d.mkdir(exist_ok=True)
        self.runs = 0
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}

    def in_ws(self, fn):
        old = os.environ.get("NPU_RL_WORKSPACE")
        os.environ["NPU_RL_WORKSPACE"] = str(self.ws)
        try:
            return fn()
        finally:
            if old is None:
                os.environ.pop("NPU_RL_WORKSPACE")
            else:
                os.environ["NPU_RL_WORKSPACE"] = old

    def start(
        self, env: dict[str, dict[str, str]] | None = None, mounts: dict[str, dict[Path, Path]] | None = None
    ) -> Pods:
        """Start both pods; ``env[task]`` adds pod variables, ``mounts[task]`` volumes of its own
        (``{where: what}``, bind-mounted in the pod's mount namespace)."""
        self.runs += 1
        ports = iter(free_ports(1 + len(HEAD_PORT_FLAGS) + 2 * len(NODE_PORT_FLAGS)))
        gcs = next(ports)
        docs = list(yaml.safe_load_all(render_text(self.recipe, "volcano", options=K8sOptions(ray_port=gcs))))
        configmap = next(d for d in docs if d and d["kind"] == "ConfigMap")
        job = next(d for d in docs if d and d["kind"] == "Job")
        volumes = dict(zip(MOUNTS, (self.etc, self.ws)))
        for name, text in configmap["data"].items():
            (self.etc / name).write_text(text)
        bin_dir = Path(sys.executable).parent
        # A restarted pod is a new container: nothing of the last run's Ray session or sockets is there.
        temp = self.temp / f"r{self.runs}"
        temp.mkdir()
        volcano = {
            "VC_TASK_INDEX": "0",
            "VC_HEAD_HOSTS": "127.0.0.1",
            "VC_HEAD_NUM": "1",
            "VC_WORKER_HOSTS": "127.0.0.1",
            "VC_WORKER_NUM": "1",
        }
        self.head_args: list[str] = []
        for task in TASKS:
            pod = _pod(job, task)
            args = [_mapped(a, volumes) for a in pod["args"]]
            if task == "head":
                self.head_args = args
            penv = {k: v for k, v in os.environ.items() if not k.startswith(("VC_", "RAY_", "NPU_RL_", "HCCL_"))}
            penv.update({e["name"]: _mapped(e["value"], volumes) for e in pod["env"]})
            sockets = f"--raylet-socket-name {temp / ('r-' + task)} --plasma-store-socket-name {temp / ('p-' + task)}"
            # Ray waits 20 s for its dashboard to register (ray 2.46 _private/services.py start_api_server,
            # 200 polls of 0.1 s), which two raylets and a test on 2 loaded cores can miss; nothing here
            # reads the dashboard, so the head pod's runs without it.
            extra = port_args(HEAD_PORT_FLAGS, ports) + " --include-dashboard=false " if task == "head" else ""
            # The worker pod's own address (the last --node-ip-address wins); Ray registers the head's
            # 127.0.0.1 under this host's address (ray/_private/services.py resolve_ip_for_localhost).
            extra += f" --node-ip-address={WORKER_IP} " if task == "worker" else ""
            penv.update(
                volcano,
                PATH=f"{bin_dir}:{penv['PATH']}",
                NPU_RL_IFNAME="lo",
                PYTHONUNBUFFERED="1",
                # Worker ports from the OS: the raylets of two jobs on one machine share Ray's range.
                NPU_RL_RAY_ARGS=f"--num-cpus 2 --object-store-memory 100000000 --temp-dir {temp} "
                "--min-worker-port 0 --max-worker-port 0 "
                f"{extra}{port_args(NODE_PORT_FLAGS, ports)} {sockets}",
            )
            penv.update((env or {}).get(task, {}))
            log = self.work / f"{task}-{self.runs}.log"
            self.logs[task] = log
            own = dict((mounts or {}).get(task, {}))
            if task == "worker":  # its container's /tmp: Ray's session directory of its own
                private = self.work / f"worker-tmp-{self.runs}"
                (private / temp.name).mkdir(parents=True)
                own[self.temp] = private
            with open(log, "w") as out:
                self.procs[task] = subprocess.Popen(
                    [*_namespace(own), *args],
                    cwd=self.ws,
                    env=penv,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        return self

    def log(self, task: str) -> str:
        return self.logs[task].read_text(errors="replace")

    def wait_for_step(self, step: int, timeout: float = 400) -> None:
        wait_until(
            lambda: step in shown_steps(self.log("head")) or self.procs["head"].poll() is not None,
            timeout,
            f"step {step} in the head's log",
            poll=0.5,
        )
        assert step in shown_steps(self.log("head")), self.log("head")[-3000:]

    def tree(self, task: str) -> list[psutil.Process]:
        """Every process of a pod: its command and all it started (orphans re-parent to it: npu-rl's
        commands are child subreapers), as a pod's PID namespace holds them."""
        try:
            root = psutil.Process(self.procs[task].pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def kill(self, task: str, sig: int = signal.SIGKILL) -> None:
        """Signal every process of a pod at once, as a dead host or a frozen one would have it."""
        for p in self.tree(task):
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass

    def wait(self, timeout: float = 600) -> dict[str, int]:
        """Both pods' exit codes (the worker's after the head's), once no process of the cluster is left.

        The head's end ends the job: its exit code matches a policy (CompleteJob on TaskCompleted, AbortJob or
        RestartJob on a failure) and Volcano deletes the job's other pods, whose containers get SIGTERM. A worker
        pod left alone would exit too, once the head has been unreachable for HEAD_LOST_AFTER_S
        (tests/cluster/test_ray_cluster.py), which no cluster waits for."""
        codes = {"head": self.procs["head"].wait(timeout=timeout)}
        if self.procs["worker"].poll() is None:
            self.procs["worker"].send_signal(signal.SIGTERM)
        codes["worker"] = self.procs["worker"].wait(timeout=120)
        wait_until(lambda: not self.left(), 60, "the cluster's processes to exit")
        return codes

    def left(self) -> list[psutil.Process]:
        return processes_naming(str(self.temp))

    def cleanup(self) -> None:
        for task in TASKS:
            if task in self.procs:
                self.kill(task, signal.SIGCONT)
                self.kill(task)
        for p in self.left():
            p.kill()

    def metrics(self) -> dict[int, dict]:
        """Every step's metrics, the latest segment's where a restart logged a step again."""
        rows: dict[int, dict] = {}
        root = self.in_ws(lambda: run_files.log_root(self.recipe))
        for path in sorted(
            root.glob("metrics-from-step-*.jsonl"), key=lambda p: (int(p.stem.rsplit("-", 1)[1]), p.stat().st_mtime)
        ):
            for line in path.read_text().splitlines():
                row = json.loads(line)
                rows[row["step"]] = row["data"]
        return rows

    def worker_processes(self, title: str = "ray::WorkerDict") -> list[psutil.Process]:
        """Ray worker processes of the worker pod whose title starts with ``title``."""
        found = []
        for p in self.tree("worker"):
            try:
                if (p.cmdline() or [""])[0].startswith(title):
                    found.append(p)
            except psutil.Error:
                pass
        return found


def elapsed(since: float) -> float:
    return time.monotonic() - since


STEPS = 6
# save_freq 1: every step is a restart point; no validation: the runs compare batches, not accuracy.
SETS = {
    "resources.nnodes": 2,
    "resources.devices_per_node": 1,
    "algorithm.total_training_steps": STEPS,
    "checkpoint.save_freq": 1,
    "checkpoint.test_freq": -1,
    "checkpoint.max_to_keep": 8,
}


def prepared_pods(experiment: str, tiny_model) -> Pods:
    """A fresh workspace with the tiny model and the sample data, and the job's pods (not started)."""
    work = Path(tempfile.mkdtemp(prefix="nmn", dir="/tmp"))  # short: Ray's socket paths have a length limit
    recipe = load_recipe("tiny_math_cpu", {**SETS, "logging.experiment": experiment})
    pods = Pods(recipe, work)
    pods.in_ws(lambda: tiny_model(run_files.model_dir(recipe), steps=50))
    assert main(["data", "math", "--from", "sample", "--out", str(pods.ws / "data" / "math-sample")]) == 0
    return pods
