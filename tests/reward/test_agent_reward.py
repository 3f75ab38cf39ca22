"""ReTool's reward as npu-rl scores it (npu_rl.reward.agent): the judge's verdict as +1/-1, less 0.4 for an
answer given without a tool call, read from what verl 0.9's reward loop puts into ``extra_info``."""

from __future__ import annotations

import importlib.util

import pytest

from npu_rl.reward import agent
from npu_rl.reward.agent import NO_TOOL_PENALTY, TOOL_NOT_RUN, TOOL_RAN, compute_score

CALLED = {"num_turns": 4, "tool_rewards": [TOOL_RAN]}  # prompt, call, the tool's answer, the final answer
DIRECT = {"num_turns": 2, "tool_rewards": []}


@pytest.mark.parametrize(
    "response, info, score",
    [
        ("<tool_call>...</tool_call> 16614 \\boxed{16614}", CALLED, 1.0),
        ("\\boxed{16614}", DIRECT, 1.0 - NO_TOOL_PENALTY),
        ("<tool_call>...</tool_call> 16614 \\boxed{16624}", CALLED, -1.0),
        ("\\boxed{16624}", DIRECT, -1.0 - NO_TOOL_PENALTY),
        ("no answer at all", DIRECT, -1.0 - NO_TOOL_PENALTY),
        # The product restated is no answer (npu_rl.reward.evaluated), with the tool or without.
        ("\\boxed{426 \\times 39}", CALLED, -1.0),
    ],
)
def test_the_score_is_retools(response, info, score):
    assert compute_score("npu_rl/arithmetic", response, "16614", info)["score"] == pytest.approx(score)


def test_the_parts_say_what_the_rollout_did():
    info = {"num_turns": 6, "tool_rewards": [TOOL_NOT_RUN, TOOL_RAN]}
    parts = compute_score("npu_rl/arithmetic", "\\boxed{16614}", "16614", info)
    assert {k: parts[k] for k in ("acc", "turns", "tool_calls", "tool_errors")} == {
        "acc": 1.0,
        "turns": 6.0,
        "tool_calls": 2.0,
        "tool_errors": 1.0,
    }


def test_without_the_tools_scores_the_count_is_upstreams_from_the_turns():
    # cann-recipes-train's patch 0003: (num_turns - 2) // 2 calls.
    assert agent.tool_calls({"num_turns": 6}) == (6, 2, 0)
    assert agent.tool_calls(None) == (0, 0, 0)


def test_verl_loads_it_by_its_path_as_a_module_of_no_package():
    # verl's custom_reward_function.path: spec_from_file_location, no parent package (a relative import fails).
    spec = importlib.util.spec_from_file_location("custom_module", agent.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.compute_score("x", "\\boxed{2}", "2", CALLED)["score"] == 1.0
