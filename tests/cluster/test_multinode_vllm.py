"""The NPU recipes' rollout engine on the 2-node cluster: the tiny recipe sampling with vLLM (verl 0.6.1's
vLLM rollout on vLLM 0.9.1's CPU backend), its Volcano pods run as containers of the image the manifest
names (the cpu-vllm image), on one host network, with only what the manifest gives them
(tests/cluster/container_pods.py).

One job goes through: both pods start, each FSDP rank builds its vLLM engine, weights sync into it and the
consistency gate passes at step 1 on vLLM's own log-probs; the worker pod is killed at step 2 (a lost host)
and the head ends the job NODE_LOST; Volcano's RestartJob starts both pods again, which resume from the
newest checkpoint, load it into two new engines, pass the gate again and finish.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest
from compose_run import require_compose
from console_steps import shown_steps
from container_pods import ContainerPods
from pods import prepared_pods

from npu_rl import run_files
from npu_rl.demo import VLLM_MODEL_ARGS
from npu_rl.exit_codes import Exit
from npu_rl.image.build import build_variant
from npu_rl.image.engine import engine
from npu_rl.image.spec import spec
from npu_rl.recipe import load_recipe
from npu_rl.render.k8s import default_image, image_ref

pytestmark = [pytest.mark.image, pytest.mark.timeout(2400)]

REPO = Path(__file__).resolve().parents[2]
# Killed at step 2, the restart resumes from step 1 or 2 and trains at least 2 more, the gate at its first.
STEPS = 4
KILLED_AT = 2
SETS = {"rollout.name": "vllm", "algorithm.total_training_steps": STEPS}
# As tests/cluster/test_cluster_faults.py: Ray's node health check, then verl's own exit.
NODE_FAULT_EXIT_S = 90
GATE = r"npu-rl: consistency gate at step {}: rollout probs diff mean ([0-9.e-]+) <= [0-9.]+, correlation ([0-9.e-]+) "


def _gate(log: str, step: int) -> float:
    """The gate's passed verdict at ``step``: the mean difference, after checking the correlation too."""
    m = re.search(GATE.format(step), log)
    assert m, log[-4000:]
    assert float(m.group(2)) >= load_recipe("tiny_math_cpu").consistency.min_probs_corr, m.group(0)
    return float(m.group(1))


def _resumed(log: str) -> int:
    m = re.search(r"npu-rl: resuming two_nodes_vllm from global_step_(\d+)", log)
    assert m, log[-3000:]
    return int(m.group(1))


@pytest.fixture(scope="module")
def job(tiny_model, request):
    require_compose()  # podman (or Docker) here; fails in CI without it
    build_variant("cpu-vllm", root=REPO, log=lambda _: None)  # cached layers: seconds when built
    with engine() as eng:
        pods = prepared_pods(
            "two_nodes_vllm", tiny_model, one_host=True, sets=SETS, model_args=VLLM_MODEL_ARGS,
            pods_class=ContainerPods, client=eng.client,
        )  # fmt: skip
        # The CPU images under the names the manifests give them, as a registry serves them: the pods run
        # whichever the manifest names (the cpu image, built by .ci/run, has no vLLM).
        for variant in ("cpu", "cpu-vllm"):
            repo, tag = image_ref(variant).rsplit(":", 1)
            eng.client.images.get(spec(variant).tag).tag(repo, tag)
        image = default_image(pods.recipe)
        out: dict = {"pods": pods, "image": image}
        try:
            pods.start()
            pods.wait_for_step(KILLED_AT, timeout=900)
            t0 = time.monotonic()
            pods.kill("worker")
            out["killed"] = {"codes": pods.wait(), "seconds": time.monotonic() - t0, "log": pods.log("head")}

            pods.start()
            out["finished"] = {
                "codes": pods.wait(timeout=900),
                "log": pods.log("head"),
                "worker": pods.log("worker"),
                "left": pods.left(),
            }
            out["workers"] = json.loads(
                pods.in_ws(lambda: (run_files.log_root(pods.recipe) / "workers.json").read_text())
            )
            out["steps"] = pods.in_ws(lambda: run_files.saved_steps(pods.recipe))
            request.config.cache.set(
                "npu_rl/multinode_vllm",
                {
                    "gate_step1": _gate(out["killed"]["log"], 1),
                    "gate_resumed": _gate(out["finished"]["log"], _resumed(out["finished"]["log"]) + 1),
                    "killed_worker_to_head_exit_s": round(out["killed"]["seconds"], 1),
                },
            )
            yield out
        finally:
            pods.cleanup()
            shutil.rmtree(pods.work, ignore_errors=True)


def test_the_pods_run_the_image_the_manifest_names(job):
    for task in job["pods"].job["spec"]["tasks"]:
        (container,) = task["template"]["spec"]["containers"]
        assert container["image"] == job["image"] == image_ref("cpu-vllm")


def test_vllm_samples_on_both_nodes_and_the_gate_passes_on_its_log_probs(job):
    log = job["killed"]["log"]
    assert "cluster ready: 2 nodes" in log, log[-3000:]
    # vLLM's bfloat16 log-probs against the trainer's float32 ones: close, and not equal by construction
    # (the hf rollout shares the trainer's module: about 3e-7).
    assert 0 < _gate(log, 1) < 0.05
    verdict = job["workers"]
    assert verdict["error"] is None
    assert len(verdict["workers"]) == 2 and len(verdict["nodes"]) == 2, verdict
    for w in verdict["workers"]:
        assert {"cpu", "old_log_prob"} <= set(w["applied"]), w


def test_a_lost_worker_pod_ends_the_job_for_a_restart(job):
    killed = job["killed"]
    assert killed["codes"]["head"] == Exit.NODE_LOST, killed["log"][-4000:]
    assert killed["seconds"] < NODE_FAULT_EXIT_S, killed["seconds"]
    errors = [ln for ln in killed["log"].splitlines() if ln.startswith("npu-rl: error:")]
    assert len(errors) == 1, errors


def test_the_restarted_pods_resume_into_new_engines_and_finish(job):
    done = job["finished"]
    assert done["codes"]["head"] == 0, done["log"][-4000:]
    resumed = _resumed(done["log"])
    assert KILLED_AT - 1 <= resumed < STEPS
    assert shown_steps(done["log"]) == list(range(resumed + 1, STEPS + 1))
    assert 0 < _gate(done["log"], resumed + 1) < 0.05
    assert job["steps"][-1] == STEPS
    # The head's exit completed the job; the worker pod was deleted and stopped its Ray node.
    assert done["codes"]["worker"] == 143 and "SIGTERM; stopping Ray" in done["worker"]
    assert done["left"] == []
