"""The pods of a rendered Volcano job, run as processes on this machine.

The head and worker commands and their environment are read from the Volcano manifest that
`npu-rl render k8s` produces for the recipe; only what a pod gets from Kubernetes is supplied here:
the volumes (the ConfigMap's recipe file, the workspace claim and the Ray token's Secret, mapped to temp
dirs) and Volcano's ``env``/``svc`` variables (the head's service on 127.0.0.1). Ray's ports and temp dirs
are the product's own (npu_rl.cluster.rayports), as on a cluster. Each pod is its own session, so a signal
to its process group reaches everything it started, as the kubelet's does. Running the same pods again is
what Volcano's RestartJob does.

``one_host=False`` (the default) stands for two Atlas hosts: the worker pod registers under an address of
its own on lo (``WORKER_IP``, through ``NPU_RL_RAY_ARGS``: the one thing that is the harness's, since this
machine has one host address), so that the tests can tell the nodes apart by address as on a cluster.
``one_host=True`` is two hostNetwork pods on one node: one address, one /tmp, nothing passed but the
manifest's. What is shared either way: the network stack and the PID space.
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
from test_ray_cluster import free_ports, job_token, wait_until

from npu_rl import run_files
from npu_rl.cli import main
from npu_rl.recipe import load_recipe
from npu_rl.render.k8s import K8sOptions, render_text

# The token's mount first: it starts with the recipe's mount path.
MOUNTS = ("/etc/npu-rl-ray", "/etc/npu-rl", "/workspace")
WORKER_IP = "127.0.0.2"  # on lo (127.0.0.0/8) without configuring anything
TASKS = ("worker", "head")


def _pod_spec(doc: dict, task: str) -> dict:
    return next(t for t in doc["spec"]["tasks"] if t["name"] == task)["template"]["spec"]


def _pod(doc: dict, task: str) -> dict:
    (container,) = _pod_spec(doc, task)["containers"]
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

    # Where the pods' `npu-rl` comes from, as the image's PATH has it: this environment's (a stack line's
    # pods take that line's CPU environment, tests/cluster/test_multinode_line.py).
    bin_dir = Path(sys.executable).parent

    def __init__(self, recipe, work: Path, one_host: bool = False, ray_port: int | None = None):
        self.recipe, self.work, self.one_host = recipe, work, one_host
        self.ws, self.etc, self.secret = work / "ws", work / "etc", work / "secret"
        for d in (self.ws, self.etc, self.secret):
            d.mkdir(exist_ok=True)
        self.ray_port = ray_port
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
        # The GCS port as `npu-rl render k8s --ray-port` sets it (default: one per job name; the suite's jobs
        # run beside other Ray clusters, so each test job takes a free one).
        gcs = self.ray_port or free_ports(1)[0]
        docs = list(yaml.safe_load_all(render_text(self.recipe, "volcano", options=K8sOptions(ray_port=gcs))))
        configmap = next(d for d in docs if d and d["kind"] == "ConfigMap")
        job = self.job = next(d for d in docs if d and d["kind"] == "Job")
        for name, text in configmap["data"].items():
            (self.etc / name).write_text(text)
        self._secret(job)
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
            if task == "head":
                self.head_args = list(pod["args"])
            pod_env = {e["name"]: e["value"] for e in pod["env"]}
            pod_env.update(volcano)
            log = self.work / f"{task}-{self.runs}.log"
            self.logs[task] = log
            self.procs[task] = self._launch(
                task, job, pod, pod_env, (env or {}).get(task, {}), dict((mounts or {}).get(task, {})), log
            )
        return self

    def harness_env(self, task: str) -> dict[str, str]:
        """What a pod gets from the harness and not from the manifest: with two hosts, the worker's address."""
        if task == "worker" and not self.one_host:
            # Another host's address (the last --node-ip-address wins); Ray registers the head's 127.0.0.1
            # under this host's address (ray/_private/services.py resolve_ip_for_localhost).
            return {"NPU_RL_RAY_ARGS": f"--node-ip-address={WORKER_IP}"}
        return {}

    def _launch(self, task, job, pod, pod_env, extra_env, own_mounts, log):
        """One pod as a process of this machine: the manifest's args and env with the volumes' paths mapped
        to the job's temp dirs, in a session of its own."""
        volumes = dict(zip(MOUNTS, (self.secret, self.etc, self.ws)))
        args = [_mapped(a, volumes) for a in pod["args"]]
        penv = {k: v for k, v in os.environ.items() if not k.startswith(("VC_", "RAY_", "NPU_RL_", "HCCL_"))}
        penv.update({k: _mapped(v, volumes) for k, v in pod_env.items()})
        penv.update(PATH=f"{self.bin_dir}:{penv['PATH']}", PYTHONUNBUFFERED="1")
        penv.update(self.harness_env(task), **extra_env)
        with open(log, "w") as out:
            return subprocess.Popen(
                [*_namespace(own_mounts), *args],
                cwd=self.ws,
                env=penv,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _secret(self, job: dict) -> None:
        """The Secret the manifest's ``ray-token`` volume names, as `kubectl create secret` and a 0400 Secret
        volume give it: one token per job, the same for every pod and restart."""
        spec = _pod_spec(job, "head")
        (volume,) = [v for v in spec["volumes"] if v["name"] == "ray-token"]
        (item,) = volume["secret"]["items"]
        path = self.secret / item["path"]
        if not path.exists():
            path.write_text(Path(job_token(self.work)).read_text())
            path.chmod(volume["secret"]["defaultMode"])

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

    def listening(self, task: str) -> dict[int, dict]:
        """The TCP ports a pod's processes listen on: {port: {"addresses": {...}, "processes": {...}}}, read from
        the sockets they hold."""
        pids = {p.pid: p for p in self.tree(task)}
        found: dict[int, dict] = {}
        for c in psutil.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN and c.pid in pids:
                entry = found.setdefault(c.laddr.port, {"addresses": set(), "processes": set()})
                entry["addresses"].add(c.laddr.ip)
                try:
                    entry["processes"].add(pids[c.pid].name())
                except psutil.Error:
                    pass
        return found

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
        """Live processes of this job: those whose environment holds its workspace (every process a pod starts
        inherits the manifest's NPU_RL_WORKSPACE, mapped to this job's)."""
        found = []
        for p in psutil.process_iter(["status"]):
            try:
                if p.info["status"] != psutil.STATUS_ZOMBIE and p.environ().get("NPU_RL_WORKSPACE") == str(self.ws):
                    found.append(p)
            except psutil.Error:
                pass
        return found

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


def prepared_pods(
    experiment: str, tiny_model, one_host: bool = False, sets: dict | None = None, model_args=(), pods_class=None, **kw
) -> Pods:
    """A fresh workspace with the tiny model (``model_args``: more `npu-rl model tiny` flags) and the sample
    data, and the job's pods (not started; ``pods_class(recipe, work, one_host=..., **kw)``)."""
    work = Path(tempfile.mkdtemp(prefix="nmn"))
    recipe = load_recipe("tiny_math_cpu", {**SETS, **(sets or {}), "logging.experiment": experiment})
    pods = (pods_class or Pods)(recipe, work, one_host=one_host, **kw)
    pods.in_ws(lambda: tiny_model(run_files.model_dir(recipe), steps=50, args=model_args))
    assert main(["data", "math", "--from", "sample", "--out", str(pods.ws / "data" / "math-sample")]) == 0
    return pods
