"""The health report on a multi-turn run: tool calls the sandbox did not run, rollouts cut by the turn cap,
and the throughput card's split of a rollout's time between generating and waiting on tools. Curves go
through real TensorBoard event files, as a run writes them."""

from __future__ import annotations

from report_synth import healthy_metrics, with_timing, write_events

from npu_rl.patches.reward_parts import AGENT_TIMINGS, agent_loop_means
from npu_rl.recipe import load_recipe
from npu_rl.report.rules import Context, apply_rules
from npu_rl.report.scalars import load_run
from npu_rl.report.thresholds import load_thresholds
from npu_rl.report.throughput import throughput_card

STEPS = range(1, 21)


def _agent_run(tmp_path, errors_from: int | None = None, turns_max=lambda s: 4, all_fail: bool = False):
    m = healthy_metrics()
    m["reward/tool_calls"] = {s: 0.9 for s in STEPS}
    errors = {s: 0.0 for s in STEPS}
    if errors_from is not None:
        errors.update({s: 0.9 if all_fail else 0.3 for s in STEPS if s >= errors_from})
    m["reward/tool_errors"] = errors
    m["training/num_turns/max"] = {s: turns_max(s) for s in STEPS}
    return load_run(write_events(tmp_path / "run", m))


def _findings(series, cap=None):
    return apply_rules(Context(series=series, thresholds=load_thresholds(), turn_cap=cap))


def test_a_healthy_agent_run_has_no_agent_finding(tmp_path):
    rules = {f.rule for f in _findings(_agent_run(tmp_path), cap=5)}
    assert not rules & {"tool_errors", "turns_at_cap"}


def test_failing_tool_calls_are_found_where_they_start(tmp_path):
    (f,) = [f for f in _findings(_agent_run(tmp_path, errors_from=12)) if f.rule == "tool_errors"]
    assert (f.step, f.severity) == (12, "warning") and "33% of tool calls did not run" in f.message


def test_every_call_failing_is_critical(tmp_path):
    (f,) = [f for f in _findings(_agent_run(tmp_path, errors_from=15, all_fail=True)) if f.rule == "tool_errors"]
    assert (f.step, f.severity) == (15, "critical")


def test_rollouts_at_the_turn_cap_are_found(tmp_path):
    series = _agent_run(tmp_path, turns_max=lambda s: 5 if s >= 8 else 4)
    (f,) = [f for f in _findings(series, cap=5) if f.rule == "turns_at_cap"]
    assert f.step == 8 and "cap of 5 turns" in f.message
    assert not [f for f in _findings(series, cap=None) if f.rule == "turns_at_cap"]  # no cap known, no rule


def test_the_card_splits_generation_from_waiting_on_tools(tmp_path):
    m = with_timing(healthy_metrics(), sequences=64, devices=2)
    m[AGENT_TIMINGS["generate_sequences"]] = {s: 3.0 for s in m["timing_s/step"]}
    m[AGENT_TIMINGS["tool_calls"]] = {s: 1.0 for s in m["timing_s/step"]}
    card = throughput_card(load_run(write_events(tmp_path / "run", m)), load_recipe("tiny_agent_cpu"))
    assert card.agent_loop == (3.0, 1.0)
    assert "agent loop, per rollout: 3 s generating, 1 s waiting on tools (25% of the two)" in card.text_lines()


def test_the_step_means_of_what_each_rollout_timed():
    per_sample = [{"generate_sequences": 2.0, "tool_calls": 1.0}, {"generate_sequences": 4.0, "tool_calls": 0.0}, None]
    tags = [{}, {}, {"is_padding": True}]
    assert agent_loop_means(per_sample, tags) == {
        AGENT_TIMINGS["generate_sequences"]: 3.0,
        AGENT_TIMINGS["tool_calls"]: 0.5,
    }


def test_the_cap_is_the_most_turns_verls_loop_lets_a_rollout_have():
    from npu_rl.report.builder import _turn_cap

    # Caps 16/16 (both upstream recipes): the policy's 16th turn ends it after 15 tool answers.
    assert _turn_cap(load_recipe("qwen3_4b_retool_dapo_a3")) == 32
    assert _turn_cap(load_recipe("qwen3_1_7b_code_toolcall_a2")) == 32
    assert _turn_cap(load_recipe("tiny_agent_cpu")) == 6  # 3 turns of the policy, 2 tool answers
    assert _turn_cap(load_recipe("tiny_math_cpu")) is None
