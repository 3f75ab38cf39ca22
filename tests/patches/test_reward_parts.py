"""The reward's parts in every step's metrics, as means over the step's samples."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from verl import DataProto

from npu_rl.patches import reward_parts as rp
from npu_rl.reward.math import compute_score


def _metrics(non_tensors: dict):
    mod = types.SimpleNamespace(compute_data_metrics=lambda batch, use_critic=False: {"critic/score/mean": 0.5})
    rp.patch_ray_trainer(mod, check=False)  # a stand-in module: verl's call is compute_data_metrics(batch=...)
    batch = DataProto.from_dict(
        {"prompts": torch.tensor([[1, 2], [3, 4]])},
        non_tensors={k: np.array(v, dtype=object) for k, v in non_tensors.items()},
    )
    return mod.compute_data_metrics(batch=batch, use_critic=False)


def test_each_part_is_logged_as_its_mean_beside_verls_metrics():
    m = _metrics(
        {"acc": [1.0, 0.0], "format": [0.2, 0.1], "cot": [0.0, 0.0], "unevaluated": [0.0, 1.0], "pred": ["7", "2+5"]}
    )
    assert m["critic/score/mean"] == 0.5
    assert m == pytest.approx(
        {
            "critic/score/mean": 0.5,
            "reward/acc": 0.5,
            "reward/format": 0.15,
            "reward/cot": 0.0,
            "reward/unevaluated": 0.5,
        }
    )


def test_a_reward_without_parts_adds_nothing():
    assert _metrics({"uid": ["a", "b"]}) == {"critic/score/mean": 0.5}


def test_the_parts_are_what_the_recipes_rewards_return():
    from npu_rl.reward import agent, code_tests

    result = compute_score("math", "<answer>\n\\boxed{2+5}\n</answer>", "7")
    assert set(rp.MATH_PARTS) <= set(result) and all(isinstance(result[p], float) for p in rp.MATH_PARTS)
    tools = agent.compute_score("x", "\\boxed{7}", "7", {"num_turns": 4, "tool_rewards": [0.0]})
    tests = code_tests.compute_score("x", "no program", '{"inputs": ["1"], "outputs": ["1"]}')
    for parts, result_ in ((rp.AGENT_PARTS, tools), (rp.CODE_PARTS, tests)):
        assert set(parts) <= set(result_) and all(isinstance(result_[p], float) for p in parts)
    assert set(rp.PARTS) == {*rp.MATH_PARTS, *rp.AGENT_PARTS, *rp.CODE_PARTS}
    assert result["unevaluated"] == 1.0 and result["acc"] == 0.0
