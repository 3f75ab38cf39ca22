"""The consistency gate's decisions on real verl batches: which steps run the old_log_prob pass, the
difference it measures (verl's own metric), and a stop with one line above the limit."""

from __future__ import annotations

import json
import types

import pytest
import torch
from verl import DataProto
from verl.utils.debug.metrics import calculate_debug_metrics

from npu_rl.launcher.spec import build_launch
from npu_rl.patches import consistency as gate_mod
from npu_rl.patches.old_log_prob import OldLogProbConfigError, check_config
from npu_rl.recipe import load_recipe


def _batch(rollout_log_probs: torch.Tensor | None) -> DataProto:
    n = 3
    tensors = {"responses": torch.ones(2, n, dtype=torch.long), "response_mask": torch.tensor([[1, 1, 0], [1, 1, 1]])}
    if rollout_log_probs is not None:
        tensors["rollout_log_probs"] = rollout_log_probs
    return DataProto.from_dict(tensors=tensors)


TRAINER_LP = torch.log(torch.tensor([[0.5, 0.9, 0.2], [0.8, 0.6, 0.3]]))


def _real_pass(calls: list, trainer_lp: torch.Tensor):
    def real(batch):
        # The workers compute at the temperature the gate asks for: the rollout's log-probs' own.
        calls.append(("real", batch.meta_info.get(gate_mod.TEMPERATURE)))
        return DataProto.from_dict(
            tensors={"old_log_probs": trainer_lp.clone(), "entropys": torch.zeros(2, 3)},
            meta_info={"temperature": batch.meta_info.get(gate_mod.TEMPERATURE)},
        )

    return real


def _skip(calls: list):
    def skip(batch):
        calls.append("skip")
        return DataProto.from_dict(tensors={"old_log_probs": torch.full((2, 3), float("nan"))})

    return skip


def _gated(tmp_path, every=0, limit=0.05, min_corr=0.8, trainer_lp=TRAINER_LP):
    calls: list = []
    rollout = types.SimpleNamespace(temperature=0.7)
    trainer = types.SimpleNamespace(
        global_steps=1, config=types.SimpleNamespace(actor_rollout_ref=types.SimpleNamespace(rollout=rollout))
    )
    path = tmp_path / "consistency.json"
    gate, verdicts = gate_mod.Gate(every, limit, min_corr), gate_mod.Verdicts(limit, min_corr)
    fn = gate_mod.gated(trainer, _real_pass(calls, trainer_lp), _skip(calls), gate, verdicts, str(path))
    return fn, trainer, calls, path


def test_the_gate_measures_verls_own_metrics():
    rollout = TRAINER_LP + 0.1
    batch = _batch(rollout)
    union = DataProto.from_dict(tensors={**batch.batch, "old_log_probs": TRAINER_LP})
    verl = calculate_debug_metrics(union)
    assert gate_mod.measure(batch, TRAINER_LP) == pytest.approx((verl[gate_mod.METRIC], verl[gate_mod.CORR_METRIC]))


def test_first_step_runs_the_pass_and_later_steps_keep_the_skip(tmp_path):
    fn, trainer, calls, path = _gated(tmp_path, every=3)
    trainer.global_steps = 5  # a resumed run: its first step is gated (a new rollout, a new sync)
    batch = _batch(TRAINER_LP.clone())
    out = fn(batch)
    assert calls == [("real", gate_mod.ROLLOUT_LOG_PROB_TEMPERATURE)] and "old_log_probs" in out.batch.keys()
    # The update then samples' temperature again, and the request leaves the batch.
    assert out.meta_info["temperature"] == 0.7 and gate_mod.TEMPERATURE not in batch.meta_info
    verdicts = json.loads(path.read_text())
    assert verdicts["error"] is None and verdicts["steps"][0]["step"] == 5 and verdicts["steps"][0]["ok"]
    assert verdicts["steps"][0]["probs_diff_mean"] == pytest.approx(0.0)
    for step, expected in ((7, "skip"), (9, "real"), (10, "skip")):
        trainer.global_steps = step
        batch = _batch(TRAINER_LP.clone())
        fn(batch)
        assert (calls[-1] if calls[-1] == "skip" else calls[-1][0]) == expected, step
        # On skipped steps the rollout's log-probs leave the batch: verl would compare them with NaN.
        assert ("rollout_log_probs" in batch.batch.keys()) is (expected == "real")


