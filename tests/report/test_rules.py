"""Each injected pathology is found at the step it starts, with its severity; a healthy
run gives nothing. Curves go through real TensorBoard event files."""

from __future__ import annotations

import math

import numpy as np
import pytest
from report_synth import DS, VAL_ACC, VAL_REWARD, healthy_metrics, write_events, write_jsonl

from npu_rl.report.rules import RULES, Context, apply_rules, exit_code, notes, running_median, runs
from npu_rl.report.scalars import load_run
from npu_rl.report.thresholds import load_thresholds


def analyse(run_dir, **ctx):
    return apply_rules(Context(series=load_run(run_dir), thresholds=load_thresholds(), **ctx))


def keyed(findings):
    return {(f.rule, f.severity, f.metric, f.step) for f in findings}


def set_from(metrics, tag, start, value, end=None):
    for s in list(metrics[tag]):
        if s >= start and (end is None or s <= end):
            metrics[tag][s] = value(s) if callable(value) else value


def test_healthy_run_has_no_findings(tmp_path):
    findings = analyse(write_events(tmp_path / "run", healthy_metrics()))
    assert findings == []
    assert exit_code(findings) == 0


def _collapse(m):
    set_from(m, "actor/entropy", 25, 0.005)


def _low_entropy(m):
    set_from(m, "actor/entropy", 20, 0.05)


def _low_start_halves(m):
    # A model that starts near the absolute line (the tiny CPU model's ~0.1) and then halves.
    set_from(m, "actor/entropy", 1, 0.105)
    set_from(m, "actor/entropy", 20, 0.045)


def _nan_pg_loss(m):
    m["actor/pg_loss"][17] = math.nan


def _inf_grad(m):
    m["actor/grad_norm"][33] = math.inf


def _grad_spike(m):
    m["actor/grad_norm"][30] = 8.0


def _length_explosion(m):
    set_from(m, "response_length/mean", 22, 1500.0)


def _length_collapse(m):
    set_from(m, "response_length/mean", 22, 30.0)


def _length_clipped(m):
    set_from(m, "response_length/clip_ratio", 30, 0.97)


def _clip_high(m):
    set_from(m, "actor/pg_clipfrac", 10, 0.45, end=25)


def _clip_low(m):
    set_from(m, "actor/pg_clipfrac", 15, 0.01)


def _kl_explosion(m):
    set_from(m, "actor/kl_loss", 28, 3.0)


def _kl_flat(m):
    set_from(m, "actor/kl_loss", 1, 0.0)


def _reward_up_acc_flat(m):
    # The reward climbs steadily; the accuracy part stays where it started.
    set_from(m, VAL_REWARD, 1, lambda s: 0.35 + 0.02 * s)
    set_from(m, VAL_ACC, 1, 0.40)


