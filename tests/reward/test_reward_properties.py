"""Property tests: whatever the strings, the reward returns a well-formed score in time."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_rl.reward.equiv import judge
from npu_rl.reward.latex_eval import equal, parse

SLACK_S = 0.3
FRAGMENTS = [
    "\\boxed{", "\\fbox{", "}", "{", "\\frac", "\\sqrt", "^", "_", "\\left(", "\\right)", "(", ")", "[", "]",
    "\\{", "\\}", ",", "=", "\\pi", "e", "i", "x", "9", "0", "1", ".", "-", "+", "/", "\\cdot", "!", "|",
    "<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>", "\\text{", "\\begin{pmatrix}", "\\end{pmatrix}",
    "\\\\", "&", "\\infty", "\\cup", "^\\circ", "\\%", "$", " ", "\n", "Step 1: solve", "\\lfloor", "\\rfloor",
    "\\le", "<", ">", "\\ne", " \\text{ or } ", " and ", "\\overline{", "\\max(", "2\\frac13", "0.", "\\pm",
]  # fmt: skip
latexish = st.lists(st.sampled_from(FRAGMENTS), max_size=60).map("".join)
anything = st.one_of(st.text(max_size=300), latexish)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check(reward, response: str, gt: str) -> None:
    start = time.monotonic()
    r = reward.compute_score("math", response, gt, timeout_s=0.5)
    assert time.monotonic() - start < 0.5 + SLACK_S
    assert set(r) == {"score", "acc", "format", "cot", "boxed", "unevaluated", "pred"}
    assert 0.0 <= r["score"] <= 1.0 and r["acc"] in (0.0, 1.0) and isinstance(r["pred"], str)
    assert r["score"] == 0.0 or r["acc"] == 1.0  # no points without the right answer


@SETTINGS
@given(response=anything, gt=anything)
def test_random_strings_never_raise_and_stay_in_budget(reward, response, gt):
    _check(reward, response, gt)


@SETTINGS
@given(answer=latexish, gt=st.sampled_from(["3", "\\frac{1}{2}", "(1,2]", "\\{1,2\\}", "x+1", "\\text{(B)}"]))
def test_adversarial_boxed_answers_never_raise_and_stay_in_budget(reward, answer, gt):
    _check(reward, f"<think>\nStep 1: solve\n</think>\n<answer>\n\\boxed{{{answer}}}\n</answer>", gt)


@settings(max_examples=100, deadline=None)
@given(a=st.integers(-(10**6), 10**6), b=st.integers(1, 10**6), c=st.integers(-(10**6), 10**6), d=st.integers(1, 10**6))
def test_fractions_are_equal_exactly_when_their_values_are(a, b, c, d):
    left, right = parse(f"\\frac{{{a}}}{{{b}}}"), parse(f"{c}/{d}")
    assert equal(left, right) is (a * d == c * b)


@settings(max_examples=100, deadline=None)
@given(s=latexish)
def test_equivalence_is_reflexive(s):
    assert judge(s, s) is True


@pytest.mark.parametrize("response", [None, 3, b"\\boxed{1}", ["\\boxed{1}"], 2.5])
def test_batch_entry_scores_non_strings_zero_and_keeps_the_rest(response):
    from npu_rl.reward.math import compute_score_batch

    out = compute_score_batch(["m", "m"], [response, "so \\boxed{1}"], ["1", "1"])
    assert out[0]["score"] == 0.0 and out[1]["acc"] == 1.0
