"""The tiny recipe on the cann9.1-verl0.9 stack line trained on a 2-node CPU Ray cluster from the rendered
Volcano pods (tests/cluster/pods.py says what a pod gets here that Kubernetes would give it), each pod's
`npu-rl` the line's CPU environment's (`make venv STACK=cann9.1-verl0.9`, the stand-in of the line's image):
verl 0.9.0's trainer on TransferQueue, one FSDP worker and one vLLM server on each node, every weight sync
between the trainer and the rollout servers across the nodes. The job is started three times, as Volcano's
RestartJob starts it again: the worker pod killed after step 2, as a lost Atlas host would have it; then a
restart whose every weight sync lands with noise (the consistency gate's drill); then a restart that finishes.

What it shows: both nodes train (attest: every patch of the launch active in the trainer, both FSDP workers,
the reward-loop worker and both vLLM servers, on two nodes), the consistency gate passes at the first step,
the next skips the pass (verl's bypass mode), and the lost node ends the run by itself within the seeds'
line's bound: verl 0.9 would wait on the lost node's rollout server until the watchdog's allowance ran out
(measured 133 s and 157 s from the kill to the head's exit before npu-rl stopped the run on a departure,
npu_rl.cluster.nodewatch); the head names the node and the step in one line and exits NODE_LOST, which the manifest's
policy turns into a job restart; nothing of either pod is left running. The restart resumes from step 2's
checkpoint (the only one kept: max_to_keep 1, rotated once step 2's save was complete), and the gate stops its
broken sync at step 3 before the update, in one line (exit INCONSISTENT): without the gate the run would have
trained on the noisy policy's samples. The last restart resumes from step 2 again, trains step 3 with the gate
passing, and ends by itself (exit 0), nothing of it left."""

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
from npu_rl.patches.consistency import DRILL_ENV, METRIC, WEIGHTS_DRILL
from npu_rl.paths import project_root

# Three starts of the job: 1096 s here, the first start's vLLM servers the slowest (about 7 minutes).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2700)]

LINE = "cann9.1-verl0.9"
BIN = project_root() / f".venv-{LINE}" / "bin"
# The seeds' line's bound on a lost node's detection (tests/cluster/test_cluster_faults.py): Ray's, not verl's.
NODE_FAULT_EXIT_S = 90


class LinePods(Pods):
    bin_dir = BIN


STEPS = 3


def _ended(pods: Pods, root) -> dict:
    """What a start of the job left once both pods are gone: exit codes, the head's log, live processes,
    the checkpoints kept and the gate's verdicts."""
    return {
        "codes": pods.wait(),
        "log": pods.log("head"),
        "left": pods.left(),
        "saved": pods.in_ws(lambda: run_files.saved_steps(pods.recipe)),
        "gate": json.loads((root / "consistency.json").read_text()),
    }


@pytest.fixture(scope="module")
def lost(request, tiny_model):
    if not (BIN / "npu-rl").is_file():
        missing_setup(f"the {LINE} CPU environment", f"make venv STACK={LINE}")
    sets = {
        "stack": LINE,
        "rollout.name": "vllm",
        "watchdog.first_step_s": LINE_FIRST_STEP_S,
        "algorithm.total_training_steps": STEPS,
        "checkpoint.max_to_keep": 1,
    }
    pods = prepared_pods("line2n", tiny_model, sets=sets, model_args=VLLM_MODEL_ARGS, pods_class=LinePods)
    healthy = pods.recipe
    try:
        pods.start()
        pods.wait_for_step(2, timeout=LINE_FIRST_STEP_S + 300)
        t0 = time.monotonic()
        pods.kill("worker")
        pods.procs["head"].wait(timeout=600)
        head_s = time.monotonic() - t0
        # For whoever reads the run afterwards (`pytest --cache-show 'npu_rl/*'`).
        request.config.cache.set("npu_rl/line_node_lost", {"killed_worker_to_head_exit_s": round(head_s, 1)})
        root = pods.in_ws(lambda: run_files.log_root(pods.recipe))
        out = {
            "pods": pods,
            "seconds": head_s,
            **_ended(pods, root),
            "workers": json.loads((root / "workers.json").read_text()),
            "console": (root / "console.log").read_text(errors="replace"),
            "metrics": pods.metrics(),
        }
        # The restart with the drill: the recipe's env, as `--set env.NPU_RL_DRILL=...` gives a run, in the
        # manifest the job is submitted with.
        pods.recipe = healthy.model_copy(update={"env": {**healthy.env, DRILL_ENV: WEIGHTS_DRILL}})
        pods.start()
        out["drilled"] = _ended(pods, root)
        pods.recipe = healthy
        pods.start()
        out["finished"] = {**_ended(pods, root), "metrics": pods.metrics()}
        yield out
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
    applied = verdict["trainer"]["applied"]
    assert "verl.plugin.platform.platform_manager:_register_cpu_platform" in applied["cpu"]
    assert "verl.trainer.ppo.v1.trainer_base:_patch_trainer_base" in applied["checkpoint_rotation"]


