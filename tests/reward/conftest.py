"""Reward tests share one warmed-up worker pool (its start-up is a one-off per run)."""

from __future__ import annotations

import pytest

STEPS = "Step 1: Solve the equation.\nStep 2: Thus we substitute.\nStep 3: Therefore it is done."


@pytest.fixture(scope="session")
def reward():
    from npu_rl.reward import math as reward_math

    reward_math.warm_up(wait_s=60)
    return reward_math


@pytest.fixture(scope="session")
def respond():
    """A response in the recipe's format around ``answer_body``."""

    def make(answer_body: str, think: str = STEPS) -> str:
        return f"<think>\n{think}\n</think>\n<answer>\n{answer_body}\n</answer>"

    return make
