"""The recipe's graded rubric: format (tags) and chain-of-thought (numbered steps).

Both parts are measured as a fraction in [0, 1] of their weight, so the recipe's
weights (``npu_rl.recipe.schema.RewardWeights``, the one place they live) can change
without touching the rules. With the default weight 0.2 the format rules give
exactly the recipe's 0.05 per tag and min(0.001 per char, 0.1) stray-text penalty.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from npu_rl.recipe.schema import RewardWeights

# Each tag must occur exactly once, with the newlines the prompt asks for.
FORMAT_TAGS = ("<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>")
_STRAY_PER_CHAR = 0.005  # of the format weight: 0.001 points per char at weight 0.2
_STRAY_CAP = 0.5  # of the format weight: 0.1 points at weight 0.2

_STEP_RE = re.compile(r"^(?:step\s*(\d{1,6})\s*[:.]|\(?\[?\s*(\d{1,6})\s*[.)\]])\s*(.+)$", re.IGNORECASE)
COT_KEYWORDS = (
    "solve", "equation", "calculate", "substitute", "therefore", "because", "thus",
    "sum", "product", "derivative", "integral",
)  # fmt: skip


@dataclass(frozen=True)
class Weights:
    accuracy: float
    format: float
    cot: float


@lru_cache(maxsize=64)
def _weights_from_items(items: tuple[tuple[str, float], ...]) -> Weights:
    w = RewardWeights(**dict(items))  # validates names and signs like the recipe does
    return Weights(w.accuracy, w.format, w.cot)


def weights_from(value: Mapping[str, Any] | Any | None) -> Weights:
    """Weights from a recipe mapping (verl's reward_kwargs), a RewardWeights, or the defaults."""
    if value is None:
        return _weights_from_items(())
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    return _weights_from_items(tuple(sorted((str(k), float(v)) for k, v in dict(value).items())))


def _stray_penalty(text: str) -> float:
    n = len(text.strip())
    return min(n * _STRAY_PER_CHAR, _STRAY_CAP) if n else 0.0


def format_fraction(response: str) -> float:
    """Fraction of the format weight earned: 1/4 per tag present exactly once, minus stray text."""
    starts = [response.find(t) for t in ("<think>", "</think>", "<answer>", "</answer>")]
    think_open, think_close, answer_open, answer_close = starts
    # Tags out of order earn nothing, whatever else is right.
    if -1 < think_close < think_open or -1 < answer_open < think_close or -1 < answer_close < answer_open:
        return 0.0
    frac = sum(0.25 for tag in FORMAT_TAGS if response.count(tag) == 1)
    if think_open > 0:
        frac = max(frac - _stray_penalty(response[:think_open]), 0.0)
    if answer_close != -1:
        frac = max(frac - _stray_penalty(response[answer_close + len("</answer>") :]), 0.0)
    return frac


def _think_block(response: str) -> str | None:
    start, end = response.find("<think>"), response.find("</think>")
    if start == -1 or end == -1:
        return None
    return response[start + len("<think>") : end]


def cot_fraction(response: str) -> float:
    """Fraction of the CoT weight: 1 for >= 3 numbered steps in sequence with >= 2 reasoning
    steps, 1/2 for >= 2 with >= 1, else 0."""
    block = _think_block(response)
    if not block:
        return 0.0
    expected, in_sequence, reasoning = 1, 0, 0
    for line in block.split("\n"):
        m = _STEP_RE.match(line.strip())
        if not m:
            continue
        number, text = int(m.group(1) or m.group(2)), m.group(3).strip()
        if len(text) <= 3:  # a bare "1." heading is not a step
            continue
        if number == expected:
            in_sequence += 1
            expected += 1
        lowered = text.lower()
        if any(k in lowered for k in COT_KEYWORDS):
            reasoning += 1
    if in_sequence >= 3 and reasoning >= 2:
        return 1.0
    if in_sequence >= 2 and reasoning >= 1:
        return 0.5
    return 0.0
