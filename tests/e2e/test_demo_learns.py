"""`make demo`'s claim, asserted on the demo itself: GRPO lifts the merged model's
accuracy on the held-out split over the base model's by a clear margin.

The margin is one that a merge writing the base weights back (gain 0), a reward
that never reaches the advantages (no update but KL) or an update with the wrong
sign (the policy unlearns the boxed answer) cannot reach; the closing note of
the change that added this test shows each of those faults failing it.
"""

from __future__ import annotations

import json

import pytest

from npu_rl import demo
from npu_rl.launcher import run_files
from npu_rl.recipe import load_recipe

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]

MARGIN_POINTS = 15.0


def test_demo_lifts_held_out_accuracy(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))  # demo.run sets it; restored after the test
    assert demo.main(["--workdir", str(tmp_path)]) == 0
    out = capfd.readouterr().out

    recipe = load_recipe(demo.RECIPE)
    base, trained, step = demo.accuracy_gain(recipe)
    assert step == run_files.latest_step(recipe) > 0
    assert f"held-out accuracy     : {base:.2f} -> {trained:.2f} at step {step}" in out
    assert trained - base >= MARGIN_POINTS, f"held-out accuracy {base:.2f} -> {trained:.2f}: GRPO did not learn"

    # The gain is in the answers themselves: the trained model's graded samples are
    # right where the base model's were wrong (the split shares no problem with
    # training: tests/data/test_sample_split.py).
    samples = run_files.log_root(recipe) / "eval" / "samples"
    by_model = {p.stem: [json.loads(line) for line in p.open()] for p in samples.glob("*.jsonl")}
    trained_rows = next(v for k, v in by_model.items() if k.endswith(f"-rl-{step}"))
    base_rows = next(v for k, v in by_model.items() if not k.endswith(f"-rl-{step}"))
    fixed = [t for b, t in zip(base_rows, trained_rows, strict=True) if b["acc"] == 0 and t["acc"] > 0]
    assert len(fixed) >= MARGIN_POINTS / 100 * len(trained_rows)
