"""A final answer is evaluated: restating the computation between numerals (``17 \\times 23``
for 391, the expression copied from the problem) earns no accuracy, on both of the reward's
entry points, while every form MATH writes its answers in keeps its verdict."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_rl.reward.equiv import judge
from npu_rl.reward.evaluated import unevaluated

RESTATED = [
    ("17 \\times 23", "391"),
    ("2+3", "5"),
    ("-(-7)", "7"),
    ("|-7|", "7"),
    ("7 \\times (-1)", "-7"),
    ("10 - 4", "6"),
    ("2 \\cdot 3^2", "18"),
    ("\\frac{1+2}{3}", "1"),
    ("\\frac{1}{2} + \\frac{1}{3}", "\\frac{5}{6}"),
    ("12 \\div 4", "3"),
    ("6/(-2)", "-3"),
    ("x = 2+3", "5"),  # the value of an answer about x
    ("(2+3, 4)", "(5, 4)"),  # one element of a tuple is enough
    ("\\{1, 1+1\\}", "\\{1, 2\\}"),
    ("2^{2+1}", "8"),  # an exponent left as arithmetic, with an integer value
    ("2^{4/2}", "4"),
    ("(3+4)^{1/2}", "\\sqrt{7}"),  # a fractional power keeps a restated base restated
]

EVALUATED = [
    ("391", "391"),
    ("-7", "-7"),
    ("0.25", "\\frac{1}{4}"),
    ("\\frac{6}{4}", "\\frac{3}{2}"),  # unreduced fractions are a final form
    ("\\frac{-3}{4}", "-\\frac34"),
    ("2\\frac{1}{3}", "\\frac{7}{3}"),  # a mixed number
    ("2^{100}", "2^{100}"),
    ("10^{-3}", "0.001"),
    ("\\frac{1}{2^{10}}", "\\frac{1}{1024}"),
    ("6.02 \\times 10^{23}", "602000000000000000000000"),
    ("3+2\\sqrt{2}", "2\\sqrt2+3"),  # radicals are outside the rule's reach
    ("4\\pi", "4\\pi"),
    ("\\frac{\\pi}{2}", "\\frac{\\pi}{2}"),
    ("5!", "120"),
    ("\\binom{5}{2}", "10"),
    ("2x+3", "3+2x"),
    ("10,\\!080", "10080"),
    ("(5, 4)", "(5, 4)"),
]


def _both(reward, respond, pred: str, gt: str) -> list[dict]:
    response = respond(f"\\boxed{{{pred}}}")
    return [reward.compute_score("math", response, gt), reward.compute_score_batch(["math"], [response], [gt])[0]]


@pytest.mark.parametrize("pred, gt", RESTATED)
def test_a_restated_computation_earns_nothing_though_its_value_is_right(reward, respond, pred, gt):
    assert judge(pred, gt) is not False  # "equal" is about values: the rubric refuses the form
    for r in _both(reward, respond, pred, gt):
        assert (r["acc"], r["score"], r["unevaluated"]) == (0.0, 0.0, 1.0), r


@pytest.mark.parametrize("pred, gt", EVALUATED)
def test_the_forms_math_answers_in_keep_their_verdict(reward, respond, pred, gt):
    for r in _both(reward, respond, pred, gt):
        assert (r["acc"], r["unevaluated"]) == (1.0, 0.0), r


FRACTIONAL_POWERS = [
    ("51^{1/2}", "\\sqrt{51}"),
    ("51^{\\frac{1}{2}}", "\\sqrt{51}"),
    ("51^{0.5}", "\\sqrt{51}"),  # a decimal exponent is a numeral, as a decimal answer is
    ("2^{3/4}", "\\sqrt[4]{8}"),
    ("5^{-1/2}", "\\frac{\\sqrt{5}}{5}"),
    ("x^{1/3}", "\\sqrt[3]{x}"),
    ("3 \\cdot 2^{1/2}", "3\\sqrt{2}"),  # out of the rule's reach like the radical, as 3\\sqrt2 is
]


@pytest.mark.parametrize("pred, gt", FRACTIONAL_POWERS)
def test_a_fractional_power_of_a_numeral_is_a_final_form_like_its_radical(reward, respond, pred, gt):
    """A power's exponent is part of a final form: ``51^{1/2}`` is ``\\sqrt{51}``, not ``1/2`` left undone."""
    for r in _both(reward, respond, pred, gt):
        assert (r["acc"], r["score"], r["unevaluated"]) == (1.0, 1.0, 0.0), (pred, gt, r)


def test_a_wrong_restated_computation_is_counted_too(reward, respond):
    r = reward.compute_score("math", respond("\\boxed{2+2}"), "5")
    assert (r["acc"], r["unevaluated"]) == (0.0, 1.0)


_OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "\\times": lambda a, b: a * b,
    "\\cdot": lambda a, b: a * b,
    "*": lambda a, b: a * b,
}


def _numeral(n: int) -> str:
    return f"({n})" if n < 0 else str(n)


@settings(max_examples=80, deadline=None)
@given(
    a=st.integers(-999, 999),
    b=st.integers(-999, 999),
    op=st.sampled_from(sorted(_OPS)),
    wrap=st.sampled_from(["{}", "x = {}", "({}, 1)", "{} \\text{{ cm}}"]),
)
def test_any_arithmetic_between_numerals_is_unevaluated(reward, respond, a, b, op, wrap):
    value = _OPS[op](a, b)
    pred = wrap.format(f"{_numeral(a)} {op} {_numeral(b)}")
    gt = wrap.format(str(value)).replace("x = ", "")
    r = reward.compute_score("math", respond(f"\\boxed{{{pred}}}"), gt)
    assert (r["acc"], r["unevaluated"]) == (0.0, 1.0), (pred, gt, r)


@st.composite
def evaluated_forms(draw):
    """(an answer in a final form, a plain spelling of its value)."""
    kind = draw(st.sampled_from(["int", "fraction", "power", "decimal", "scientific"]))
    if kind == "int":
        n = draw(st.integers(-(10**6), 10**6))
        return str(n), str(n)
    if kind == "fraction":
        p, q = draw(st.integers(-999, 999)), draw(st.integers(1, 999))
        value = Fraction(p, q)
        return f"\\frac{{{p}}}{{{q}}}", f"\\frac{{{value.numerator}}}{{{value.denominator}}}"
    if kind == "power":
        base, exp = draw(st.integers(2, 12)), draw(st.integers(-6, 30))
        value = Fraction(base) ** exp
        return f"{base}^{{{exp}}}", f"\\frac{{{value.numerator}}}{{{value.denominator}}}"
    if kind == "decimal":
        n, places = draw(st.integers(-(10**6), 10**6)), draw(st.integers(1, 4))
        whole, frac = divmod(abs(n), 10**places)
        text = f"{'-' if n < 0 else ''}{whole}.{frac:0{places}d}"
        value = Fraction(n, 10**places)
        return text, f"\\frac{{{value.numerator}}}{{{value.denominator}}}"
    mantissa, exp = draw(st.integers(1, 9)), draw(st.integers(3, 30))
    return f"{mantissa} \\times 10^{{{exp}}}", str(mantissa * 10**exp)


@settings(max_examples=80, deadline=None)
@given(form=evaluated_forms())
def test_every_final_form_of_a_number_stays_correct(reward, respond, form):
    pred, gt = form
    assert not unevaluated(pred)
    r = reward.compute_score("math", respond(f"\\boxed{{{pred}}}"), gt)
    assert (r["acc"], r["unevaluated"]) == (1.0, 0.0), (pred, gt, r)
