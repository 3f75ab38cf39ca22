"""The tiny recipe trained on a 2-node CPU Ray cluster, run exactly as the rendered Volcano pods run it.

The head and worker commands and their environment are read from the Volcano manifest that
`npu-rl render k8s` produces for the recipe (2 nodes x 1 worker process); only what a pod gets
from Kubernetes is supplied here: the volume mounts (the ConfigMap's recipe file and the
workspace claim, mapped to temp dirs), Volcano's ``env``/``svc`` variables (both pods on
127.0.0.1), and per-raylet ports, since two raylets share this machine (``NPU_RL_RAY_ARGS``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from npu_rl.cli import main
from npu_rl.launcher import run_files
from npu_rl.recipe import load_recipe
from npu_rl.render.k8s import K8sOptions, render_text

from test_ray_cluster import HEAD_PORT_FLAGS, NODE_PORT_FLAGS, free_ports, port_args, processes_naming, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

STEPS = 2
MOUNTS = ("/etc/npu-rl", "/workspace")


def _pod(doc: dict, task: str) -> dict:
    spec = next(t for t in doc["spec"]["tasks"] if t["name"] == task)["template"]["spec"]
    (container,) = spec["containers"]
    return container


def _mapped(text: str, mounts: dict[str, Path]) -> str:
    for inside, outside in mounts.items():
        text = text.replace(inside, str(outside))
    return text


@pytest.fixture(scope="module")
def pods():
    work = Path(tempfile.mkdtemp(prefix="nmn", dir="/tmp"))  # short: Ray's socket paths have a length limit
    ws, etc, temp = work / "ws", work / "etc", work / "ray"
    for d in (ws, etc, temp):
        d.mkdir()
    sets = {"resources.nnodes": 2, "resources.devices_per_node": 1, "algorithm.total_training_steps": STEPS,
            "logging.experiment": "two_nodes"}
    recipe = load_recipe("tiny_math_cpu", sets)
    old = os.environ.get("NPU_RL_WORKSPACE")
    os.environ["NPU_RL_WORKSPACE"] = str(ws)
    try:
        assert main(["model", "tiny", "--out", str(run_files.model_dir(recipe)), "--warm-start-steps", "50"]) == 0
        assert main(["data", "math", "--from", "sample", "--out", str(ws / "data" / "math-sample")]) == 0
    finally:
        if old is None:
            os.environ.pop("NPU_RL_WORKSPACE")
        else:
            os.environ["NPU_RL_WORKSPACE"] = old

    ports = iter(free_ports(1 + len(HEAD_PORT_FLAGS) + 2 * len(NODE_PORT_FLAGS)))
    gcs = next(ports)
    docs = list(yaml.safe_load_all(render_text(recipe, "volcano", options=K8sOptions(ray_port=gcs))))
    configmap = next(d for d in docs if d and d["kind"] == "ConfigMap")
    job = next(d for d in docs if d and d["kind"] == "Job")
    mounts = dict(zip(MOUNTS, (etc, ws)))
    for name, text in configmap["data"].items():
        (etc / name).write_text(text)

    bin_dir = Path(sys.executable).parent
    volcano = {"VC_TASK_INDEX": "0", "VC_HEAD_HOSTS": "127.0.0.1", "VC_HEAD_NUM": "1",
               "VC_WORKER_HOSTS": "127.0.0.1", "VC_WORKER_NUM": "1"}
    procs = {}
    for task in ("worker", "head"):
        pod = _pod(job, task)
        args = [_mapped(a, mounts) for a in pod["args"]]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VC_", "RAY_", "NPU_RL_"))}
        env.update({e["name"]: _mapped(e["value"], mounts) for e in pod["env"]})
        sockets = f"--raylet-socket-name {temp / ('r-' + task)} --plasma-store-socket-name {temp / ('p-' + task)}"
        extra = port_args(HEAD_PORT_FLAGS, ports) + " " if task == "head" else ""
        env.update(volcano, PATH=f"{bin_dir}:{env['PATH']}", NPU_RL_IFNAME="lo", PYTHONUNBUFFERED="1",
                   NPU_RL_RAY_ARGS=f"--num-cpus 2 --object-store-memory 100000000 --temp-dir {temp} "
                                   f"{extra}{port_args(NODE_PORT_FLAGS, ports)} {sockets}")
        log = open(work / f"{task}.log", "w")
        procs[task] = (subprocess.Popen(args, cwd=ws, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True), work / f"{task}.log", args)
    head, head_log, head_args = procs["head"]
    worker, worker_log, _ = procs["worker"]
    try:
        head_rc = head.wait(timeout=600)
        worker_rc = worker.wait(timeout=120)
        wait_until(lambda: not processes_naming(str(temp)), 30, "the cluster's processes to exit")
        yield {"recipe": recipe, "ws": ws, "head_rc": head_rc, "worker_rc": worker_rc, "head_args": head_args,
               "head_log": head_log.read_text(errors="replace"), "worker_log": worker_log.read_text(errors="replace"),
               "left": processes_naming(str(temp))}
    finally:
        for popen, _, _ in procs.values():
            if popen.poll() is None:
                popen.kill()
        for p in processes_naming(str(temp)):
            p.kill()
        shutil.rmtree(work, ignore_errors=True)


def _in_ws(pods, fn):
    old = os.environ.get("NPU_RL_WORKSPACE")
    os.environ["NPU_RL_WORKSPACE"] = str(pods["ws"])
    try:
        return fn()
    finally:
        if old is None:
            os.environ.pop("NPU_RL_WORKSPACE")
        else:
            os.environ["NPU_RL_WORKSPACE"] = old


def test_the_rendered_head_command_trains_on_two_nodes(pods):
    assert pods["head_args"][:3] == ["npu-rl", "ray", "head"] and "train" in pods["head_args"]
    assert pods["head_rc"] == 0, pods["head_log"][-4000:]
    assert "cluster ready: 2 nodes" in pods["head_log"]
    assert f"step:{STEPS} - " in pods["head_log"]
    assert _in_ws(pods, lambda: run_files.latest_step(pods["recipe"])) == STEPS


def test_patches_are_active_in_the_workers_of_both_nodes(pods):
    verdict = json.loads(_in_ws(pods, lambda: (run_files.log_root(pods["recipe"]) / "workers.json").read_text()))
    assert verdict["error"] is None
    assert len(verdict["workers"]) == 2 and len(verdict["nodes"]) == 2, verdict
    for w in verdict["workers"]:
        assert {"cpu", "old_log_prob", "attest"} <= set(w["patches"]), w


def test_old_log_prob_pass_is_skipped_in_the_remote_workers(pods):
    metrics = _in_ws(pods, lambda: run_files.metrics_file(pods["recipe"], 0)).read_text().splitlines()
    rows = [json.loads(line) for line in metrics]
    assert rows and all("timing_s/old_log_prob" not in r["data"] for r in rows), rows[:1]
    assert all("timing_s/update_actor" in r["data"] for r in rows)


def test_after_the_head_exits_no_process_of_the_cluster_is_left(pods):
    assert pods["worker_rc"] != 0  # the worker leaves once its head is gone
    assert "unreachable" in pods["worker_log"]
    assert pods["left"] == []
