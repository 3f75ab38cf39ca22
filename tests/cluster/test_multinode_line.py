"""The tiny recipe on the cann9.1-verl0.9 stack line trained on a 2-node CPU Ray cluster from the rendered
Volcano pods (tests/cluster/pods.py says what a pod gets here that Kubernetes would give it), each pod's
`npu-rl` the line's CPU environment's (`make venv STACK=cann9.1-verl0.9`, the stand-in of the line's image):
verl 0.9.0's trainer on TransferQueue, one FSDP worker and one vLLM server on each node, every weight sync
between the trainer and the rollout servers across the nodes. Then the worker pod is killed after step 2, as
a lost Atlas host would have it.

What it shows: both nodes train (attest: every patch of the launch active in the trainer, both FSDP workers,
the reward-loop worker and both vLLM servers, on two nodes), the consistency gate passes at the first step,
the next skips the pass (verl's bypass mode), and the lost node ends the run by itself within the seeds'
line's bound: verl 0.9 would wait on the lost node's rollout server until the watchdog's allowance ran out
(measured 133 s and 157 s from the kill to the head's exit before npu-rl stopped the run on a departure,
npu_rl.cluster.nodewatch); the head names the node and the step in one line and exits NODE_LOST, which the manifest's
policy turns into a job restart; nothing of either pod is left running. (The resume after a restart, and the
gate's stop of a broken sync, run on one node in tests/e2e/test_stack_line_train.py.)"""

from __future__ import annotations

import json
import re
import shutil
import time

import pytest
from needs import missing_setup
from pods import Pods, prepared_pods

from npu_rl import run_files
from npu_rl.demo import LINE_FIRST_STEP_S, VLLM_MODEL_ARGS
from npu_rl.exit_codes import Exit
from npu_rl.patches.consistency import METRIC
from npu_rl.paths import project_root

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

LINE = "cann9.1-verl0.9"
BIN = project_root() / f".venv-{LINE}" / "bin"
# The seeds' line's bound on a lost node's detection (tests/cluster/test_cluster_faults.py): Ray's, not verl's.
NODE_FAULT_EXIT_S = 90


class LinePods(Pods):
    bin_dir = BIN


@pytest.fixture(scope="module")
def lost(request, tiny_model):
    if not (BIN / "npu-rl").is_file():
        missing_setup(f"the {LINE} CPU environment", f"make venv STACK={LINE}")
    sets = {"stack": LINE, "rollout.name": "vllm", "watchdog.first_step_s": LINE_FIRST_STEP_S}
    pods = prepared_pods("line2n", tiny_model, sets=sets, model_args=VLLM_MODEL_ARGS, pods_class=LinePods)
    try:
        pods.start()
        pods.wait_for_step(2, timeout=LINE_FIRST_STEP_S + 300)
        t0 = time.monotonic()
        pods.kill("worker")
        pods.procs["head"].wait(timeout=600)
        head_s = time.monotonic() - t0
        codes = pods.wait()
        # For whoever reads the run afterwards (`pytest --cache-show 'npu_rl/*'`).
        request.config.cache.set("npu_rl/line_node_lost", {"killed_worker_to_head_exit_s": round(head_s, 1)})
        root = pods.in_ws(lambda: run_files.log_root(pods.recipe))
        yield {
            "pods": pods,
            "codes": codes,
            "seconds": head_s,
            "log": pods.log("head"),
            "left": pods.left(),
            "workers": json.loads((root / "workers.json").read_text()),
            "gate": json.loads((root / "consistency.json").read_text()),
            "console": (root / "console.log").read_text(errors="replace"),
            "metrics": pods.metrics(),
        }
    finally:
        pods.cleanup()
        shutil.rmtree(pods.work, ignore_errors=True)


def test_the_lines_pods_train_on_two_nodes_with_every_patch_active(lost):
    head_args = lost["pods"].head_args
    assert head_args[:3] == ["npu-rl", "ray", "head"] and "train" in head_args
    assert "cluster ready: 2 nodes" in lost["log"]
    assert f"/.venv-{LINE}/bin/python -m verl.trainer.main_ppo" in lost["console"]  # the line's verl ran it
    verdict = lost["workers"]
    assert verdict["error"] is None and len(verdict["nodes"]) == 2, verdict
    # One FSDP worker and one vLLM server per node (rollout TP 1), and the reward-loop worker.
    assert len(verdict["workers"]) == 5, verdict["workers"]
    expected = set(verdict["expected"])
    assert {"cpu", "consistency", "attest"} <= expected and "old_log_prob" not in expected
    assert all(expected <= set(w["patches"]) for w in verdict["workers"])


def test_the_gate_passes_at_the_first_step_and_the_next_skips_the_pass(lost):
    # The weight sync reaches the other node's vLLM server: its log-probs agree with the trainer's.
    gate = lost["gate"]
    assert [(v["step"], v["ok"]) for v in gate["steps"]] == [(1, True)] and gate["error"] is None
    assert gate["steps"][0]["probs_diff_mean"] < 0.05 and gate["steps"][0]["probs_corr"] > 0.9, gate
    metrics = lost["metrics"]
    assert METRIC in metrics[1] and METRIC not in metrics[2]


def test_a_lost_node_ends_the_run_in_one_line_and_leaves_nothing(lost):
    assert lost["codes"]["head"] == Exit.NODE_LOST, lost["log"][-3000:]
    assert lost["seconds"] < NODE_FAULT_EXIT_S, lost["seconds"]
    (line,) = [ln for ln in lost["log"].splitlines() if ln.startswith("npu-rl: error:")]
    assert re.match(r"npu-rl: error: node \S+ \([0-9a-f]{56}\) left the cluster at step 2; ", line), line
    assert "; npu-rl stopped training; a restart of the job resumes" in line, line
    assert "Traceback" not in lost["log"].split("npu-rl: error:")[-1]
    assert lost["left"] == []
    steps = lost["pods"].in_ws(lambda: run_files.saved_steps(lost["pods"].recipe))
    assert 2 in steps, steps  # the step the restart resumes from