def test_the_gate_passes_at_the_first_step_and_the_next_skips_the_pass(lost):
    # The weight sync reaches the other node's vLLM server: its log-probs agree with the trainer's.
    gate = lost["gate"]
    assert [(v["step"], v["ok"]) for v in gate["steps"]] == [(1, True)] and gate["error"] is None
    assert gate["steps"][0]["probs_diff_mean"] < 0.05 and gate["steps"][0]["probs_corr"] > 0.9, gate
    metrics = lost["metrics"]
    assert METRIC in metrics[1] and METRIC not in metrics[2]
    # Step 2 skipped the pass (verl's bypass mode: the rollout's log-probs are the update's old ones): verl
    # measured nothing and corrected nothing there, and the update's ratio stayed inside PPO's clip.
    assert not any(k.startswith("rollout_corr/") for k in metrics[2]), sorted(metrics[2])
    assert metrics[2]["actor/pg_clipfrac"] < 0.05, metrics[2]["actor/pg_clipfrac"]
    for m in (metrics[1], metrics[2]):
        assert {"reward/acc", "reward/format", "reward/boxed", "batch/fingerprint"} <= set(m), sorted(m)
    assert metrics[1]["batch/fingerprint"] != metrics[2]["batch/fingerprint"]


def test_a_lost_node_ends_the_run_in_one_line_and_leaves_nothing(lost):
    assert lost["codes"]["head"] == Exit.NODE_LOST, lost["log"][-3000:]
    assert lost["seconds"] < NODE_FAULT_EXIT_S, lost["seconds"]
    (line,) = [ln for ln in lost["log"].splitlines() if ln.startswith("npu-rl: error:")]
    assert re.match(r"npu-rl: error: node \S+ \([0-9a-f]{56}\) left the cluster at step 2; ", line), line
    assert "; npu-rl stopped training; a restart of the job resumes" in line, line
    assert "Traceback" not in lost["log"].split("npu-rl: error:")[-1]
    assert lost["left"] == []
    # The step the restart resumes from; step 1's checkpoint went once step 2's save was complete.
    assert lost["saved"] == [2], lost["saved"]


def test_the_restart_resumes_and_the_gate_stops_its_broken_sync(lost):
    run = lost["drilled"]
    assert run["codes"]["head"] == Exit.INCONSISTENT, run["log"][-4000:]
    assert "resuming line2n from global_step_2" in run["log"], run["log"][-3000:]
    (line,) = [ln for ln in run["log"].splitlines() if ln.startswith("npu-rl: error:")]
    assert line.startswith("npu-rl: error: consistency gate at step 3: the rollout's token probabilities "), line
    assert "stopped before the optimizer step" in line and (METRIC in line or "correlate" in line), line
    assert "Traceback" not in run["log"].split("npu-rl: error:")[-1]
    (step,) = run["gate"]["steps"]
    assert step["step"] == 3 and not step["ok"] and (step["probs_diff_mean"] > 0.1 or step["probs_corr"] < 0.9)
    # Stopped before the update: step 3 was neither trained nor saved; nothing of the job is left.
    assert run["saved"] == [2] and run["left"] == []


def test_the_last_restart_finishes_by_itself_and_leaves_nothing(lost):
    run = lost["finished"]
    assert run["codes"]["head"] == 0, run["log"][-4000:]
    assert "resuming line2n from global_step_2" in run["log"], run["log"][-3000:]
    assert f"npu-rl: finished at global_step_{STEPS}" in run["log"], run["log"][-2000:]
    assert "Traceback" not in run["log"]
    assert [(v["step"], v["ok"]) for v in run["gate"]["steps"]] == [(3, True)], run["gate"]
    assert STEPS in run["metrics"] and run["saved"] == [STEPS] and run["left"] == []