def test_a_difference_above_the_limit_stops_the_run_with_one_line(tmp_path):
    fn, trainer, calls, path = _gated(tmp_path, limit=0.05)
    far = torch.log(torch.tensor([[0.9, 0.1, 0.2], [0.2, 0.9, 0.3]]))
    with pytest.raises(gate_mod.ConsistencyError) as err:
        fn(_batch(far))
    line = gate_mod.verdict_error(path)
    assert line == str(err.value) and "\n" not in line
    assert line.startswith("consistency gate at step 1: the rollout's token probabilities differ from the trainer's by")
    assert "training/rollout_probs_diff_mean; limit 0.05" in line and "before the optimizer step" in line
    assert json.loads(path.read_text())["steps"][0]["ok"] is False


def test_a_rollout_near_zero_everywhere_stops_the_run_on_the_correlation(tmp_path):
    """What a sync that never lands gives (an engine with load_format dummy's random weights): tokens that
    both sides find unlikely, a mean difference under the limit and probabilities that do not correlate."""
    unlikely = torch.log(torch.tensor([[0.010, 0.002, 0.030], [0.020, 0.001, 0.015]]))
    nowhere = torch.log(torch.tensor([[1.1e-5, 1.0e-5, 0.9e-5], [1.0e-5, 1.2e-5, 1.0e-5]]))
    trainer_side = DataProto.from_dict(tensors={**_batch(nowhere).batch, "old_log_probs": unlikely})
    assert calculate_debug_metrics(trainer_side)[gate_mod.METRIC] < 0.05  # the mean alone passes it
    fn, _, _, path = _gated(tmp_path, limit=0.05, trainer_lp=unlikely)
    with pytest.raises(gate_mod.ConsistencyError) as err:
        fn(_batch(nowhere))
    line = str(err.value)
    assert "correlate with the trainer's by only" in line and "rollout_actor_probs_pearson_corr; limit 0.8" in line
    (step,) = json.loads(path.read_text())["steps"]
    assert step["probs_diff_mean"] < 0.05 and not step["ok"]


def test_a_rollout_that_returns_no_log_probs_fails_the_gate(tmp_path):
    fn, _, calls, path = _gated(tmp_path)
    with pytest.raises(gate_mod.ConsistencyError):
        fn(_batch(None))
    assert calls == [] and "returned no log-probs" in gate_mod.verdict_error(path)


def test_the_launch_asks_the_rollout_for_log_probs_and_sets_the_gate(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    recipe = load_recipe(
        "tiny_math_cpu", {"consistency.enabled": True, "consistency.every": 10, "consistency.max_probs_diff_mean": 0.2}
    )
    spec = build_launch(recipe)
    assert "actor_rollout_ref.rollout.calculate_log_probs=True" in spec.argv
    assert json.loads(spec.env[gate_mod.ENV]) == {"every": 10, "max_probs_diff_mean": 0.2, "min_probs_corr": 0.8}
    assert spec.env[gate_mod.FILE_ENV] == str(spec.consistency_file)
    assert spec.patches.index("old_log_prob") < spec.patches.index("consistency")
    off = build_launch(load_recipe("tiny_math_cpu", {"consistency.enabled": False}))
    assert not any("calculate_log_probs" in a for a in off.argv) and gate_mod.ENV not in off.env


def test_the_skip_accepts_rollout_log_probs_only_with_the_gate(tmp_path, monkeypatch):
    from npu_rl.launcher.verl_config import check_argv

    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    cfg = check_argv(build_launch(load_recipe("tiny_math_cpu", {"consistency.enabled": True})).argv)
    check_config(cfg)  # the gate's own use of them
    from omegaconf import open_dict

    with open_dict(cfg):
        del cfg.ray_kwargs.ray_init.runtime_env.env_vars[gate_mod.ENV]
    with pytest.raises(OldLogProbConfigError, match="calculate_log_probs=True .* without the consistency gate"):
        check_config(cfg)


def test_with_the_pass_on_every_step_the_gate_stays_off(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    recipe = load_recipe("tiny_math_cpu", {"optimizations.recompute_old_log_prob": True})
    assert recipe.consistency.enabled and not recipe.consistency_gated
    spec = build_launch(recipe)
    assert "consistency" not in spec.patches and gate_mod.ENV not in spec.env and spec.consistency_file is None
    assert not any("calculate_log_probs" in a for a in spec.argv)
