"""The reward of an agent that answers a math question with a code interpreter at hand (ReTool's).

The answer is judged by npu-rl's math judge (npu_rl.reward.math: the last ``\\boxed{}``, symbolic
equality, a restated expression earns nothing). The score is ReTool's: +1 for a right answer, -1 for a wrong
one, as upstream's DAPO judge scores (verl 95470480 recipe/retool/retool.py ``compute_score``), less
``no_tool_penalty`` (0.4) for an answer given without a single tool call: the term cann-recipes-train's
patch 0003 (agent_rl/qwen3_tool_agent/patches/0003-Modify-compute_score-to-encourage-tool-call.patch) puts
in place of upstream's softening of wrong answers by their turns.

What the rollout did comes in ``extra_info``, which verl 0.9's reward loop fills from the agent loop
(experimental/reward_loop/reward_manager/naive.py:44-51): ``num_turns`` (the prompt, each policy turn and each
tool answer), which cann-recipes-train's patch 0001 had to add on its verl commit, and ``tool_rewards``, one
score per tool call (npu_rl.agent.code_tool scores a call ``TOOL_RAN`` where the sandbox ran it and
``TOOL_NOT_RUN`` where it did not). The parts are logged as ``reward/<part>`` like the math reward's.
"""

from __future__ import annotations

from typing import Any

from npu_rl.reward import math  # absolute: verl loads a reward function by its file path

TOOL_RAN, TOOL_NOT_RUN = 0.0, -1.0
NO_TOOL_PENALTY = 0.4


def tool_calls(extra_info: Any) -> tuple[int, int, int]:
    """(turns, tool calls, calls the sandbox did not run) of one rollout."""
    info = extra_info if isinstance(extra_info, dict) else {}
    turns = int(info.get("num_turns") or 0)
    scores = info.get("tool_rewards")
    if scores is None:
        # Upstream's count (patch 0003): a turn of the policy and the tool's answer per call, after the
        # prompt and the final answer.
        return turns, max(0, (turns - 2) // 2), 0
    scores = list(scores)
    return turns, len(scores), sum(1 for s in scores if s == TOOL_NOT_RUN)


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: str,
    extra_info: Any = None,
    *,
    no_tool_penalty: float = NO_TOOL_PENALTY,
    timeout_s: float | None = None,
    **_: Any,
) -> dict[str, Any]:
    """Score one multi-turn rollout; never raises."""
    judged = math.compute_score(data_source, solution_str, ground_truth, extra_info, timeout_s=timeout_s)
    turns, calls, errors = tool_calls(extra_info)
    right = judged["acc"] > 0
    score = (1.0 if right else -1.0) - (no_tool_penalty if calls == 0 else 0.0)
    return {
        "score": score,
        "acc": judged["acc"],
        "boxed": judged["boxed"],
        "unevaluated": judged["unevaluated"],
        "turns": float(turns),
        "tool_calls": float(calls),
        "tool_errors": float(errors),
        "pred": judged["pred"],
    }
