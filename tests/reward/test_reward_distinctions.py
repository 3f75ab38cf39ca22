"""Answers that look alike are judged by what they say: equations about different
variables, quantities in different units, tiny numbers against 0 and pi against its
decimals, words in another case.

Each pair is scored through ``compute_score``, by the worker process, and by the
judge with every leaf read and compared by sympy, so both paths give one verdict.
"""

from __future__ import annotations

import subprocess
import sys
import time
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_reward_paths import sympy_only

from npu_rl.reward.equiv import judge
from npu_rl.reward.worker_pool import get_pool

PI_50 = "3.14159265358979323846264338327950288419716939937510"

PAIRS = [
    # an equation's left-hand side is dropped only when it is the variable the answer is about
    ("x = 5", "5", True),
    ("5", "x = 5", True),
    ("x=5", "x=5", True),
    ("x = 5", "x=5", True),
    ("x_{1} = 3", "x_1 = 3", True),
    ("f(x) = x^2", "x^2", True),
    ("y = 2x+3", "x = 2x+3", False),
    ("y=5", "x=5", False),
    ("x = 5", "y = 5", False),
    ("y = 2x + 3", "y=3+2x", True),
    ("2x - y + 3 = 0", "y = 2x + 3", True),  # the same line, as an equation
    ("5 = x", "x = 5", True),
    ("y = -2x", "x = -2y", False),
    ("x = -2 \\text{ or } x = 3", "x = -2, 3", True),
    ("y = -2 \\text{ or } y = 3", "x = -2, 3", False),
    # units: the same in any spelling, or none on one side; never a different one
    ("5\\text{ cm}", "5\\text{ m}", False),
    ("5\\text{ cm}", "5\\mbox{ cm}", True),
    ("5 cm", "5\\text{cm}", True),
    ("5\\text{ centimeters}", "5\\text{ cm}", True),
    ("5", "5\\text{ cm}", True),
    ("5\\text{ cm}", "5", True),
    ("6\\text{ cm}", "5\\text{ cm}", False),
    ("15\\mbox{ cm}^2", "15\\text{ cm}", False),
    ("15 \\text{ square centimeters}", "15\\mbox{ cm}^2", True),
    ("864 \\text{ inches}^2", "864 \\mbox{ feet}^2", False),
    ("\\$5", "5\\text{ cents}", False),
    ("\\$5", "5 \\text{ dollars}", True),
    ("2 \\text{ hours}", "2 \\text{ minutes}", False),
    ("12 \\text{ square units}", "12", True),  # MATH's placeholder names no unit
    ("30^\\circ", "30 \\text{ degrees}", True),  # degrees are as they always were: dropped
    ("30^\\circ", "30", True),
    # small numbers: rationals exact, irrationals relative, no absolute floor
    ("e^{-100}", "0", False),
    ("10^{-50}", "0", False),
    ("0", "e^{-100}", False),
    ("e^{-100}", "\\frac{1}{e^{100}}", True),
    ("e^{-100}", "3.720075976020836 \\cdot 10^{-44}", False),  # both under 1e-40: a floor would call them equal
    ("\\pi", PI_50, False),  # a 50-digit decimal is a fraction, never pi
    (PI_50, "\\pi", False),
    ("\\frac{\\pi}{2}", "1.57079632679489661923132169163975144209858469968755", False),
    ("\\pi - " + PI_50, "0", False),
    ("\\log_2 8", "3", True),
    ("\\sin\\pi", "0", True),  # exactly 0, though 50 digits of pi leave sin(pi) at 1e-51
    ("(\\sqrt{2})^{2} - 2", "0", True),
    ("e^{i\\pi} + 1", "0", True),
    # words compare case-blind, and as words
    ("\\text{Yes}", "\\text{yes}", True),
    ("YES", "\\text{yes}", True),
    ("\\text{No}", "no", True),
    ("\\text{Yes}", "\\text{No}", False),
    ("\\text{east}", "\\text{seat}", False),  # not the same product of letters
]


