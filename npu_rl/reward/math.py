"""MATH reward for verl: correctness first, then format and chain of thought.

verl loads this file by path (``custom_reward_function.path``) as a standalone module, so it imports only
absolutely. ``compute_score`` serves verl's ``naive`` reward manager, ``compute_score_batch`` its ``batch``
manager; both take the recipe's ``weights`` and ``timeout_s`` through ``custom_reward_function.reward_kwargs``.

score = w_acc * acc + acc * (format + cot): a wrong answer earns nothing, so the policy cannot farm format
points. An answer that restates a computation between numerals (``17 \\times 23`` for 391) is not right
whatever its value (:mod:`npu_rl.reward.evaluated`); ``unevaluated`` says it was one, ``boxed`` that the final
answer was in the ``\\boxed{}`` the prompt asks for. The returned ``format`` and ``cot`` are what the
response's form would earn (logged even when the answer is wrong, to watch the format being learnt); ``pred``
is the extracted final answer ("" if none). verl keeps these parts per sample, and the ``reward_parts`` patch
logs their step means as ``reward/<part>``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any

from npu_rl.reward.equiv import judge
from npu_rl.reward.evaluated import unevaluated
from npu_rl.reward.extract import Extraction, extract_answer
from npu_rl.reward.rubric import Weights, cot_fraction, format_fraction, weights_from
from npu_rl.reward.worker_pool import get_pool

DEFAULT_TIMEOUT_S = 1.0
_MAX_GT_CHARS = 1000


def _timeout(value: Any) -> float:
    t = DEFAULT_TIMEOUT_S if value is None else float(value)
    if not t > 0:
        raise ValueError(f"reward timeout_s must be > 0, got {value!r}")
    return t


def _result(equal: bool, pred: str, response: str, w: Weights) -> dict[str, Any]:
    restated = unevaluated(pred)
    acc = equal and not restated
    fmt = w.format * format_fraction(response)
    cot = w.cot * cot_fraction(response)
    score = w.accuracy + fmt + cot if acc else 0.0
    boxed = bool(pred) and _extract(response).reason == "boxed"
    # Rounded so that a perfect answer scores exactly 1.0, not 0.9999999999999999.
    return {
        "score": round(score, 6),
        "acc": float(acc),
        "format": round(fmt, 6),
        "cot": round(cot, 6),
        "boxed": float(boxed),
        "unevaluated": float(restated),
        "pred": pred,
    }


def _zero(pred: str = "") -> dict[str, Any]:
    return {"score": 0.0, "acc": 0.0, "format": 0.0, "cot": 0.0, "boxed": 0.0, "unevaluated": 0.0, "pred": pred}


@lru_cache(maxsize=256)
def _extract(response: str) -> Extraction:
    # Each response is read twice in a row (its answer, then whether it was boxed): scan it once.
    return extract_answer(response)


def _fast(response: Any, ground_truth: Any) -> tuple[str, bool | None]:
    """(pred, verdict); verdict None means the symbolic fallback must decide."""
    if not isinstance(response, str) or ground_truth is None:
        return "", False
    gt = str(ground_truth).strip()
    if not gt or len(gt) > _MAX_GT_CHARS:
        return "", False
    pred = _extract(response).answer
    if pred is None:
        return "", False
    return pred, judge(pred, gt)


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: str,
    extra_info: Any = None,
    *,
    weights: Mapping[str, float] | None = None,
    timeout_s: float | None = None,
    **_: Any,
) -> dict[str, Any]:
    """Score one response; never raises, returns within ``timeout_s`` (default 1 s)."""
    w, budget = weights_from(weights), _timeout(timeout_s)
    deadline = time.monotonic() + budget
    try:
        pred, verdict = _fast(solution_str, ground_truth)
        if verdict is None:
            verdict = bool(get_pool().call(pred, str(ground_truth).strip(), deadline))
        return _result(verdict, pred, solution_str, w)
    except Exception:  # a reward that raises kills the run; one bad sample scores 0
        return _zero()


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[str],
    extra_infos: Sequence[Any] | None = None,
    *,
    weights: Mapping[str, float] | None = None,
    timeout_s: float | None = None,
    **_: Any,
) -> list[dict[str, Any]]:
    """verl ``batch`` manager entry point: cheap checks here, the symbolic rest in
    parallel worker processes, each response within its own ``timeout_s``."""
    w, budget = weights_from(weights), _timeout(timeout_s)
    n = len(solution_strs)
    results: list[dict[str, Any] | None] = [None] * n
    pending: list[tuple[int, str]] = []
    for i in range(n):
        try:  # like compute_score: one response that is not a string scores 0, the batch goes on
            pred, verdict = _fast(solution_strs[i], ground_truths[i])
            if verdict is None:
                pending.append((i, pred))
            else:
                results[i] = _result(verdict, pred, solution_strs[i], w)
        except Exception:
            results[i] = _zero()
    if pending:
        pool = get_pool()

        def slow(item: tuple[int, str]) -> None:
            i, pred = item
            try:
                verdict = pool.call(pred, str(ground_truths[i]).strip(), time.monotonic() + budget)
                results[i] = _result(bool(verdict), pred, solution_strs[i], w)
            except Exception:
                results[i] = _zero(pred)

        with ThreadPoolExecutor(max_workers=min(pool.max_workers, len(pending))) as ex:
            list(ex.map(slow, pending))
    return [r if r is not None else _zero() for r in results]


def warm_up(wait_s: float = 0.0) -> None:
    """Start the spare worker processes now so the first slow check does not wait for one."""
    pool = get_pool()
    pool.start(pool.spares, wait_s=wait_s)


# verl imports this file when the trainer starts, long before the first step is
# scored: start a worker in the background so it is ready by then.
threading.Thread(target=warm_up, daemon=True, name="npu-rl-reward-warmup").start()
