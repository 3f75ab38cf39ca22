"""Both paths hold to one definition of "equal", and the identity test is sound.

The fast path compares with latex_eval; the worker runs the same judge with the
symbolic leaf. Forcing that leaf to read everything with latex2sympy (what it
does for syntax outside latex_eval's subset) must not change a single verdict.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_reward_equivalence import DIFFERENT as TABLE_DIFFERENT
from test_reward_equivalence import EQUIVALENT as TABLE_EQUIVALENT
from test_reward_forms import DIFFERENT as FORM_DIFFERENT
from test_reward_forms import EQUIVALENT as FORM_EQUIVALENT

from npu_rl.reward import symbolic, values
from npu_rl.reward.equiv import judge
from npu_rl.reward.latex_eval import equal, parse


def sympy_only(pred: str, gt: str) -> bool:
    """The worker's leaf with every text read by latex2sympy, never by latex_eval."""
    a, b = symbolic.read(pred, prefer_tree=False), symbolic.read(gt, prefer_tree=False)
    return a is not None and b is not None and symbolic.expressions_equal(a, b)


PAIRS = [(p, g, True) for p, g in TABLE_EQUIVALENT + FORM_EQUIVALENT] + [
    (p, g, False) for p, g in TABLE_DIFFERENT + FORM_DIFFERENT
]


@pytest.mark.parametrize("pred, gt, expected", PAIRS)
def test_the_symbolic_path_gives_the_fast_paths_verdict(pred, gt, expected):
    fast = judge(pred, gt)
    if fast is None:  # \lfloor and friends: only the worker decides; it must still be right
        assert bool(judge(pred, gt, leaf=symbolic.leaf_equal)) is expected
        return
    assert fast is expected
    assert bool(judge(pred, gt, leaf=sympy_only)) is expected
    assert bool(judge(pred, gt, leaf=symbolic.leaf_equal)) is expected


# Arithmetic written as models write it: both readers must see the same number.
ATOMS = ["2", "3", "7", "0.5", "1.25", "\\frac{1}{3}", "\\frac34", "\\sqrt{2}", "\\sqrt3", "\\pi", "e", "i",
         "2\\frac{1}{2}", "0.\\overline{6}", "x", "y", "3x", "\\sqrt{x}", "|x|"]  # fmt: skip
OPS = ["+", "-", "\\cdot", "/", ""]


@st.composite
def expressions(draw, depth=2):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(ATOMS))
    left, right = draw(expressions(depth=depth - 1)), draw(expressions(depth=depth - 1))
    op = draw(st.sampled_from(OPS + ["^"]))
    if op == "^":
        return f"({left})^{{{draw(st.integers(-3, 3))}}}"
    return f"({left}) {op} ({right})" if op else f"({left})({right})"


@settings(max_examples=120, deadline=None)
@given(a=expressions(), b=expressions())
@example(a="((1.25) + (1.25))^{1}", b="(0.5) \\cdot ((2)(3))")  # 2.5 vs 3: latex2sympy once read (2)(3) as 5
def test_random_arithmetic_gets_one_verdict_on_both_paths(a, b):
    fast = judge(a, b)
    if fast is not None:
        assert bool(judge(a, b, leaf=sympy_only)) is fast


def test_the_fallback_has_the_fast_paths_exactness_not_math_verifys_rounding(reward, respond):
    # Outside latex_eval's subset (\max), so a worker decides: 0.333333 is no more 1/3 there than here.
    # What is asserted is the verdict, not the budget (test_reward_budget.py): room for a loaded machine.
    score = functools.partial(reward.compute_score, timeout_s=30.0)
    assert judge("\\max(0.333333, 0)", "\\frac13") is None
    assert score("math", respond("\\boxed{\\max(0.333333, 0)}"), "\\frac13")["acc"] == 0.0
    assert score("math", respond("\\boxed{\\max(0.25, 0)}"), "\\frac14")["acc"] == 1.0
    assert score("math", respond("\\boxed{\\max(2\\frac{1}{3}, 0)}"), "\\frac73")["acc"] == 1.0
    # latex2sympy alone reads "2 3" as the mixed number 5; here it is a product, as on the fast path.
    assert score("math", respond("\\boxed{\\lfloor 2 3 \\rfloor}"), "6")["acc"] == 1.0


def test_the_symbolic_check_decides_where_sampling_cannot(reward, respond):
    # x! is undefined at the (non-integer) sample points, so only sympy can tell.
    assert judge("(x+1)!", "(x+1) x!") is None
    assert reward.compute_score("math", respond("\\boxed{(x+1)!}"), "(x+1) x!")["acc"] == 1.0
    assert reward.compute_score("math", respond("\\boxed{(x+1)!}"), "(x+2) x!")["acc"] == 0.0


@pytest.mark.parametrize(
    "pred, gt",
    [
        ("(x-1)(x-2)(x-3)(x-4) + x", "x"),  # agrees with x at four points
        ("x^{40}", "x^{40} + 10^{-30}"),  # a difference below any float tolerance
        ("\\frac{x^2 - 1}{x - 1} + (x-\\frac{5}{4})(x-\\frac{3}{2})(x-2)", "x + 1"),
        ("x y + 1", "y x + 10^{-12} x"),
        ("|x| + |y|", "|x + y|"),  # equal wherever x and y have one sign
    ],
)
def test_agreement_at_some_points_is_no_identity(pred, gt):
    assert equal(parse(pred), parse(gt)) is False


@settings(max_examples=150, deadline=None)
@given(p=st.lists(st.integers(-9, 9), min_size=1, max_size=6), q=st.lists(st.integers(-9, 9), min_size=1, max_size=6))
def test_polynomials_are_identical_exactly_when_their_coefficients_are(p, q):
    def text(cs):
        return " + ".join(f"({c}) x^{{{k}}}" for k, c in enumerate(cs))

    def strip(cs):
        cs = list(cs)
        while cs and cs[-1] == 0:
            cs.pop()
        return cs

    assert equal(parse(text(p)), parse(text(q))) is (strip(p) == strip(q))


def test_sample_points_are_random_rationals_from_a_fixed_seed():
    positive, signed = values.sample_points(["x", "y"])
    assert len(positive) + len(signed) >= 2 * values.MIN_AGREEING
    assert all(isinstance(v, Fraction) and v > 0 for env in positive for v in env.values())
    assert all(any(v < 0 for v in env.values()) for env in signed)
    assert len({env["x"] for env in positive + signed}) == len(positive + signed)
    assert values.sample_points(["x", "y"]) == (positive, signed)
    code = "from npu_rl.reward import values; print(values.sample_points(['x', 'y']))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert other.strip() == repr((positive, signed))  # every worker process draws the same points