def verdicts(reward, pred: str, gt: str) -> dict[str, bool]:
    """Every path's verdict on ``pred`` for ``gt``."""
    return {
        "compute_score": reward.compute_score("math", f"\\boxed{{{pred}}}", gt)["acc"] == 1.0,
        "worker": get_pool().call(pred, gt, time.monotonic() + 30) is True,
        "sympy leaf": bool(judge(pred, gt, leaf=sympy_only)),
    }


@pytest.mark.parametrize("pred, gt, expected", PAIRS)
def test_each_path_tells_the_answers_apart(reward, pred, gt, expected):
    assert judge(pred, gt) is not None  # decided in process: no slow path hides a verdict
    assert verdicts(reward, pred, gt) == dict.fromkeys(("compute_score", "worker", "sympy leaf"), expected)


def both_paths(reward, pred: str, gt: str) -> bool:
    fast = reward.compute_score("math", f"\\boxed{{{pred}}}", gt)["acc"] == 1.0
    assert bool(judge(pred, gt, leaf=sympy_only)) is fast, (pred, gt)
    return fast


# Equations: random variable names on either side.
variables = st.sampled_from([*"abcdfghjkmnpqrstuvwxyz", "\\alpha", "\\theta", "x_1", "y_{2}"])
spacing = st.sampled_from(["{} = {}", "{}={}", "{} ={}", "{}  =  {}"])


@st.composite
def right_sides(draw, names):
    """A value, or a linear expression in one of ``names`` (maybe the left-hand side's own)."""
    if draw(st.booleans()):
        return str(draw(st.integers(-50, 50)))
    c, d, u = draw(st.integers(1, 9)), draw(st.integers(-9, 9)), draw(st.sampled_from(names))
    return f"{c}{u} + {d}" if d >= 0 else f"{c}{u} - {-d}"


@settings(max_examples=40, deadline=None)
@given(data=st.data(), v=variables, left=spacing, right=spacing)
def test_an_answer_about_one_variable_is_its_value(reward, data, v, left, right):
    rhs = data.draw(right_sides([v, "z"]))
    assert both_paths(reward, left.format(v, rhs), right.format(v, rhs)) is True
    assert both_paths(reward, left.format(v, rhs), rhs) is True
    assert both_paths(reward, rhs, right.format(v, rhs)) is True


@settings(max_examples=40, deadline=None)
@given(data=st.data(), v=variables, w=variables, left=spacing, right=spacing)
def test_answers_about_different_variables_differ(reward, data, v, w, left, right):
    if v.replace("{", "").replace("}", "") == w.replace("{", "").replace("}", ""):
        return
    rhs = data.draw(right_sides([v, w, "z"]))
    assert both_paths(reward, left.format(v, rhs), right.format(w, rhs)) is False


@settings(max_examples=40, deadline=None)
@given(v=variables, a=st.integers(-50, 50), b=st.integers(-50, 50))
def test_one_variable_with_different_values_differs(reward, v, a, b):
    assert both_paths(reward, f"{v} = {a}", f"{v} = {b}") is (a == b)


# Units: the spellings of each unit (an independent statement of which spellings agree).
UNITS = {
    "cm": ["cm", "centimeters", "centimeter"],
    "m": ["m", "meters", "meter"],
    "km": ["km", "kilometers"],
    "in": ["inches", "inch", "in"],
    "ft": ["feet", "foot", "ft"],
    "mi": ["miles", "mile", "mi"],
    "s": ["seconds", "second", "sec"],
    "min": ["minutes", "minute", "min"],
    "h": ["hours", "hour", "hrs"],
    "dollar": ["dollars", "dollar"],
    "cent": ["cents", "cent"],
    "g": ["grams", "gram", "g"],
    "kg": ["kg", "kilograms"],
}
WRAPPERS = ["\\text{{ {}}}", "\\text{{{}}}", "\\mbox{{ {}}}", "\\mathrm{{{}}}", "\\textrm{{ {}}}", " {}"]
numbers = st.one_of(
    st.integers(0, 999).map(str),
    st.tuples(st.integers(0, 99), st.integers(1, 99)).map(lambda t: f"{t[0]}.{t[1]}"),
    st.tuples(st.integers(1, 99), st.integers(2, 99)).map(lambda t: f"\\frac{{{t[0]}}}{{{t[1]}}}"),
)


