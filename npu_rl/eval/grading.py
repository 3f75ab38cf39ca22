"""Grades generated answers with the same reward function training uses, so the
local accuracy is the reward's ``acc`` part and not a second, diverging grader."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import UserError

DEFAULT_REWARD = "npu_rl.reward.math"


class Grader(Protocol):
    def __call__(
        self, data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None
    ) -> Any: ...


@dataclass(frozen=True)
class Grade:
    acc: float
    score: float
    pred: str | None = None
    boxed: float | None = None  # the answer was in the \\boxed{} the prompt asks for (None: the reward does not say)


def load_grader(module: str = DEFAULT_REWARD, name: str = "compute_score") -> Grader:
    # Imported on use: the reward pulls in math-verify/sympy, which `npu-rl --help` should not pay for.
    try:
        mod = importlib.import_module(module)
    except ImportError as err:
        raise UserError(f"reward module {module!r} cannot be imported ({err})") from None
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise UserError(f"reward module {module!r} has no function {name!r}")
    return fn


def to_grade(result: Any) -> Grade:
    """The reward returns a dict (score, acc, format, cot, pred) or, like verl's own, a bare number."""
    if isinstance(result, dict):
        score = float(result.get("score", 0.0))
        acc = float(result["acc"]) if "acc" in result else float(score > 0)
        pred, boxed = result.get("pred"), result.get("boxed")
        return Grade(
            acc=acc,
            score=score,
            pred=None if pred is None else str(pred),
            boxed=None if boxed is None else float(boxed),
        )
    score = float(result)
    return Grade(acc=float(score > 0), score=score)


def grade(
    grader: Callable[..., Any], data_source: str, output: str, ground_truth: str, extra_info: dict | None
) -> Grade:
    return to_grade(grader(data_source, output, ground_truth, extra_info=extra_info))
