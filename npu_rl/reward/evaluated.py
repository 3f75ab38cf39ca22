"""Is the final answer evaluated, or does it restate a computation between numerals?

``17 \\times 23`` has the value 391, and so does the problem that asks for it: a policy that copies the
expression from the problem into the box would be "right" without computing anything, the cheapest hack MATH
offers. The rubric therefore pays accuracy only for an evaluated answer (:func:`unevaluated` is False); how
often a policy tries the other kind is the reward's ``unevaluated`` part, logged as ``reward/unevaluated`` every
step. MATH writes its reference answers evaluated (docs/reward.md).

An answer is *unevaluated* when one of its values (a scalar, an element of a list, tuple, interval or matrix,
the right-hand side of ``x = ...``) is built from numerals alone by an operation a final answer does not keep:

  * a sum or difference: ``2+3``, ``10 - 4``, ``\\frac12 + \\frac13``;
  * a product: ``17 \\times 23``, ``7 \\times (-1)``, ``2 \\cdot 3^2``;
  * a quotient that is not a fraction of numerals: ``12 \\div 4``, ``\\frac{1+2}{3}``, ``6/(-2)`` (a negative
    denominator);
  * a double negation ``-(-7)`` or an absolute value ``|-7|``.

Evaluated forms, whatever their value: a numeral, negative or decimal; a fraction of numerals, even unreduced
(``\\frac{6}{4}``, ``\\frac{-3}{4}``, and the mixed number ``2\\frac13`` that normalisation turns into
``\\frac73``); a power of numerals (``2^{100}``, ``10^{-3}``, ``\\frac{1}{2^{10}}``); scientific notation
(``6.02 \\times 10^{23}``). Anything with a symbol in it is out of the rule's reach and keeps its verdict:
radicals, ``\\pi``, ``e``, ``i``, functions, factorials, binomials and variables (``3 + 2\\sqrt2``,
``\\frac{\\pi}{2}``, ``2x+3``), so MATH's forms ``a + b\\sqrt c`` and multiples of ``\\pi`` stay correct. A
numeral to a fractional power is a radical too (``51^{1/2}`` is ``\\sqrt{51}``), but only when its base is a
numeral and its exponent a non-integer numeral or fraction of numerals.
"""

from __future__ import annotations

from npu_rl.reward import latex_eval
from npu_rl.reward.equiv import Shape, shape_of
from npu_rl.reward.normalize import compact, normalize

_ARITHMETIC = frozenset({"num", "neg", "add", "mul", "div", "pow", "abs"})


def _numerals_only(node: tuple) -> bool:
    if node[0] not in _ARITHMETIC or _radical(node):
        return False
    children = node[1] if node[0] in ("add", "mul") else node[1:]
    return all(_numerals_only(c) for c in children if isinstance(c, tuple))


def _signed(node: tuple) -> tuple:
    return node[1] if node[0] == "neg" else node


def _radical(node: tuple) -> bool:
    """A numeral to a non-integer power written as a numeral or a fraction of numerals:
    ``51^{1/2}``, ``2^{3/4}``, ``5^{-1/2}``, ``51^{0.5}``.

    A power's exponent is part of a final form: ``51^{1/2}`` is ``\\sqrt{51}`` written
    another way, not a division left undone, so like a radical it is out of the rule's
    reach. The base must be a numeral (``(3+4)^{1/2}`` restates ``7``), and an exponent
    whose value is an integer is not a radical (``2^{2+1}``, ``2^{4/2}`` restate ``8``, ``4``)."""
    if node[0] != "pow" or node[1][0] != "num":
        return False
    exponent = _signed(node[2])
    if exponent[0] == "num":
        value = exponent[1]
    elif exponent[0] == "div" and _signed(exponent[1])[0] == "num" and exponent[2][0] == "num":
        if exponent[2][1] == 0:
            return False
        value = _signed(exponent[1])[1] / exponent[2][1]
    else:
        return False
    return value.denominator != 1


def _power(node: tuple) -> bool:
    """A numeral or a power of numerals, ``2^{100}``, ``10^{-3}``."""
    if node[0] == "num":
        return True
    return node[0] == "pow" and node[1][0] == "num" and _signed(node[2])[0] == "num"


def _evaluated(node: tuple) -> bool:
    inner = _signed(node)  # one minus sign; a second one is a double negation
    if _power(inner):
        return True
    if inner[0] == "div":  # a fraction: an optionally signed numerator over a power-form denominator
        return _power(_signed(inner[1])) and _power(inner[2])
    if inner[0] == "mul" and len(inner[1]) == 2:  # scientific notation: a numeral times a power of ten
        mantissa, scale = inner[1]
        return mantissa[0] == "num" and scale[0] == "pow" and scale[1] == ("num", 10) and _power(scale)
    return False


def _leaves(shape: Shape):
    for part in shape.parts:
        if isinstance(part, Shape):
            yield from _leaves(part)
        elif isinstance(part, tuple):  # a matrix row
            for cell in part:
                yield from _leaves(cell)
    if shape.kind == "scalar":
        yield shape.text


def _restates(value: str) -> bool:
    text = compact(normalize(value))
    tree = latex_eval.parse(text)
    if tree is None or not _numerals_only(tree):
        return False
    # ``12 \\div 4`` reads as the tree of ``\\frac{12}{4}``, but a division sign is an operation, not a fraction.
    return "\\div" in text or "÷" in text or not _evaluated(tree)


def unevaluated(answer: str | None) -> bool:
    """True when ``answer`` restates a computation between numerals instead of its result."""
    if not answer:
        return False
    try:
        return any(_restates(leaf) for leaf in _leaves(shape_of(answer)))
    except Exception:  # noqa: BLE001 - the rule only ever withholds credit from what it can read
        return False
