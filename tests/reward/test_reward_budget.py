"""Bounded time and thread safety: pathological inputs, stuck sympy, many threads at once."""

from __future__ import annotations

import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

# Scheduling slack on a loaded 2-core CI box; the reward itself stops 50 ms early.
SLACK_S = 0.3
KEYS = {"score", "acc", "format", "cot", "boxed", "unevaluated", "pred"}

PATHOLOGICAL = [
    ("x" * 100_000 + "\\boxed{3}", "3"),
    ("\\boxed{" + "{" * 3000 + "1" + "}" * 3000 + "}", "1"),
    ("\\boxed{" + "{" * 3000, "1"),
    ("\\boxed{9^{9^{9^{9}}}}", "3"),
    ("\\boxed{" + "\\frac{" * 500 + "1" + "}{2}" * 500 + "}", "1"),
    ("\\boxed{" + "(" * 2000 + ")" * 2000 + "}", "1"),
    ("<think>\n" + "Step 1: solve\n" * 20_000 + "</think>\n<answer>\n\\boxed{3}\n</answer>", "3"),
]


def _timed(fn, *args, **kwargs):
    start = time.monotonic()
    out = fn(*args, **kwargs)
    return out, time.monotonic() - start


@pytest.mark.parametrize("response, gt", PATHOLOGICAL, ids=range(len(PATHOLOGICAL)))
def test_pathological_inputs_return_within_budget(reward, response, gt):
    r, elapsed = _timed(reward.compute_score, "math", response, gt, timeout_s=1.0)
    assert set(r) == KEYS and 0.0 <= r["score"] <= 1.0
    assert elapsed < 1.0 + SLACK_S


def test_a_slow_symbolic_check_scores_zero_within_budget(reward, respond):
    # Outside the fast subset (\lfloor), so the worker's sympy gets it and starts on 9^(9^9).
    slow = respond("\\boxed{\\lfloor 9^{9^{9}} \\rfloor}")
    r, elapsed = _timed(reward.compute_score, "math", slow, "2", timeout_s=0.5)
    assert r["acc"] == 0.0 and elapsed < 0.5 + SLACK_S
    ok, _ = _timed(reward.compute_score, "math", respond("\\boxed{\\lfloor 2.5 \\rfloor}"), "2", timeout_s=5.0)
    assert ok["acc"] == 1.0


def test_a_worker_deaf_to_signals_is_killed_and_replaced():
    """A worker stuck in C code ignores its own timer; SIGSTOP makes one that is deaf for sure."""
    from npu_rl.reward.worker_pool import WorkerPool

    pool = WorkerPool(max_workers=1)
    try:
        pool.start(1, wait_s=60)
        (stuck,) = pool._idle
        os.kill(stuck.proc.pid, signal.SIGSTOP)
        start = time.monotonic()
        verdict = pool.call("\\lfloor 2.5 \\rfloor", "2", start + 0.5)
        assert verdict is None and time.monotonic() - start < 0.5 + SLACK_S
        assert pool.timeouts == 1 and stuck.proc.wait(timeout=5) is not None
        # Its replacement was started off the caller's clock and answers the next call.
        assert pool.call("\\lfloor 2.5 \\rfloor", "2", time.monotonic() + 60) is True
    finally:
        pool.close()


def test_threads_get_the_same_answers_as_the_main_thread(reward, respond):
    cases = [
        (respond("\\boxed{0.25}"), "\\frac14"),
        (respond("\\boxed{\\lfloor 2.5 \\rfloor}"), "2"),  # worker process path
        (respond("\\boxed{4, 5}"), "5"),
        (respond("\\boxed{x^2+2x+1}"), "(x+1)^2"),
        (respond("\\boxed{1/2^{99}}"), "1/2^{98}"),
        ("junk \\boxed{7}", "7"),
    ] * 4
    expected = [reward.compute_score("math", r, g, timeout_s=5.0) for r, g in cases]
    with ThreadPoolExecutor(max_workers=6) as ex:
        got = list(ex.map(lambda c: reward.compute_score("math", c[0], c[1], timeout_s=5.0), cases))
    assert got == expected
    assert {e["acc"] for e in expected} == {0.0, 1.0}


def test_batch_entry_point_matches_single_calls(reward, respond):
    responses = [respond("\\boxed{0.5}"), respond("\\boxed{\\lfloor 2.5 \\rfloor}"), "x", respond("\\boxed{3}")]
    gts = ["\\frac12", "2", "1", "4"]
    singles = [reward.compute_score("math", r, g, timeout_s=5.0) for r, g in zip(responses, gts)]
    batch = reward.compute_score_batch(
        data_sources=["math"] * 4, solution_strs=responses, ground_truths=gts, extra_infos=[{}] * 4, timeout_s=5.0
    )
    assert batch == singles


def test_verl_loads_the_file_standalone_with_reward_kwargs(reward, respond):
    """verl imports math.py by path as "custom_module" and merges reward_kwargs into each call."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn

    saved = sys.modules.pop("custom_module", None)
    try:
        for name in ("compute_score", "compute_score_batch"):
            sys.modules.pop("custom_module", None)
            cfg = OmegaConf.create(
                {
                    "custom_reward_function": {
                        "path": reward.__file__,
                        "name": name,
                        "reward_kwargs": {"weights": {"accuracy": 0.6, "format": 0.3, "cot": 0.1}, "timeout_s": 2.0},
                    }
                }
            )
            fn = get_custom_reward_fn(cfg)
            if name == "compute_score":
                r = fn(data_source="math", solution_str=respond("\\boxed{2}"), ground_truth="2", extra_info={})
            else:
                (r,) = fn(
                    data_sources=["math"], solution_strs=[respond("\\boxed{2}")], ground_truths=["2"], extra_infos=[{}]
                )
            assert r["score"] == pytest.approx(1.0) and r["format"] == pytest.approx(0.3)
    finally:
        sys.modules.pop("custom_module", None)
        if saved is not None:
            sys.modules["custom_module"] = saved


def test_a_bad_timeout_is_a_configuration_error(reward):
    with pytest.raises(ValueError, match="timeout_s"):
        reward.compute_score("math", "\\boxed{1}", "1", timeout_s=0)


def test_workers_do_not_install_the_runs_verl_patches(monkeypatch):
    from npu_rl.reward.worker_pool import WorkerPool

    monkeypatch.setenv("NPU_RL_PATCHES", "cpu")
    pool = WorkerPool(max_workers=1)
    try:
        pool.start(1, wait_s=60)
        (worker,) = pool._idle
        environ = (Path("/proc") / str(worker.proc.pid) / "environ").read_bytes().split(b"\0")
        assert not [v for v in environ if v.startswith(b"NPU_RL_PATCHES=")]
        assert pool.call("\\lfloor 2.5 \\rfloor", "2", time.monotonic() + 60) is True
    finally:
        pool.close()
