"""The consistency gate stops a run whose rollout samples from another policy, at its first step and
before the optimizer step: the tiny recipe with the CPU rollout's weight-sync drill (every sync lands with
noise, as a broken one would). The run without the drill, where the gate passes and the measured
difference is logged, is the CPU pipeline's (tests/e2e/test_cpu_pipeline.py)."""

from __future__ import annotations

import json

import pytest
from console_steps import shown_steps

from npu_rl import run_files
from npu_rl.cli import main
from npu_rl.exit_codes import Exit
from npu_rl.patches.consistency import DRILL_ENV, METRIC, WEIGHTS_DRILL
from npu_rl.recipe import load_recipe

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SETS = {
    "logging.experiment": "gate",
    "algorithm.total_training_steps": 3,
    "checkpoint.save_freq": 1,
    f"env.{DRILL_ENV}": WEIGHTS_DRILL,
}


def test_a_broken_weight_sync_is_stopped_at_step_one_before_the_update(tmp_path, monkeypatch, capfd, tiny_model):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    recipe = load_recipe("tiny_math_cpu", SETS)
    assert recipe.consistency.enabled  # the recipe's own gate, as `make demo` runs it
    tiny_model(run_files.model_dir(recipe), steps=100)
    assert main(["data", "math", "--from", "sample", "--out", str(tmp_path / "data" / "math-sample")]) == 0

    args = [a for k, v in SETS.items() for a in ("--set", f"{k}={v}")]
    assert main(["train", "--recipe", "tiny_math_cpu", *args]) == Exit.INCONSISTENT
    out, err = capfd.readouterr()
    (line,) = [ln for ln in err.splitlines() if ln.startswith("npu-rl: error:")]
    limit = recipe.consistency.max_probs_diff_mean
    assert line.startswith(
        "npu-rl: error: consistency gate at step 1: the rollout's token probabilities differ from the trainer's by "
    ), line
    assert f"({METRIC}; limit {limit:g})" in line and "stopped before the optimizer step" in line
    verdict = json.loads((run_files.log_root(recipe) / "consistency.json").read_text())
    (step,) = verdict["steps"]
    # Far above the limit, not at its edge (measured 0.17 to 0.54 over runs; healthy runs measure ~0.001).
    assert step["step"] == 1 and not step["ok"] and step["probs_diff_mean"] > 2 * limit
    # Stopped before the update: no step completed, nothing saved.
    assert shown_steps(out) == [] and run_files.saved_steps(recipe) == []
