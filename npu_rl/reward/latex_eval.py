"""Fast judge for the LaTeX answers MATH uses, without sympy.

A small recursive-descent parser turns the LaTeX subset that MATH answers use (numbers, + - * /, implicit
products, ``\\frac``/``\\sqrt`` including the shorthand ``\\frac43`` and ``11\\sqrt2``, powers, ``\\pi``, ``e``,
``i``, common functions, factorials, variables) into a tree, which is evaluated in the value domain of
:mod:`npu_rl.reward.values`: exactly with ``Fraction`` while everything is rational (so ``1/2^{99}`` never
equals ``1/2^{98}``), otherwise at 50 digits with mpmath; with variables, at the shared random sample points.

Readings that differ from TeX's are deliberate: an unbraced exponent is the whole number (``x^23`` is
``x^{23}``, as a model writing it means), and a one-digit argument that would leave digits behind as a silent
product (``\\frac432``, ``\\sqrt23``) is refused. Anything outside the subset, or too large to evaluate
cheaply (``9^{9^{9^9}}``), is "undecided" and left to the symbolic fallback, which reads and compares the
same way.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache
from typing import Any

from npu_rl.reward.values import (
    MAX_LOG2,
    TooLarge,
    Undefined,
    Value,
    checked,
    identical,
    negligible,
    plus,
    to_mp,
    values_equal,
)
from npu_rl.reward.values import MP as _MP

MAX_CHARS = 400
MAX_DEPTH = 40
_MAX_BITS = 20000  # exact rationals larger than this go to mpmath


class ParseError(ValueError):
    pass


class Malformed(ParseError):
    """Notation read two ways (``\\sqrt23``): no path may pick one, the answer is wrong."""


# "3." is no number: "0.(3)" must not read as 0 times 3.
_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?|\.\d+)|(\\[A-Za-z]+)|([A-Za-z])|(\S))")
_FUNCS = {
    "\\sin": "sin", "\\cos": "cos", "\\tan": "tan", "\\cot": "cot", "\\sec": "sec", "\\csc": "csc",
    "\\arcsin": "asin", "\\arccos": "acos", "\\arctan": "atan", "\\sinh": "sinh", "\\cosh": "cosh",
    "\\tanh": "tanh", "\\ln": "ln", "\\log": "log", "\\exp": "exp",
}  # fmt: skip
GREEK = {
    "\\alpha", "\\beta", "\\gamma", "\\delta", "\\theta", "\\lambda", "\\mu", "\\phi", "\\varphi",
    "\\omega", "\\rho", "\\sigma", "\\tau", "\\psi", "\\epsilon", "\\varepsilon", "\\eta", "\\xi", "\\kappa",
}  # fmt: skip
_VANISH_AWAY_FROM_0 = {"sin", "cos", "tan", "cot", "ln", "log"}
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
        self.split_at = -1  # index of the digits a one-digit macro argument left behind

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
        if (tok := self.peek()) is not None:
            raise ParseError(f"trailing {tok[1]!r}")
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
            return val in _FUNCS or val in GREEK or val in ("\\frac", "\\sqrt", "\\pi", "\\binom", "\\infty")
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
            return ("pow", base, self.exponent())
        return base

    def exponent(self) -> tuple:
        tok = self.peek()
        if tok is not None and tok[0] == "num":
            self.take()
            return ("num", Fraction(tok[1]))
        if tok is not None and tok[1] == "-":
            self.take()
            return ("neg", self.exponent())
        return self.group_or_char()

    def postfix(self) -> tuple:
        node = self.primary()
        while (tok := self.peek()) is not None and tok[1] == "!":
            self.take()
            node = ("fact", node)
        return node

    def group_or_char(self) -> tuple:
        """A macro argument: ``{...}``, or one character (``\\frac43``)."""
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
                self.split_at = self.i
            else:
                self.i += 1
            if tok[1][0] == ".":
                raise ParseError("bad argument")
            return ("num", Fraction(tok[1][0]))
        return self.primary()

    def whole_macro(self, node: tuple) -> tuple:
        if self.split_at == self.i:
            raise Malformed("a one-digit argument leaves digits behind")
        return node

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
            if val in GREEK:
                return ("var", val)
            if val == "\\frac":
                return self.whole_macro(("div", self.group_or_char(), self.group_or_char()))
            if val == "\\binom":
                return self.whole_macro(("binom", self.group_or_char(), self.group_or_char()))
            if val == "\\sqrt":
                index: tuple = ("num", Fraction(2))
                if (tok := self.peek()) is not None and tok[1] == "[":
                    self.take()
                    index = self.expr()
                    self.expect("]")
                return self.whole_macro(("root", self.group_or_char(), index))
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
            exponent = self.exponent()
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
def _read(text: str) -> tuple | type[Exception]:
    if len(text) > MAX_CHARS or _nesting_depth(text) > MAX_DEPTH:
        return ParseError
    try:
        return _Parser(text).parse()
    except (ParseError, ValueError, ZeroDivisionError, RecursionError) as exc:
        return type(exc)


def parse(text: str) -> tuple | None:
    """The expression tree of ``text``, or None outside the supported subset."""
    tree = _read(text)
    return tree if isinstance(tree, tuple) else None


def refused(text: str) -> bool:
    """True when ``text`` is notation no path may read (see ``Malformed``), not merely unsupported."""
    return _read(text) is Malformed


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


def _pow(base: Value, exp: Value) -> Value:
    if isinstance(base, Fraction) and isinstance(exp, Fraction) and exp.denominator == 1:
        if base == 0 and exp < 0:
            raise Undefined("0 to a negative power")
        size = max(base.numerator.bit_length(), base.denominator.bit_length()) * abs(exp.numerator)
        if size <= _MAX_BITS:
            return base**exp.numerator
    b, e = to_mp(base), to_mp(exp)
    if b == 0:
        if _MP.re(e) <= 0:
            raise Undefined("0 to a non-positive power")
        return Fraction(0)
    if abs(e) > 1e6 or abs(e) * abs(_MP.log(abs(b), 2)) > MAX_LOG2:
        raise TooLarge("power too large")
    return checked(_MP.power(b, e))


def _root(radicand: Value, index: Value) -> Value:
    if isinstance(radicand, Fraction) and index == 2 and radicand >= 0:
        n, d = radicand.numerator, radicand.denominator
        rn, rd = math.isqrt(n), math.isqrt(d)
        if rn * rn == n and rd * rd == d:
            return Fraction(rn, rd)
    if index == 0:
        raise Undefined("zeroth root")
    if index == 2:
        return _MP.sqrt(to_mp(radicand))
    return _pow(radicand, Fraction(1) / index if isinstance(index, Fraction) else 1 / to_mp(index))


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
            if kind == "add":
                acc = plus(acc, v)
            elif isinstance(acc, Fraction) and isinstance(v, Fraction):
                acc = acc * v
            else:
                acc = to_mp(acc) * to_mp(v)
            if isinstance(acc, Fraction) and max(acc.numerator.bit_length(), acc.denominator.bit_length()) > _MAX_BITS:
                acc = to_mp(acc)
        return checked(acc)
    if kind == "div":
        a, b = evaluate(node[1], env), evaluate(node[2], env)
        if b == 0:
            raise Undefined("division by zero")
        if isinstance(a, Fraction) and isinstance(b, Fraction):
            return a / b
        return checked(to_mp(a) / to_mp(b))
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
        exact = evaluate(node[2], env)
        arg = to_mp(exact)
        name = node[1]
        if name in ("ln", "log"):
            if arg == 0:
                raise Undefined("log 0")
            fn = _MP.ln
        elif name == "exp":
            if abs(arg) > 2000:
                raise TooLarge("exp too large")
            fn = _MP.exp
        else:
            fn = {"asin": _MP.asin, "acos": _MP.acos, "atan": _MP.atan}.get(name) or getattr(_MP, name)
        v = checked(fn(arg))
        # At a zero away from 0, 50 digits of a computed argument leave only noise: \sin\pi is 0
        # (see values). The noise is relative to the argument for trig, absolute for ln (at 1).
        if name in _VANISH_AWAY_FROM_0 and not isinstance(exact, Fraction):
            if negligible(v, 1 if name in ("ln", "log") else arg):
                return Fraction(0)
        return v
    raise Undefined(f"unknown node {kind}")


def _value_or_too_large(node: tuple) -> Value | None:
    try:
        return evaluate(node, {})
    except TooLarge:
        return None


def equal(a: tuple, b: tuple) -> bool | None:
    """True/False when the trees decide; None when only a symbolic check can."""
    names = sorted(variables(a) | variables(b))
    try:
        if not names:
            return values_equal(_value_or_too_large(a), _value_or_too_large(b))
    except (ArithmeticError, ValueError, RecursionError):
        return None
    return identical(lambda env: evaluate(a, env), lambda env: evaluate(b, env), names)
