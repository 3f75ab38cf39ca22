"""Cheap string normalisation of LaTeX answers: the same value written the usual different ways
(``\\dfrac``, ``30^\\circ``, ``10\\text{ cm}``, ``1{,}000``, ``\\text{(B)}``) maps to one canonical string.

Units are dropped from that string but not forgotten: ``units`` names the ones an answer gave (``\\text{cm}``,
``\\mbox{ centimeters}`` and a trailing ``cm`` are all ``cm``), so the judge can refuse ``5\\text{ cm}`` for
``5\\text{ m}``. A left-hand side ``x =`` is kept, and ``assignment`` splits it off: whether it may be dropped
depends on the other answer, which only the judge sees.

Only rewrites that never change the mathematical value belong here, plus the two readings that both paths of
the judge must share and that no LaTeX parser makes by itself: a mixed number (``2\\frac{1}{3}`` is 7/3, not
2/3) and a repeating decimal (``0.1\\overline{6}`` is 1/6), each rewritten as the exact fraction it stands
for. Everything else is decided by :mod:`npu_rl.reward.latex_eval` or the symbolic fallback.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

# A unit's name and its spellings. Degrees are no unit (30^\circ is the number 30),
# and neither is MATH's placeholder "units" (12 square units).
_UNIT_SPELLINGS = {
    "mm": "mm|millimeters?", "cm": "cm|centimeters?", "m": "m|meters?", "km": "km|kilometers?",
    "in": "inch(?:es)?|in", "ft": "feet|foot|ft", "yd": "yards?|yd", "mi": "miles?|mi",
    "s": "seconds?|sec", "min": "minutes?|min", "h": "hours?|hrs?", "day": "days?", "week": "weeks?",
    "month": "months?", "year": "years?", "dollar": "dollars?", "cent": "cents?", "lb": "pounds?|lbs?",
    "oz": "ounces?|oz", "g": "grams?|g", "kg": "kg|kilograms?", "l": "liters?", "gal": "gallons?",
    "mph": "mph", "rad": "radians?", "people": "people", "student": "students", "way": "ways",
}  # fmt: skip
_NO_UNIT = r"units?|degrees?"
_UNITS = r"(?:square|sq\.?|cubic)?\s*(?:" + "|".join([_NO_UNIT, *_UNIT_SPELLINGS.values()]) + r")"
_POWER = r"(?:\^\{?([23])\}?)?"
_TEXT_UNIT = re.compile(r"\\(?:text|mbox|mathrm|textrm)\{\s*(" + _UNITS + r")\s*\}" + _POWER, re.I)
_TRAILING_UNIT = re.compile(r"(?<=[\d}).])\s+(" + _UNITS + r")" + _POWER + r"\s*$", re.I)
_UNIT_NAME = [(name, re.compile(f"(?:{spelling})", re.I)) for name, spelling in _UNIT_SPELLINGS.items()]
_WRAPPERS = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox|operatorname|boxed)\s*\{([^{}]*)\}")
_SPACING = re.compile(r"(?<!\\)\\(?:displaystyle|left|right|big|Big|bigg|Bigg|[,;:! ]|quad|qquad)(?![A-Za-z])|~")
_DEGREES = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|°|\\degree|\\circ")
_LHS = re.compile(r"^((?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?\w+\}?)?(?:\([a-z]\))?)\s*=(?!=)")
_MEMBER = re.compile(r"^[A-Za-z]\s*\\in\s*")  # "x \in [-2, 7]" is the interval
# Digit groups of three after a comma, a space or both (what \, and \! become): 10,\!080 is 10080,
# never the product 10 x 80.
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:(?:,\s?|\s)\d{3})+(?:\.\d+)?$")
_MC = re.compile(r"^\(?([A-E])\)?$")
_REALS = re.compile(r"\\mathbb\s*\{?\s*R\s*\}?")
_ARG = r"\s*(?:\{\s*(\d+)\s*\}|(\d))"
# 0.1\overline{6}; \bar is the other way to write the vinculum.
_REPEATING = re.compile(r"(?<![\d.])(\d*)\.(\d*)\\(?:overline|bar)" + _ARG)
# An integer and a proper fraction of integers side by side. Not after a letter,
# a closing bracket or ^ _ . (x2\frac13, a^2\frac13, \frac{1}{2}3\frac14 are products).
_MIXED = re.compile(r"(?<![\w.^_}\])\]\\])(\d+)\s*\\frac" + _ARG + _ARG)


def _repeating(m: re.Match) -> str:
    whole, fixed, period = m.group(1) or "0", m.group(2), m.group(3) or m.group(4)
    scale = 10 ** len(fixed)
    value = Fraction(int(whole + fixed), scale) + Fraction(int(period), scale * (10 ** len(period) - 1))
    return f"(\\frac{{{value.numerator}}}{{{value.denominator}}})"


def _mixed(m: re.Match) -> str:
    num, den = int(m.group(2) or m.group(3)), int(m.group(4) or m.group(5))
    if not 0 < num < den:
        return m.group(0)  # 2\frac{4}{3} is no mixed number: TeX's product stands
    value = int(m.group(1)) + Fraction(num, den)
    return f"(\\frac{{{value.numerator}}}{{{value.denominator}}})"


def read_numerals(s: str) -> str:
    """Repeating decimals and mixed numbers as the exact fractions they stand for."""
    if "\\overline" in s or "\\bar" in s:
        s = _REPEATING.sub(_repeating, s)
    if "\\frac" in s:
        s = _MIXED.sub(_mixed, s)
    return s


def strip_math_delimiters(s: str) -> str:
    s = s.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
            s = s[len(left) : len(s) - len(right)].strip()
    return s


def _unit(m: re.Match, named: set[str]) -> str:
    """Drops the unit that ``m`` matched, recording its name (and power) in ``named``."""
    spelled = m.group(1).strip()
    prefix = re.match(r"(square|sq\.?|cubic)\s*", spelled, re.I)
    word = spelled[prefix.end() :] if prefix else spelled
    name = next((name for name, spelling in _UNIT_NAME if spelling.fullmatch(word)), None)
    if name is not None:
        power = m.group(2) or (prefix and ("3" if prefix.group(1).lower() == "cubic" else "2"))
        named.add(f"{name}^{power}" if power else name)
    return ""


@lru_cache(maxsize=65536)
def _read(answer: str) -> tuple[str, frozenset[str]]:
    named: set[str] = set()
    s = strip_math_delimiters(answer)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("\\dbinom", "\\binom").replace("\\tbinom", "\\binom")
    s = re.sub(r"\\begin\{[bv]?matrix\}", r"\\begin{pmatrix}", s)
    s = re.sub(r"\\end\{[bv]?matrix\}", r"\\end{pmatrix}", s)
    s = s.replace("\\left.", "").replace("\\right.", "")
    s = _SPACING.sub(" ", s)
    s = _DEGREES.sub("", s)
    s = _REALS.sub(r"(-\\infty,\\infty)", s)
    if "\\$" in s:
        named.add("dollar")  # \$5 is 5 dollars, so not 5 cents
    s = s.replace("\\%", "").replace("%", "").replace("\\$", "").replace("$", "")
    s = _TEXT_UNIT.sub(lambda m: _unit(m, named), s)
    for _ in range(3):  # nested \text{\textbf{...}}
        s2 = _WRAPPERS.sub(r"\1", s)
        if s2 == s:
            break
        s = s2
    s = s.replace("{,}", "")
    s = _TRAILING_UNIT.sub(lambda m: _unit(m, named), s).strip()
    s = s.rstrip(".").strip()
    s = _MEMBER.sub("", s).strip()
    s = re.sub(r"\s+", " ", s).strip()
    s = read_numerals(s)
    if _THOUSANDS.match(s):
        s = s.replace(",", "").replace(" ", "")
    mc = _MC.match(s)
    return (mc.group(1) if mc else s), frozenset(named)


def normalize(answer: str) -> str:
    return _read(answer)[0]


def units(answer: str) -> frozenset[str]:
    """The units ``answer`` names, by name and power (``cm^2``); empty when it names none."""
    return _read(answer)[1]


def assignment(s: str) -> tuple[str, str] | None:
    """(variable, value) of a normalised ``x = 5`` (also ``x_1 =``, ``f(x) =``); None otherwise."""
    if s.count("=") != 1:
        return None
    m = _LHS.match(s)
    if m is None:
        return None
    return re.sub(r"[\s{}]", "", m.group(1)), s[m.end() :].strip()


def compact(s: str) -> str:
    """The normalised form without any whitespace: what exact-match compares."""
    return re.sub(r"\s+", "", s)


def is_text_answer(raw: str) -> bool:
    """A word answer (``\\text{Monday}``): compared as a string, never as a product of symbols."""
    return bool(re.search(r"\\(?:text|textbf|mbox|mathrm)\s*\{[^{}]*[A-Za-z]{2,}", raw)) or bool(
        re.fullmatch(r"\s*[A-Za-z]{3,}(?:\s+[A-Za-z]+)*\s*", raw)
    )