@pytest.mark.parametrize(
    "inject, expected",
    [
        (_collapse, {("entropy_collapse", "critical", "actor/entropy", 25)}),
        (_low_entropy, {("entropy_collapse", "warning", "actor/entropy", 20)}),
        (_low_start_halves, {("entropy_collapse", "warning", "actor/entropy", 20)}),
        (_nan_pg_loss, {("non_finite", "critical", "actor/pg_loss", 17)}),
        (_inf_grad, {("non_finite", "critical", "actor/grad_norm", 33)}),
        (_grad_spike, {("grad_norm_spike", "warning", "actor/grad_norm", 30)}),
        (_length_explosion, {("length_rise", "warning", "response_length/mean", 22)}),
        (_length_collapse, {("length_collapse", "warning", "response_length/mean", 22)}),
        (_length_clipped, {("length_clipped", "warning", "response_length/clip_ratio", 30)}),
        (_clip_high, {("clipfrac_high", "warning", "actor/pg_clipfrac", 10)}),
        (_clip_low, {("clipfrac_low", "warning", "actor/pg_clipfrac", 15)}),
        (_kl_explosion, {("kl_explosion", "warning", "actor/kl_loss", 28)}),
        (_kl_flat, {("kl_flat_zero", "warning", "actor/kl_loss", 2)}),
        # Reward 0.35+0.02*s first exceeds its start (0.45 at step 5) by 0.05 at step 10.
        (_reward_up_acc_flat, {("reward_hacking", "warning", VAL_REWARD, 10)}),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_pathology_found_at_its_step(tmp_path, inject, expected):
    metrics = healthy_metrics()
    inject(metrics)
    findings = analyse(write_events(tmp_path / "run", metrics))
    assert keyed(findings) == expected
    severity = max(e[1] for e in expected)
    assert exit_code(findings) == (2 if severity == "critical" else 1)


def test_entropy_that_starts_near_the_line_and_drifts_is_not_a_collapse(tmp_path):
    metrics = healthy_metrics()
    set_from(metrics, "actor/entropy", 1, 0.105)
    set_from(metrics, "actor/entropy", 20, 0.09)  # below 0.1, but 86% of where it started
    assert analyse(write_events(tmp_path / "run", metrics)) == []


def test_an_entropy_fall_on_a_solved_task_is_convergence_not_collapse(tmp_path):
    metrics = healthy_metrics()
    _collapse(metrics)
    run = write_events(tmp_path / "run", metrics)
    # Held-out accuracy at the line: the policy stopped exploring a task it solves.
    ctx = Context(series=load_run(run), thresholds=load_thresholds(), eval_accuracy=(57.8, 93.8, 72))
    assert apply_rules(ctx) == []
    assert any(n.startswith("entropy_collapse rule skipped: held-out accuracy rose 57.80 -> 93.80") for n in notes(ctx))
    # Below the line, or without an evaluation, the same curve is a collapse.
    for acc in ((57.8, 85.0, 72), (95.0, 94.0, 72), None):
        assert ("entropy_collapse", "critical", "actor/entropy", 25) in keyed(analyse(run, eval_accuracy=acc))


def test_finding_reports_value_and_what_to_check(tmp_path):
    metrics = healthy_metrics()
    _grad_spike(metrics)
    (f,) = analyse(write_events(tmp_path / "run", metrics))
    assert f.value == pytest.approx(8.0)
    assert "running median" in f.message and f.check


def test_several_pathologies_are_all_found_worst_first(tmp_path):
    metrics = healthy_metrics()
    for inject in (_grad_spike, _nan_pg_loss, _length_explosion):
        inject(metrics)
    findings = analyse(write_events(tmp_path / "run", metrics))
    assert [f.rule for f in findings] == ["non_finite", "length_rise", "grad_norm_spike"]
    assert exit_code(findings) == 2


def test_eval_accuracy_flat_while_reward_rises(tmp_path):
    metrics = healthy_metrics()
    del metrics[VAL_ACC]  # a reward without an acc part: only the evaluation can tell
    findings = analyse(write_events(tmp_path / "run", metrics), eval_accuracy=(43.0, 42.5, 40))
    assert keyed(findings) == {("reward_hacking_eval", "warning", "eval/accuracy", 40)}
    assert analyse(tmp_path / "run", eval_accuracy=(43.0, 50.0, 40)) == []


def test_on_policy_clip_fraction_zero_is_a_note_not_a_finding(tmp_path):
    metrics = healthy_metrics()
    set_from(metrics, "actor/pg_clipfrac", 1, 0.0)
    ctx = Context(series=load_run(write_events(tmp_path / "run", metrics)), thresholds=load_thresholds())
    assert apply_rules(ctx) == []
    assert any("on-policy" in n for n in notes(ctx))
    # Known off-policy low clip fractions still warn even when the recipe says on-policy is False.
    set_from(metrics, "actor/pg_clipfrac", 1, 0.01)
    findings = analyse(write_events(tmp_path / "run2", metrics), on_policy=False)
    assert keyed(findings) == {("clipfrac_low", "warning", "actor/pg_clipfrac", 1)}


def test_a_first_scoped_rule_reports_one_stretch_an_every_scoped_rule_each(tmp_path):
    metrics = healthy_metrics()
    set_from(metrics, "actor/kl_loss", 10, 3.0, end=12)
    set_from(metrics, "actor/kl_loss", 28, 3.0, end=30)
    set_from(metrics, "actor/pg_clipfrac", 5, 0.45, end=15)
    set_from(metrics, "actor/pg_clipfrac", 25, 0.45, end=35)
    found = sorted((f.rule, f.step) for f in analyse(write_events(tmp_path / "run", metrics)))
    assert found == [("clipfrac_high", 5), ("clipfrac_high", 25), ("kl_explosion", 10)]
    scopes = {r.name: r.scope for r in RULES}
    assert scopes["kl_explosion"] == "first" and scopes["clipfrac_high"] == "every"
    assert set(scopes.values()) == {"first", "every"} and len(scopes) == len(RULES)


def test_jsonl_file_logger_gives_the_same_findings(tmp_path):
    metrics = healthy_metrics()
    _nan_pg_loss(metrics)
    _length_collapse(metrics)
    run = tmp_path / "run"
    write_jsonl(run / "verl_grpo" / "exp.jsonl", metrics)
    assert keyed(analyse(run)) == {
        ("non_finite", "critical", "actor/pg_loss", 17),
        ("length_collapse", "warning", "response_length/mean", 22),
    }


def test_resumed_run_later_points_win(tmp_path):
    bad = healthy_metrics()
    _nan_pg_loss(bad)
    write_events(tmp_path / "run" / "first", bad)
    # The resumed run re-logs steps from 15 with good values.
    good = healthy_metrics()
    write_events(tmp_path / "run" / "resumed", {t: {s: v for s, v in p.items() if s >= 15} for t, p in good.items()})
    series = load_run(tmp_path / "run")
    assert np.isfinite(series["actor/pg_loss"].values).all()
    assert len(series["actor/pg_loss"]) == 40


def test_other_jsonl_files_are_ignored(tmp_path):
    run = write_events(tmp_path / "run", healthy_metrics())
    (run / "samples.jsonl").write_text('{"prompt": "x", "output": "y", "acc": 1}\n')
    assert set(load_run(run)) == set(healthy_metrics())


def test_runs_and_running_median():
    assert runs(np.array([0, 1, 1, 0, 1, 1, 1], bool), 2) == [(1, 2), (4, 6)]
    assert runs(np.array([1, 0, 1], bool), 2) == []
    med = running_median(np.array([1.0, np.nan, 3.0, 5.0, 100.0]), window=3, min_history=2)
    assert np.isnan(med[:3]).all()
    assert med[3] == 2.0 and med[4] == 4.0


def test_threshold_override_changes_the_outcome(tmp_path):
    metrics = healthy_metrics()
    _grad_spike(metrics)
    run = write_events(tmp_path / "run", metrics)
    ctx = Context(series=load_run(run), thresholds=load_thresholds({"grad_norm": {"spike_factor": 50.0}}))
    assert apply_rules(ctx) == []


def test_threshold_override_rejects_unknown_keys():
    from npu_rl.errors import UserError

    with pytest.raises(UserError, match="grad_norm.spike"):
        load_thresholds({"grad_norm": {"spike": 3}})
    with pytest.raises(UserError, match="spike_factor"):
        load_thresholds({"grad_norm": {"spike_factor": "high"}})


def test_defaults_follow_the_recipe_text():
    t = load_thresholds()
    # 训练指标: clip fraction >30% too aggressive, <5% too constrained.
    assert (t.pg_clipfrac.high_above, t.pg_clipfrac.low_below) == (0.30, 0.05)
    assert "actor/pg_loss" in t.nonfinite.metrics
    assert DS in VAL_ACC
