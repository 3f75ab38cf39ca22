"""Cheap string normalisation of LaTeX answers: the same value written the usual
different ways (``\\dfrac``, ``x = 3``, ``30^\\circ``, ``10\\text{ cm}``,
``1{,}000``, ``\\text{(B)}``) maps to one canonical string.

Only rewrites that never change the mathematical value belong here, plus the
two readings that both paths of the judge must share and that no LaTeX parser
makes by itself: a mixed number (``2\\frac{1}{3}`` is 7/3, not 2/3) and a
repeating decimal (``0.1\\overline{6}`` is 1/6), each rewritten as the exact
fraction it stands for. Everything else is decided by
:mod:`npu_rl.reward.latex_eval` or the symbolic fallback.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

_UNITS = (
    r"square\s+units?|sq\.?\s*units?|cubic\s+units?|units?|degrees?|radians?|"
    r"cm|mm|km|m|meters?|centimeters?|kilometers?|inch(?:es)?|in|feet|foot|ft|yards?|yd|miles?|mi|"
    r"seconds?|sec|minutes?|min|hours?|hrs?|days?|weeks?|months?|years?|"
    r"dollars?|cents?|pounds?|lbs?|ounces?|oz|grams?|g|kg|liters?|gallons?|mph|people|students|ways"
)
_TEXT_UNIT = re.compile(r"\\(?:text|mbox|mathrm|textrm)\{\s*(?:" + _UNITS + r")\s*\}(?:\^\{?[23]\}?)?", re.I)
_TRAILING_UNIT = re.compile(r"(?<=[\d}).])\s+(?:" + _UNITS + r")(?:\^\{?[23]\}?)?\s*$", re.I)
_WRAPPERS = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox|operatorname|boxed)\s*\{([^{}]*)\}")
_SPACING = re.compile(r"(?<!\\)\\(?:displaystyle|left|right|big|Big|bigg|Bigg|[,;:! ]|quad|qquad)(?![A-Za-z])|~")
_DEGREES = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|°|\\degree|\\circ")
_LHS = re.compile(r"^(?:[A-Za-z]|\\[A-Za-z]+)(?:_\{?\w+\}?)?(?:\([a-z]\))?\s*=(?!=)")
_MEMBER = re.compile(r"^[A-Za-z]\s*\\in\s*")  # "x \in [-2, 7]" is the interval
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
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


@lru_cache(maxsize=65536)
def normalize(answer: str) -> str:
    s = strip_math_delimiters(answer)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = s.replace("\\dbinom", "\\binom").replace("\\tbinom", "\\binom")
    s = re.sub(r"\\begin\{[bv]?matrix\}", r"\\begin{pmatrix}", s)
    s = re.sub(r"\\end\{[bv]?matrix\}", r"\\end{pmatrix}", s)
    s = s.replace("\\left.", "").replace("\\right.", "")
    s = _SPACING.sub(" ", s)
    s = _DEGREES.sub("", s)
    s = _REALS.sub(r"(-\\infty,\\infty)", s)
    s = s.replace("\\%", "").replace("%", "").replace("\\$", "").replace("$", "")
    s = _TEXT_UNIT.sub("", s)
    for _ in range(3):  # nested \text{\textbf{...}}
        s2 = _WRAPPERS.sub(r"\1", s)
        if s2 == s:
            break
        s = s2
    s = s.replace("{,}", "")
    s = _TRAILING_UNIT.sub("", s).strip()
    s = s.rstrip(".").strip()
    if s.count("=") == 1:
        s = _LHS.sub("", s).strip()
    s = _MEMBER.sub("", s).strip()
    s = re.sub(r"\s+", " ", s).strip()
    s = read_numerals(s)
    if _THOUSANDS.match(s.replace(" ", "")):
        s = s.replace(",", "")
    mc = _MC.match(s)
    if mc:
        return mc.group(1)
    return s


def compact(s: str) -> str:
    """The normalised form without any whitespace: what exact-match compares."""
    return re.sub(r"\s+", "", s)


def is_text_answer(raw: str) -> bool:
    """A word answer (``\\text{Monday}``): compared as a string, never as a product of symbols."""
    return bool(re.search(r"\\(?:text|textbf|mbox|mathrm)\s*\{[^{}]*[A-Za-z]{2,}", raw)) or bool(
        re.fullmatch(r"\s*[A-Za-z]{3,}(?:\s+[A-Za-z]+)*\s*", raw)
    )
