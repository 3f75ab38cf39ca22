"""The worker's leaf: what ``latex_eval`` cannot decide, decided with sympy by the same rules.

The reward imports it only in worker processes (sympy and the latex2sympy parser
cost about a second of imports). Reading: a text ``latex_eval`` parses is converted from its
own tree, so both paths read it the same way; latex2sympy (the parser under
Math-Verify, pinned through it) reads only syntax outside that subset
(``\\lfloor``, ``\\gcd``, ``\\max``), after undoing its readings that differ
from ours: it turns decimals into 15-digit floats (here exact fractions), reads
an integer next to a number as a mixed number (``2 3`` and ``2(3)`` are 5 to
it, 6 here), takes ``\\log`` as base 10 (natural here) and ``i`` as a variable.

Comparing: values at the shared sample points of :mod:`npu_rl.reward.values`
with its tolerance; where sampling cannot decide, ``simplify(a - b) == 0``.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache
from typing import Any

import sympy
from latex2sympy2_extended import latex2sympy
from latex2sympy2_extended.latex2sympy2 import ConversionConfig

from npu_rl.reward import latex_eval
from npu_rl.reward.equiv import fast_leaf
from npu_rl.reward.values import MP, TooLarge, Undefined, Value, checked, identical, values_equal

_CONVERSION = ConversionConfig(lowercase_symbols=False)
_FUNCS = {
    "sin": sympy.sin, "cos": sympy.cos, "tan": sympy.tan, "cot": sympy.cot, "sec": sympy.sec, "csc": sympy.csc,
    "asin": sympy.asin, "acos": sympy.acos, "atan": sympy.atan, "sinh": sympy.sinh, "cosh": sympy.cosh,
    "tanh": sympy.tanh, "ln": sympy.log, "log": sympy.log, "exp": sympy.exp,
}  # fmt: skip
_CONSTS = {"pi": sympy.pi, "e": sympy.E, "i": sympy.I, "inf": sympy.oo}

_DECIMAL = re.compile(r"(?<![\d.])(\d*)\.(\d+)")
_BARE_LOG = re.compile(r"\\log(?![A-Za-z])(?!\s*_)")
# What latex2sympy would fold into a mixed number: an integer, then something that evaluates
# to one. Not a subscript or exponent (\log_2 8, x^2 3): those digits are an argument.
_NUMERAL_PRODUCT = re.compile(
    r"(?<![_^\d])(\d+)\s*(?=\\(?:frac|binom|sqrt)(?![A-Za-z])|[(\[{|])|(?<![_^\d])(\d+)\s+(?=\d)"
)
# Two groups side by side: latex_eval multiplies them, latex2sympy reads "(2)(3)" as 5 (found by hypothesis).
_GROUP_PRODUCT = re.compile(r"\)\s*(?=\()")
# TeX's one-token macro arguments (\frac32, \sqrt5, \frac\pi2), which latex2sympy cannot parse.
_ARG = r"\s*(\d|[A-Za-z]|\\[A-Za-z]+|\{(?:[^{}]|\{[^{}]*\})*\})"
_TWO_ARGS = re.compile(r"\\(frac|binom)(?![A-Za-z])" + _ARG + _ARG)
_ONE_ARG = re.compile(r"\\sqrt(?![A-Za-z])" + _ARG)


def _symbol(name: str) -> sympy.Symbol:
    # latex_eval names x_{12} "x_12" and \alpha "\alpha"; latex2sympy "x_{12}" and "alpha".
    return sympy.Symbol(name.lstrip("\\").replace("{", "").replace("}", ""))


def from_tree(node: tuple) -> Any:
    """The sympy expression of a ``latex_eval`` tree, exact wherever the tree is."""
    kind = node[0]
    if kind == "num":
        return sympy.Rational(node[1].numerator, node[1].denominator)
    if kind == "var":
        return _symbol(node[1])
    if kind == "const":
        return _CONSTS[node[1]]
    if kind == "neg":
        return -from_tree(node[1])
    if kind == "add":
        return sympy.Add(*[from_tree(c) for c in node[1]])
    if kind == "mul":
        return sympy.Mul(*[from_tree(c) for c in node[1]])
    if kind == "div":
        return from_tree(node[1]) / from_tree(node[2])
    if kind == "pow":
        return sympy.Pow(from_tree(node[1]), from_tree(node[2]))
    if kind == "root":
        return sympy.Pow(from_tree(node[1]), 1 / from_tree(node[2]))
    if kind == "abs":
        return sympy.Abs(from_tree(node[1]))
    if kind == "fact":
        return sympy.factorial(from_tree(node[1]))
    if kind == "binom":
        return sympy.binomial(from_tree(node[1]), from_tree(node[2]))
    if kind == "func":
        return _FUNCS[node[1]](from_tree(node[2]))
    raise ValueError(f"unknown node {kind}")


def _decimal(m: re.Match) -> str:
    value = Fraction(int(m.group(1) + m.group(2)) if m.group(1) else int(m.group(2)), 10 ** len(m.group(2)))
    return f"(\\frac{{{value.numerator}}}{{{value.denominator}}})"


def _braced(arg: str) -> str:
    return arg if arg.startswith("{") else "{" + arg + "}"


def for_latex2sympy(text: str) -> str:
    """``text`` rewritten so that latex2sympy reads it as ``latex_eval`` would."""
    text = _TWO_ARGS.sub(lambda m: f"\\{m.group(1)}{_braced(m.group(2))}{_braced(m.group(3))}", text)
    text = _ONE_ARG.sub(lambda m: "\\sqrt" + _braced(m.group(1)), text)
    text = _DECIMAL.sub(_decimal, text)
    text = _BARE_LOG.sub(r"\\ln", text)
    text = _GROUP_PRODUCT.sub(r")\\cdot ", text)
    return _NUMERAL_PRODUCT.sub(lambda m: (m.group(1) or m.group(2)) + "\\cdot ", text)


@lru_cache(maxsize=4096)  # a ground truth is read once per group of rollouts, not once per rollout
def read(text: str, prefer_tree: bool = True) -> Any | None:
    """The sympy expression ``text`` stands for, or None when no path may read it."""
    if latex_eval.refused(text):
        return None
    tree = latex_eval.parse(text) if prefer_tree else None
    if tree is not None:
        try:
            return from_tree(tree)
        except (ValueError, TypeError, ArithmeticError, RecursionError):
            return None
    try:
        expr = latex2sympy(for_latex2sympy(text), normalization_config=None, conversion_config=_CONVERSION)
        if not isinstance(expr, sympy.Expr):
            return None  # a set, a relation, a matrix: not a single value
        expr = expr.doit()
        expr = expr.xreplace({s: (sympy.I if s.name == "i" else _symbol(s.name)) for s in expr.free_symbols})
        return expr.xreplace({f: sympy.Rational(str(f)) for f in expr.atoms(sympy.Float)})
    except Exception:  # noqa: BLE001 - the parser and sympy raise plain Exception, and worse, on what they cannot read
        return None


def value(expr: Any) -> Value:
    """``expr`` (no free symbols) in the value domain: Fraction if rational, else a 50-digit number."""
    if expr.free_symbols:
        raise Undefined("free symbols")
    if expr.is_Rational:
        return Fraction(int(expr.p), int(expr.q))
    if expr in (sympy.oo, -sympy.oo):
        return MP.inf if expr == sympy.oo else -MP.inf
    if expr.has(sympy.zoo, sympy.nan):
        raise Undefined("undefined")
    v = sympy.N(expr, 50)
    if not v.is_number or v.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        raise Undefined("no finite value")
    re_part, im_part = v.as_real_imag()
    if im_part == 0:
        return checked(MP.mpf(str(re_part)))
    return checked(MP.mpc(MP.mpf(str(re_part)), MP.mpf(str(im_part))))


def _value_or_too_large(expr: Any) -> Value | None:
    try:
        return value(expr)
    except TooLarge:
        return None


def _simplifies_to_zero(diff: Any) -> bool:
    try:
        return sympy.expand(diff) == 0 or sympy.simplify(diff) == 0
    except Exception:  # noqa: BLE001 - sympy raises many kinds on odd input; an unproven identity is no identity
        return False


def expressions_equal(a: Any, b: Any) -> bool:
    names = sorted({s.name for s in a.free_symbols | b.free_symbols})
    if not names:
        try:
            return values_equal(_value_or_too_large(a), _value_or_too_large(b))
        except (ArithmeticError, ValueError, TypeError):
            return _simplifies_to_zero(a - b)
    symbols = [sympy.Symbol(n) for n in names]

    def at(expr: Any) -> Any:
        def at_point(env: dict[str, Fraction]) -> Value:
            point = {s: sympy.Rational(env[s.name].numerator, env[s.name].denominator) for s in symbols}
            return value(expr.xreplace(point))

        return at_point

    verdict = identical(at(a), at(b), names)
    return _simplifies_to_zero(a - b) if verdict is None else verdict


def leaf_equal(pred: str, gt: str) -> bool:
    """The worker's leaf for ``equiv.judge``: the fast verdict when there is one, else sympy's."""
    fast = fast_leaf(pred, gt)
    if fast is not None:
        return fast
    a, b = read(pred), read(gt)
    if a is None or b is None:
        return False
    return expressions_equal(a, b)