def value_of(number: str) -> Fraction:
    if number.startswith("\\frac"):
        num, den = number[6:-1].split("}{")
        return Fraction(int(num), int(den))
    return Fraction(number)


@st.composite
def with_unit(draw, value: str, unit: str, power: int = 1):
    """``value`` followed by ``unit`` to ``power``, in a random spelling and wrapper."""
    spelled = draw(st.sampled_from(UNITS[unit]))
    if power > 1 and draw(st.booleans()):
        return value + draw(st.sampled_from(WRAPPERS)).format(("square " if power == 2 else "cubic ") + spelled)
    suffix = "" if power == 1 else draw(st.sampled_from([f"^{power}", f"^{{{power}}}"]))
    return value + draw(st.sampled_from(WRAPPERS)).format(spelled) + suffix


@settings(max_examples=60, deadline=None)
@given(data=st.data(), value=numbers, unit=st.sampled_from(sorted(UNITS)), power=st.integers(1, 3))
def test_the_same_unit_in_any_spelling_or_none_is_the_same_answer(reward, data, value, unit, power):
    pred, gt = data.draw(with_unit(value, unit, power)), data.draw(with_unit(value, unit, power))
    assert both_paths(reward, pred, gt) is True
    assert both_paths(reward, value, gt) is True
    assert both_paths(reward, pred, value) is True


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    value=numbers,
    units=st.lists(st.sampled_from(sorted(UNITS)), min_size=2, max_size=2),
    powers=st.lists(st.integers(1, 3), min_size=2, max_size=2),
)
def test_different_units_are_different_answers(reward, data, value, units, powers):
    if units[0] == units[1] and powers[0] == powers[1]:
        return
    pred, gt = data.draw(with_unit(value, units[0], powers[0])), data.draw(with_unit(value, units[1], powers[1]))
    assert both_paths(reward, pred, gt) is False


@settings(max_examples=40, deadline=None)
@given(data=st.data(), value=numbers, other=numbers, unit=st.sampled_from(sorted(UNITS)))
def test_the_same_unit_does_not_make_different_values_equal(reward, data, value, other, unit):
    if value == other:
        return
    pred, gt = data.draw(with_unit(value, unit)), data.draw(with_unit(other, unit))
    assert both_paths(reward, pred, gt) is (value_of(value) == value_of(other))


# Words: case-blind, letter for letter.
WORDS = ["yes", "no", "even", "odd", "east", "seat", "Monday", "neither", "Evelyn", "ellipse", "true", "false"]


@settings(max_examples=60, deadline=None)
@given(
    word=st.sampled_from(WORDS),
    other=st.sampled_from(WORDS),
    flips=st.lists(st.booleans(), min_size=8),
    wrap=st.sampled_from(["\\text{{{}}}", "\\textbf{{{}}}", "\\mbox{{{}}}", "{}"]),
)
def test_words_compare_case_blind(reward, word, other, flips, wrap):
    cased = "".join(c.upper() if f else c.lower() for c, f in zip(word, flips + [False] * len(word)))
    assert both_paths(reward, wrap.format(cased), f"\\text{{{other}}}") is (word.lower() == other.lower())


def test_a_script_that_exits_at_once_leaves_no_worker_traceback():
    # The reward pre-starts its workers at import; this script waits until they exist (a second
    # of imports before they are ready) and ends, so they find their parent gone.
    code = (
        "import time\n"
        "from npu_rl.reward.math import compute_score\n"
        "from npu_rl.reward.worker_pool import get_pool\n"
        "print(compute_score('math', '\\\\boxed{5}', '5')['acc'])\n"
        "for _ in range(3000):\n"
        "    if get_pool()._idle:\n"
        "        break\n"
        "    time.sleep(0.01)\n"
        "print(any(w.ready for w in get_pool()._idle))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    # This waits for the workers too: they inherited the pipes, which close when they have exited.
    assert done.returncode == 0 and done.stdout.split() == ["1.0", "False"], (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
