"""Fast numeric judge for arithmetic LaTeX answers, without sympy.

A small recursive-descent parser turns the LaTeX subset that MATH answers use
(numbers, + - * /, implicit products, ``\\frac``/``\\sqrt`` including the
shorthand ``\\frac43`` and ``11\\sqrt2``, powers, ``\\pi``, ``e``, ``i``,
common functions, factorials, variables) into a tree. Two trees are compared by
value: exactly with ``Fraction`` while everything is rational (so ``1/2^{99}``
never equals ``1/2^{98}``), otherwise at 50 significant digits with mpmath; with
variables, at fixed sample points (identity testing). Anything outside the
subset, or too large to evaluate cheaply (``9^{9^{9^9}}``), is "undecided" and
left to the slower symbolic check.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache
from typing import Any, Union

import mpmath

MAX_CHARS = 400
MAX_DEPTH = 40
_MAX_BITS = 20000  # exact rationals larger than this go to mpmath
_MAX_LOG2 = 4000.0  # |value| beyond 2**4000 is not a MATH answer: refuse rather than compute

# A private context: the global mpmath one is shared with sympy and other threads.
_MP = mpmath.MPContext()
_MP.dps = 50
_REL_TOL = _MP.mpf("1e-35")
_ZERO_TOL = _MP.mpf("1e-40")

Value = Union[Fraction, Any]  # Fraction, or an mpf/mpc of _MP


class ParseError(ValueError):
    pass


class Undefined(ArithmeticError):
    """Division by zero, log of zero, a complex branch: no numeric verdict."""


class TooLarge(Undefined):
    """Beyond 2**4000 (``9^{9^{9^9}}``): not a MATH answer, and not worth computing."""


_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d*)?|\.\d+)|(\\[A-Za-z]+)|([A-Za-z])|(\S))")
_FUNCS = {
    "\\sin": "sin", "\\cos": "cos", "\\tan": "tan", "\\cot": "cot", "\\sec": "sec", "\\csc": "csc",
    "\\arcsin": "asin", "\\arccos": "acos", "\\arctan": "atan", "\\sinh": "sinh", "\\cosh": "cosh",
    "\\tanh": "tanh", "\\ln": "ln", "\\log": "log", "\\exp": "exp",
}  # fmt: skip
_GREEK = {
    "\\alpha", "\\beta", "\\gamma", "\\delta", "\\theta", "\\lambda", "\\mu", "\\phi", "\\varphi",
    "\\omega", "\\rho", "\\sigma", "\\tau", "\\psi", "\\epsilon", "\\varepsilon", "\\eta", "\\xi", "\\kappa",
}  # fmt: skip
_MUL_OPS = {"*", "\\cdot", "\\times"}
_DIV_OPS = {"/", "\\div"}


def _tokenize(s: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for m in _TOKEN.finditer(s):
        if m.group(1):
            out.append(("num", m.group(1)))
        elif m.group(2):
            out.append(("cmd", m.group(2)))
        elif m.group(3):
            out.append(("let", m.group(3)))
        elif m.group(4):
            out.append(("sym", m.group(4)))
    return out


class _Parser:
    def __init__(self, text: str):
        self.toks = _tokenize(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise ParseError("unexpected end")
        self.i += 1
        return tok

    def expect(self, value: str) -> None:
        tok = self.take()
        if tok[1] != value:
            raise ParseError(f"expected {value!r}, got {tok[1]!r}")

    def parse(self) -> tuple:
        node = self.expr()
        if self.peek() is not None:
            raise ParseError(f"trailing {self.peek()[1]!r}")
        return node

    def expr(self) -> tuple:
        terms = [self.term()]
        while (tok := self.peek()) is not None and tok[1] in "+-" and tok[0] == "sym":
            self.take()
            t = self.term()
            terms.append(t if tok[1] == "+" else ("neg", t))
        return terms[0] if len(terms) == 1 else ("add", terms)

    def _starts_primary(self, tok: tuple[str, str] | None) -> bool:
        if tok is None:
            return False
        kind, val = tok
        if kind in ("num", "let"):
            return True
        if kind == "cmd":
            return val in _FUNCS or val in _GREEK or val in ("\\frac", "\\sqrt", "\\pi", "\\binom", "\\infty")
        return val in "({["

    def term(self) -> tuple:
        node = self.unary()
        while True:
            tok = self.peek()
            if tok is not None and tok[1] in _MUL_OPS:
                self.take()
                node = ("mul", [node, self.unary()])
            elif tok is not None and tok[1] in _DIV_OPS:
                self.take()
                node = ("div", node, self.unary())
            elif self._starts_primary(tok):
                node = ("mul", [node, self.power()])
            else:
                return node

    def unary(self) -> tuple:
        tok = self.peek()
        if tok is not None and tok[0] == "sym" and tok[1] in "+-":
            self.take()
            inner = self.unary()
            return ("neg", inner) if tok[1] == "-" else inner
        return self.power()

    def power(self) -> tuple:
        base = self.postfix()
        tok = self.peek()
        if tok is not None and tok[1] == "^":
            self.take()
            return ("pow", base, self.group_or_char(allow_sign=True))
        return base

    def postfix(self) -> tuple:
        node = self.primary()
        while (tok := self.peek()) is not None and tok[1] == "!":
            self.take()
            node = ("fact", node)
        return node

    def group_or_char(self, allow_sign: bool = False) -> tuple:
        """A macro argument: ``{...}``, or one character (``\\frac43``, ``x^23`` = x^2 * 3)."""
        tok = self.peek()
        if tok is None:
            raise ParseError("missing argument")
        if tok[1] == "{":
            self.take()
            node = self.expr()
            self.expect("}")
            return node
        if tok[0] == "num":
            if len(tok[1]) > 1:
                self.toks[self.i] = ("num", tok[1][1:])
            else:
                self.i += 1
            if tok[1][0] == ".":
                raise ParseError("bad argument")
            return ("num", Fraction(tok[1][0]))
        if allow_sign and tok[1] == "-":
            self.take()
            return ("neg", self.group_or_char())
        return self.primary()

    def primary(self) -> tuple:
        kind, val = self.take()
        if kind == "num":
            return ("num", Fraction(val))
        if kind == "let":
            name = val
            if (tok := self.peek()) is not None and tok[1] == "_":
                self.take()
                sub = self.take()
                if sub[1] == "{":
                    parts = []
                    while (t := self.take())[1] != "}":
                        parts.append(t[1])
                    sub = ("", "".join(parts))
                name = f"{val}_{sub[1]}"
            if name == "e":
                return ("const", "e")
            if name == "i":
                return ("const", "i")
            return ("var", name)
        if kind == "cmd":
            if val == "\\pi":
                return ("const", "pi")
            if val == "\\infty":
                return ("const", "inf")
            if val in _GREEK:
                return ("var", val)
            if val == "\\frac":
                return ("div", self.group_or_char(), self.group_or_char())
            if val == "\\binom":
                return ("binom", self.group_or_char(), self.group_or_char())
            if val == "\\sqrt":
                index: tuple = ("num", Fraction(2))
                if (tok := self.peek()) is not None and tok[1] == "[":
                    self.take()
                    index = self.expr()
                    self.expect("]")
                return ("root", self.group_or_char(), index)
            if val in _FUNCS:
                return self.function(_FUNCS[val])
            raise ParseError(f"unsupported command {val}")
        if val in "({[":
            close = {"(": ")", "{": "}", "[": "]"}[val]
            node = self.expr()
            self.expect(close)
            return node
        if val == "|":
            node = self.expr()
            self.expect("|")
            return ("abs", node)
        raise ParseError(f"unexpected {val!r}")

    def function(self, name: str) -> tuple:
        base = None
        if name == "log" and (tok := self.peek()) is not None and tok[1] == "_":
            self.take()
            base = self.group_or_char()
        exponent = None
        if (tok := self.peek()) is not None and tok[1] == "^":
            self.take()
            exponent = self.group_or_char(allow_sign=True)
        tok = self.peek()
        arg = self.primary() if tok is not None and tok[1] in "({" else self.power()
        node: tuple = ("func", name, arg) if base is None else ("div", ("func", "ln", arg), ("func", "ln", base))
        if exponent is not None:
            node = ("pow", node, exponent)
        return node


def _nesting_depth(s: str) -> int:
    depth = best = 0
    for c in s:
        if c in "({[":
            depth += 1
            best = max(best, depth)
        elif c in ")}]":
            depth -= 1
    return best


@lru_cache(maxsize=65536)
def parse(text: str) -> tuple | None:
    """The expression tree of ``text``, or None outside the supported subset."""
    if len(text) > MAX_CHARS or _nesting_depth(text) > MAX_DEPTH:
        return None
    try:
        return _Parser(text).parse()
    except (ParseError, ValueError, ZeroDivisionError, RecursionError):
        return None


def variables(node: tuple) -> frozenset[str]:
    kind = node[0]
    if kind == "var":
        return frozenset([node[1]])
    out: set[str] = set()
    for child in node[1:]:
        if isinstance(child, tuple):
            out |= variables(child)
        elif isinstance(child, list):
            for c in child:
                out |= variables(c)
    return frozenset(out)


def _mp(v: Value) -> Any:
    return _MP.mpf(v.numerator) / v.denominator if isinstance(v, Fraction) else v


def _log2_abs(v: Value) -> float:
    if isinstance(v, Fraction):
        if v == 0:
            return -math.inf
        return v.numerator.bit_length() - v.denominator.bit_length()
    a = abs(v)
    return -math.inf if a == 0 else float(_MP.log(a, 2))


def _check(v: Value) -> Value:
    if not isinstance(v, Fraction):
        if _MP.isnan(v):
            raise Undefined("nan")
        if not _MP.isinf(v) and _log2_abs(v) > _MAX_LOG2:
            raise TooLarge("too large")
    return v


def _pow(base: Value, exp: Value) -> Value:
    if isinstance(base, Fraction) and isinstance(exp, Fraction) and exp.denominator == 1:
        if base == 0 and exp < 0:
            raise Undefined("0 to a negative power")
        size = max(base.numerator.bit_length(), base.denominator.bit_length()) * abs(exp.numerator)
        if size <= _MAX_BITS:
            return base**exp.numerator
    b, e = _mp(base), _mp(exp)
    if b == 0:
        if _MP.re(e) <= 0:
            raise Undefined("0 to a non-positive power")
        return Fraction(0)
    if abs(e) > 1e6 or abs(e) * abs(_MP.log(abs(b), 2)) > _MAX_LOG2:
        raise TooLarge("power too large")
    return _check(_MP.power(b, e))


def _root(radicand: Value, index: Value) -> Value:
    if isinstance(radicand, Fraction) and index == 2 and radicand >= 0:
        n, d = radicand.numerator, radicand.denominator
        rn, rd = math.isqrt(n), math.isqrt(d)
        if rn * rn == n and rd * rd == d:
            return Fraction(rn, rd)
    if index == 0:
        raise Undefined("zeroth root")
    if index == 2:
        return _MP.sqrt(_mp(radicand))
    return _pow(radicand, Fraction(1) / index if isinstance(index, Fraction) else 1 / _mp(index))


def _integer(v: Value, limit: int) -> int:
    if not isinstance(v, Fraction) or v.denominator != 1 or not 0 <= v <= limit:
        raise Undefined("not a small non-negative integer")
    return int(v)


def evaluate(node: tuple, env: dict[str, Any]) -> Value:
    kind = node[0]
    if kind == "num":
        return node[1]
    if kind == "var":
        return env[node[1]]
    if kind == "const":
        return {"pi": _MP.pi, "e": _MP.e, "i": _MP.mpc(0, 1), "inf": _MP.inf}[node[1]]
    if kind == "neg":
        v = evaluate(node[1], env)
        return -v
    if kind in ("add", "mul"):
        vals = [evaluate(c, env) for c in node[1]]
        acc = vals[0]
        for v in vals[1:]:
            if isinstance(acc, Fraction) and isinstance(v, Fraction):
                acc = acc + v if kind == "add" else acc * v
            else:
                acc = _mp(acc) + _mp(v) if kind == "add" else _mp(acc) * _mp(v)
            if isinstance(acc, Fraction) and max(acc.numerator.bit_length(), acc.denominator.bit_length()) > _MAX_BITS:
                acc = _mp(acc)
        return _check(acc)
    if kind == "div":
        a, b = evaluate(node[1], env), evaluate(node[2], env)
        if b == 0:
            raise Undefined("division by zero")
        if isinstance(a, Fraction) and isinstance(b, Fraction):
            return a / b
        return _check(_mp(a) / _mp(b))
    if kind == "pow":
        return _pow(evaluate(node[1], env), evaluate(node[2], env))
    if kind == "root":
        return _root(evaluate(node[1], env), evaluate(node[2], env))
    if kind == "abs":
        v = evaluate(node[1], env)
        return abs(v)
    if kind == "fact":
        return Fraction(math.factorial(_integer(evaluate(node[1], env), 500)))
    if kind == "binom":
        n = _integer(evaluate(node[1], env), 5000)
        return Fraction(math.comb(n, _integer(evaluate(node[2], env), n)))
    if kind == "func":
        arg = _mp(evaluate(node[2], env))
        name = node[1]
        if name in ("ln", "log"):
            if arg == 0:
                raise Undefined("log 0")
            return _MP.ln(arg)
        if name == "exp" and abs(arg) > 2000:
            raise TooLarge("exp too large")
        fn = {"asin": _MP.asin, "acos": _MP.acos, "atan": _MP.atan}.get(name) or getattr(_MP, name)
        return _check(fn(arg))
    raise Undefined(f"unknown node {kind}")


def values_equal(a: Value | None, b: Value | None) -> bool:
    if a is None or b is None:  # too large to compute
        if a is None and b is None:
            raise Undefined("both too large")
        return False
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        return a == b
    x, y = _mp(a), _mp(b)
    if _MP.isinf(x) or _MP.isinf(y):
        return x == y
    scale = max(abs(x), abs(y))
    if scale < _ZERO_TOL:
        return True
    return abs(x - y) <= _REL_TOL * scale


def _is_real(v: Value) -> bool:
    return isinstance(v, Fraction) or not isinstance(v, type(_MP.mpc(0))) or _MP.im(v) == 0


# Deterministic sample points: reproducible verdicts in every thread and process.
_POSITIVE = ("0.6180339887498948482", "1.4142135623730950488", "2.6457513110645905905")
_NEGATIVE = "-1.3247179572447460260"


def _points(names: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    pos = [{n: _MP.mpf(p) + _MP.mpf("0.3173") * k for k, n in enumerate(names)} for p in _POSITIVE]
    neg = {n: _MP.mpf(_NEGATIVE) - _MP.mpf("0.2113") * k for k, n in enumerate(names)}
    return pos, neg


def _value_or_too_large(node: tuple) -> Value | None:
    try:
        return evaluate(node, {})
    except TooLarge:
        return None


def equal(a: tuple, b: tuple) -> bool | None:
    """True/False when both trees evaluate; None when the numeric test cannot decide."""
    try:
        names = sorted(variables(a) | variables(b))
        if not names:
            return values_equal(_value_or_too_large(a), _value_or_too_large(b))
        positive, negative = _points(names)
        for env in positive:
            if not values_equal(evaluate(a, env), evaluate(b, env)):
                return False
    except (Undefined, ZeroDivisionError, OverflowError, ValueError, RecursionError):
        return None
    # Positive samples agree (sqrt{1/n} = 1/sqrt{n}); a negative one still catches |x| vs x.
    try:
        va, vb = evaluate(a, negative), evaluate(b, negative)
    except (Undefined, ZeroDivisionError, OverflowError, ValueError, RecursionError):
        return True
    if _is_real(va) and _is_real(vb) and not values_equal(va, vb):
        return False
    return True
