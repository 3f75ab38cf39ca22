"""When two values, or two expressions in variables, are equal: the numeric half of the definition in
:mod:`npu_rl.reward.equiv`, shared by both paths.

Values are exact rationals (``Fraction``) or numbers of a private 50-digit mpmath context ("computed"
values). One rule, whatever their size:

  * two rationals compare exactly (``10^{-50}`` is not ``0``);
  * otherwise at a relative tolerance of 1e-35, far below any decimal a model writes, so ``3.14`` is not
    ``\\pi`` but ``\\sqrt8`` is ``2\\sqrt2``. There is no absolute floor: ``e^{-100}`` is not ``0``;
  * a rational p/q equals a computed value only when it is short, |p|·q < 10^30: agreement to 35 digits
    with so short a fraction is no coincidence (``\\log_2 8`` is 3), while every number agrees that well
    with some longer fraction. A 50-digit decimal is such a fraction, so it is not ``\\pi``;
  * 0 is exact, so a computed value is 0 only when it is exactly 0. Where a computation cancels at the
    stated digits, the evaluators make it so: a sum whose terms are equal and opposite by the rules above
    (``\\sqrt2^2 - 2``, ``e^{i\\pi} + 1``) and a function at a zero away from 0 whose argument is computed
    (``\\sin\\pi``, ``\\ln`` of a computed 1) are exactly 0, as sympy computes them on the other path.
    ``e^{-100}`` cancels nothing and stays itself.

Expressions in variables are equal when they agree at sample points (:func:`identical`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache
from typing import Any

import mpmath

# A private context: the global mpmath one is shared with sympy and other threads.
MP = mpmath.MPContext()
MP.dps = 50
_REL_TOL = MP.mpf("1e-35")
_SHORT_FRACTION = 10**30  # |p|*q below this: a fraction 35 digits can single out
MAX_LOG2 = 4000.0  # |value| beyond 2**4000 is not a MATH answer: refuse rather than compute

Value = Fraction | Any  # Fraction, or an mpf/mpc of MP

SEED = 15
POSITIVE_POINTS = 8
SIGNED_POINTS = 8
MIN_AGREEING = 6


class Undefined(ArithmeticError):
    """Division by zero, log of zero, a complex branch: no numeric verdict."""


class TooLarge(Undefined):
    """Beyond 2**4000 (``9^{9^{9^9}}``): not a MATH answer, and not worth computing."""


def to_mp(v: Value) -> Any:
    return MP.mpf(v.numerator) / v.denominator if isinstance(v, Fraction) else v


def log2_abs(v: Value) -> float:
    if isinstance(v, Fraction):
        if v == 0:
            return -math.inf
        return v.numerator.bit_length() - v.denominator.bit_length()
    a = abs(v)
    return -math.inf if a == 0 else float(MP.log(a, 2))


def checked(v: Value) -> Value:
    """``v`` itself, or Undefined/TooLarge when it is NaN or beyond 2**4000."""
    if not isinstance(v, Fraction):
        if MP.isnan(v):
            raise Undefined("nan")
        if not MP.isinf(v) and log2_abs(v) > MAX_LOG2:
            raise TooLarge("too large")
    return v


def is_real(v: Value) -> bool:
    return isinstance(v, Fraction) or not isinstance(v, type(MP.mpc(0))) or MP.im(v) == 0


def negligible(v: Value, scale: Value) -> bool:
    """``|v|`` is below the tolerance relative to ``scale``: at 50 digits, all that is left of 0."""
    return abs(to_mp(v)) <= _REL_TOL * abs(to_mp(scale))


def values_equal(a: Value | None, b: Value | None) -> bool:
    """Equal values; None stands for "too large to compute", equal to nothing computed."""
    if a is None or b is None:
        if a is None and b is None:
            raise Undefined("both too large")
        return False
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        return a == b
    x, y = to_mp(a), to_mp(b)
    if MP.isinf(x) or MP.isinf(y):
        return x == y
    if not negligible(x - y, max(abs(x), abs(y))):
        return False
    return all(abs(v.numerator) * v.denominator < _SHORT_FRACTION for v in (a, b) if isinstance(v, Fraction))


def plus(a: Value, b: Value) -> Value:
    """``a + b``, exactly 0 when the terms cancel by ``values_equal`` (see the module docstring)."""
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        return a + b
    total = to_mp(a) + to_mp(b)
    if MP.isinf(total) or MP.isnan(total) or not values_equal(a, -b):
        return total
    return Fraction(0)


def _draw(rng: random.Random) -> Fraction:
    # Rationals in [1/8, 8]: exact arithmetic, and far from the overflow and
    # cancellation that very large or tiny points would bring to transcendental terms.
    den = rng.randint(64, 1024)
    return Fraction(rng.randint(den // 8, 8 * den), den)


@lru_cache(maxsize=32)
def _coordinates(n: int) -> tuple[tuple[tuple[Fraction, ...], ...], tuple[tuple[Fraction, ...], ...]]:
    rng = random.Random(SEED)  # the same draw in every call, thread and process
    positive = tuple(tuple(_draw(rng) for _ in range(n)) for _ in range(POSITIVE_POINTS))
    signed = []
    for _ in range(SIGNED_POINTS):
        signs = [rng.choice((-1, 1)) for _ in range(n)]
        if n and all(s > 0 for s in signs):
            signs[rng.randrange(n)] = -1  # at least one negative coordinate: positive ones are above
        signed.append(tuple(s * _draw(rng) for s in signs))
    return positive, tuple(signed)


def sample_points(names: list[str]) -> tuple[list[dict[str, Fraction]], list[dict[str, Fraction]]]:
    """(points with every variable positive, points with some negative), one dict per point."""
    positive, signed = _coordinates(len(names))
    return [dict(zip(names, p)) for p in positive], [dict(zip(names, p)) for p in signed]


_NO_VALUE = (ArithmeticError, ValueError, TypeError, RecursionError, OverflowError)


def _both(fa: Callable[[dict], Value], fb: Callable[[dict], Value], env: dict) -> tuple[Value, Value] | None:
    try:
        return fa(env), fb(env)
    except _NO_VALUE:
        return None


def identical(fa: Callable[[dict], Value], fb: Callable[[dict], Value], names: list[str]) -> bool | None:
    """Do the two functions of ``names`` agree? None: too few points where both are defined.

    The points are random rationals from a fixed seed, so every thread and process gets the same verdict,
    and exact wherever the expressions are rational functions (Schwartz-Zippel: a false agreement at 16
    random points of a set this large is out of reach). At points with every variable positive the values
    must agree, complex or not (``\\sqrt{1/n}`` is ``1/\\sqrt{n}``); at points with negative coordinates only
    where both sides are real (``|x|`` is not ``x``). Points where either side is undefined are skipped;
    with too few left the sampling cannot decide and the caller's symbolic check must."""
    positive, signed = sample_points(names)
    agreeing = 0
    for env in positive:
        pair = _both(fa, fb, env)
        if pair is None:
            continue
        if not values_equal(*pair):
            return False
        agreeing += 1
    for env in signed:
        pair = _both(fa, fb, env)
        if pair is None or not (is_real(pair[0]) and is_real(pair[1])):
            continue
        if not values_equal(*pair):
            return False
        agreeing += 1
    return True if agreeing >= MIN_AGREEING else None
