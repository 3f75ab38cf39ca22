"""The answer forms that MATH solutions use routinely and a grader can get wrong:
mixed numbers, repeating decimals, reordered unions, inequalities for intervals,
"x = a or x = b" for lists. Each is accepted when it is the answer, and refused
when one digit or one bracket differs."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_rl.reward.equiv import judge

EQUIVALENT = [
    # mixed numbers, either side, with \dfrac, spaces, signs and the one-digit shorthand
    ("2\\frac{1}{3}", "\\frac{7}{3}"),
    ("2\\dfrac{1}{3}", "\\frac73"),
    ("2 \\frac{1}{3}", "\\frac{7}{3}"),
    ("2\\frac13", "\\frac{7}{3}"),
    ("-3\\frac{8}{9}", "-\\frac{35}{9}"),
    ("\\frac{9}{5}", "1\\frac{4}{5}"),
    ("1.8", "1\\frac{4}{5}"),
    ("1\\frac{4}{5}\\text{ inches}", "1\\frac{4}{5}"),
    ("137 \\frac{1}{2}", "275/2"),
    ("(2\\frac{1}{2}, 1)", "(\\frac52, 1)"),
    # repeating decimals
    ("0.\\overline{3}", "\\frac13"),
    (".\\overline{3}", "\\frac{1}{3}"),
    ("0.1\\overline{6}", "\\frac16"),
    ("4.\\overline{6}", "\\frac{14}{3}"),
    ("0.053\\overline{571428}", "\\frac{3}{56}"),
    ("-3.\\overline{8}", "-\\frac{35}{9}"),
    ("0.\\overline{9}", "1"),
    ("0.\\bar{6}", "\\frac23"),
    ("0.\\overline{142857}", "\\frac17"),
    # unions of intervals in another order
    ("(3,\\infty)\\cup(-\\infty,2)", "(-\\infty, 2) \\cup (3, \\infty)"),
    ("(9,36) \\cup (0,9)", "(0,9) \\cup (9,36)"),
    ("[5,6) \\cup (1,2] \\cup \\{8\\}", "(1,2] \\cup \\{8\\} \\cup [5,6)"),
    # inequalities for intervals
    ("2 \\le x < 5", "[2,5)"),
    ("2 \\leq x < 5", "[2,5)"),
    ("5 > x \\geq 2", "[2,5)"),
    ("x > 5", "(5,\\infty)"),
    ("5 < x", "(5,\\infty)"),
    ("x \\ge 2", "[2, \\infty)"),
    ("x \\le 0", "(-\\infty, 0]"),
    ("-\\sqrt{3} < t < \\sqrt{3}", "(-\\sqrt{3}, \\sqrt{3})"),
    ("\\frac{3}{5} < x \\le \\frac{8}{3}", "\\left(\\frac{3}{5},\\frac{8}{3}\\right]"),
    ("-2 \\le x \\le 7", "x \\in [-2,7]"),
    ("x > 2 \\text{ and } x < 5", "(2, 5)"),
    ("x < 2 \\text{ or } x > 3", "(-\\infty, 2) \\cup (3, \\infty)"),
    ("x > 3 \\text{ or } x < 2", "(-\\infty, 2) \\cup (3, \\infty)"),
    ("x \\neq 2", "(-\\infty,2)\\cup(2,\\infty)"),
    ("x \\in \\mathbb{R}", "(-\\infty,\\infty)"),
    # lists written as alternatives
    ("x = -2 \\text{ or } x = 3", "-2, 3"),
    ("x = 3 \\text{ or } x = -2", "-2, 3"),
    ("x = -2 \\quad \\text{or} \\quad x = 3", "-2, 3"),
    ("x=-2, x=3", "-2,3"),
    ("x_1 = -2, x_2 = 3", "-2,3"),
    ("x = -2, 3", "3, -2"),
    ("-2 \\text{ or } 3", "\\{-2, 3\\}"),
    ("3, 5, \\text{ and } 7", "3, 5, 7"),
    ("x = 3, x = 5, \\text{ or } x = 7", "7, 5, 3"),
    ("x = 1 + \\sqrt{19} \\text{ or } x = 1 - \\sqrt{19}", "1 \\pm \\sqrt{19}"),
    ("x = -2 \\lor x = 3", "-2, 3"),
    # exponents written without braces mean the whole number
    ("x^23", "x^{23}"),
    ("2^10", "1024"),
]

DIFFERENT = [
    ("\\frac{4}{5}", "1\\frac{4}{5}"),  # the whole part lost: a product reading would accept this
    ("2\\frac{4}{5}", "1\\frac{4}{5}"),
    ("2\\frac{1}{3}", "\\frac{2}{3}"),
    ("2\\frac{1}{3}", "\\frac{8}{3}"),
    ("2\\frac{4}{3}", "\\frac{10}{3}"),  # not a proper fraction, so no mixed number: 2 * 4/3
    ("0.\\overline{4}", "\\frac13"),
    ("0.\\overline{3}", "0.3"),
    ("0.333", "\\frac13"),  # a finite decimal is exactly itself: no rounding
    ("0.333333", "\\frac13"),
    ("0.1\\overline{7}", "\\frac16"),
    ("(3,\\infty)\\cup(-\\infty,3)", "(-\\infty, 2) \\cup (3, \\infty)"),
    ("(3,\\infty)\\cup(-\\infty,2]", "(-\\infty, 2) \\cup (3, \\infty)"),
    ("(3,\\infty)", "(-\\infty, 2) \\cup (3, \\infty)"),
    ("2 < x < 5", "[2,5)"),
    ("2 \\le x \\le 5", "[2,5)"),
    ("3 \\le x < 5", "[2,5)"),
    ("x \\ge 5", "(5,\\infty)"),
    ("x < 5", "(5,\\infty)"),
    ("x > 2 \\text{ or } x < 5", "(2, 5)"),
    ("x < 2 \\text{ and } x > 3", "(-\\infty, 2) \\cup (3, \\infty)"),
    ("x = -2 \\text{ or } x = 4", "-2, 3"),
    ("x = -2", "-2, 3"),
    ("x = -2 \\text{ or } x = 3 \\text{ or } x = 4", "-2, 3"),
    ("x = 5 \\text{ or } x = 6", "5"),  # alternatives are a list, never the scalar they include
    ("x \\ge 5", "5"),
    ("x^23", "x^2 \\cdot 3"),
    ("\\sqrt23", "\\sqrt{23}"),  # TeX reads sqrt(2)*3, a reader sqrt(23): refused on both paths
    ("\\sqrt23", "3\\sqrt{2}"),
    ("\\frac432", "\\frac{8}{3}"),
]


@pytest.mark.parametrize("pred, gt", EQUIVALENT)
def test_forms_are_accepted(reward, respond, pred, gt):
    assert reward.compute_score("math", respond(f"\\boxed{{{pred}}}"), gt)["acc"] == 1.0


@pytest.mark.parametrize("pred, gt", DIFFERENT)
def test_near_misses_of_the_forms_are_rejected(reward, respond, pred, gt):
    assert reward.compute_score("math", respond(f"\\boxed{{{pred}}}"), gt)["acc"] == 0.0


@pytest.mark.parametrize("pred, gt", EQUIVALENT + DIFFERENT)
def test_the_forms_are_decided_on_the_fast_path(pred, gt):
    assert judge(pred, gt) is not None


fractions = st.fractions(min_value=-50, max_value=50, max_denominator=60)


@settings(max_examples=150, deadline=None)
@given(whole=st.integers(1, 999), num=st.integers(1, 98), den=st.integers(2, 99), other=fractions)
def test_a_mixed_number_is_its_improper_fraction_and_nothing_else(whole, num, den, other):
    if num >= den:
        num = num % (den - 1) + 1
    value = whole + Fraction(num, den)
    mixed = f"{whole}\\frac{{{num}}}{{{den}}}"
    assert judge(mixed, f"\\frac{{{value.numerator}}}{{{value.denominator}}}") is True
    assert judge(f"-{mixed}", f"-\\frac{{{value.numerator}}}{{{value.denominator}}}") is True
    assert judge(mixed, f"\\frac{{{other.numerator}}}{{{other.denominator}}}") is (other == value)


def _repeating(f: Fraction) -> tuple[str, str, str] | None:
    """(whole, fixed digits, period) by long division, independently of the reward's reading."""
    whole, rem = divmod(abs(f.numerator), f.denominator)
    digits, seen = [], {}
    while rem and rem not in seen:
        seen[rem] = len(digits)
        rem *= 10
        digits.append(str(rem // f.denominator))
        rem %= f.denominator
    if not rem:
        return None
    k = seen[rem]
    return str(whole), "".join(digits[:k]), "".join(digits[k:])


@settings(max_examples=150, deadline=None)
@given(f=st.fractions(min_value=0, max_value=100, max_denominator=200), bump=st.integers(1, 9))
def test_a_repeating_decimal_is_its_fraction_and_a_changed_digit_is_not(f, bump):
    parts = _repeating(f)
    if parts is None:
        return
    whole, fixed, period = parts
    gt = f"\\frac{{{f.numerator}}}{{{f.denominator}}}"
    assert judge(f"{whole}.{fixed}\\overline{{{period}}}", gt) is True
    changed = str((int(period[0]) + bump) % 10) + period[1:]
    if set(changed) != {"9"} and set(changed) != {"0"}:  # 0.\overline{9} is 1: a different digit string can be equal
        assert judge(f"{whole}.{fixed}\\overline{{{changed}}}", gt) is False
    assert judge(f"{whole}.{fixed}{period}", gt) is False


def _bracket(closed: bool, left: bool) -> str:
    return ("[" if closed else "(") if left else ("]" if closed else ")")


@settings(max_examples=150, deadline=None)
@given(
    a=st.integers(-99, 98),
    width=st.integers(1, 50),
    lo_closed=st.booleans(),
    hi_closed=st.booleans(),
    flip=st.sampled_from(["lo", "hi", None]),
)
def test_an_inequality_is_the_interval_it_describes(a, width, lo_closed, hi_closed, flip):
    b = a + width
    interval = f"{_bracket(lo_closed, True)}{a}, {b}{_bracket(hi_closed, False)}"
    lo_c, hi_c = lo_closed != (flip == "lo"), hi_closed != (flip == "hi")
    le, ge = "\\le", "\\ge"
    inequality = f"{a} {le if lo_c else '<'} x {le if hi_c else '<'} {b}"
    assert judge(inequality, interval) is (flip is None)
    one_sided = f"x {ge if lo_c else '>'} {a}"
    assert judge(one_sided, f"{_bracket(lo_closed, True)}{a}, \\infty)") is (flip != "lo")


@settings(max_examples=100, deadline=None)
@given(
    starts=st.lists(st.integers(-40, 40), min_size=2, max_size=4, unique=True),
    order=st.randoms(use_true_random=False),
    bump=st.booleans(),
)
def test_a_union_is_its_intervals_in_any_order(starts, order, bump):
    starts.sort()
    pieces = [f"({10 * s}, {10 * s + 5}]" for s in starts]
    shuffled = pieces[:]
    order.shuffle(shuffled)
    if bump:
        shuffled[0] = shuffled[0].replace(",", " + 1,", 1)  # one endpoint off by one
    assert judge(" \\cup ".join(shuffled), " \\cup ".join(pieces)) is (not bump)


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.integers(-30, 30), min_size=2, max_size=5, unique=True),
    order=st.randoms(use_true_random=False),
    change=st.integers(0, 4),
)
def test_alternatives_are_the_list_of_their_values(values, order, change):
    gt = ", ".join(map(str, values))
    said = values[:]
    order.shuffle(said)
    assert judge(" \\text{ or } ".join(f"x = {v}" for v in said), gt) is True
    said[change % len(said)] += 100
    assert judge(" \\text{ or } ".join(f"x = {v}" for v in said), gt) is False
