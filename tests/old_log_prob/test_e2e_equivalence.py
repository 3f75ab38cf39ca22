"""Skipping the old_log_prob pass changes nothing but the time: same step, same seed, switch on and off."""

from __future__ import annotations

import math

import pytest
import torch

from npu_rl import demo, run_files
from npu_rl.cli import main
from npu_rl.defaults import DEMO_WARM_START_STEPS
from npu_rl.recipe import load_recipe
from npu_rl.report.scalars import load_run

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

ACTOR_TAGS = ("actor/pg_loss", "actor/kl_loss", "actor/pg_clipfrac", "actor/grad_norm")
# Same rollouts in both runs (seeded CPU sampling): checked first, or nothing below means anything.
ROLLOUT_TAGS = ("critic/score/mean", "critic/advantages/max", "response_length/mean")
SETTINGS = {"skip": False, "recompute": True}


def _run(experiment: str, recompute: bool) -> tuple:
    overrides = {"logging.experiment": experiment, "optimizations.recompute_old_log_prob": recompute}
    args = [
        "train",
        "--recipe",
        "tiny_math_cpu",
        "--set",
        "algorithm.total_training_steps=1",
        "--set",
        "checkpoint.test_freq=-1",
    ]
    for key, value in overrides.items():
        args += ["--set", f"{key}={str(value).lower()}"]
    assert main(args) == 0
    recipe = load_recipe("tiny_math_cpu", overrides)
    scalars = load_run(run_files.log_root(recipe))
    actor = run_files.step_dir(recipe, 1) / "actor"
    shards = {}
    for rank in (0, 1):
        state = torch.load(actor / f"model_world_size_2_rank_{rank}.pt", weights_only=False, map_location="cpu")
        shards.update({(rank, k): v.to_local() if hasattr(v, "to_local") else v for k, v in state.items()})
    return scalars, shards


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model):
    ws = tmp_path_factory.mktemp("olp_ws")
    mp = pytest.MonkeyPatch()
    mp.setenv("NPU_RL_WORKSPACE", str(ws))
    try:
        recipe = load_recipe("tiny_math_cpu")
        # The demo's warm start (tests/e2e/test_demo_learns.py has made it by now, so this is a copy): rewards
        # then vary within groups, so advantages and pg_loss are non-zero.
        tiny_model(run_files.model_dir(recipe), steps=DEMO_WARM_START_STEPS, recipe=demo.RECIPE)
        assert main(["data", "math", "--from", "sample", "--out", str(ws / "data" / "math-sample")]) == 0
        from transformers import AutoModelForCausalLM

        initial = AutoModelForCausalLM.from_pretrained(run_files.model_dir(recipe)).state_dict()
        yield {name: _run(name, recompute) for name, recompute in SETTINGS.items()}, initial
    finally:
        mp.undo()


def test_same_rollouts_so_the_comparison_means_something(runs):
    (results, _) = runs
    skip, recompute = results["skip"][0], results["recompute"][0]
    for tag in ROLLOUT_TAGS:
        assert skip[tag].value_at(1) == recompute[tag].value_at(1), tag
    # Rewards vary within groups: advantages, pg_loss and the gradient are not trivially zero.
    assert abs(recompute["actor/pg_loss"].value_at(1)) > 1e-6
    assert recompute["actor/grad_norm"].value_at(1) > 1e-4


def test_first_step_actor_metrics_agree(runs):
    (results, _) = runs
    skip, recompute = results["skip"][0], results["recompute"][0]
    for tag in (*ACTOR_TAGS, "actor/entropy"):
        a, b = skip[tag].value_at(1), recompute[tag].value_at(1)
        assert math.isfinite(a) and math.isfinite(b), tag
        assert abs(a - b) <= 1e-5, f"{tag}: skip {a} vs recompute {b}"
    assert recompute["actor/entropy"].value_at(1) > 0


def test_old_log_prob_timing_absent_only_when_skipped(runs):
    (results, _) = runs
    assert "timing_s/old_log_prob" not in results["skip"][0]
    assert "timing_s/old_log_prob" in results["recompute"][0]


def test_parameters_after_step_one_agree(runs):
    (results, initial) = runs
    skip, recompute = results["skip"][1], results["recompute"][1]
    assert skip.keys() == recompute.keys()
    moved = 0.0
    for key in skip:
        torch.testing.assert_close(skip[key], recompute[key], rtol=1e-5, atol=1e-6, msg=str(key))
    for (rank, name), tensor in recompute.items():
        if rank == 0 and name in initial and initial[name].numel() // 2 == tensor.numel():
            moved = max(moved, (tensor.flatten() - initial[name].flatten()[: tensor.numel()]).abs().max().item())
    assert moved > 0, "step 1 did not change the parameters; the comparison would be vacuous"
