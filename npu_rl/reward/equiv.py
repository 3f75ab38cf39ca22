"""Is the extracted answer the ground truth? The one definition of "equal".

Both paths of the reward run this module. The fast path, in the trainer's process, compares leaves (single
expressions) with ``latex_eval``; what that cannot decide is sent whole to a worker process, which runs the
very same ``judge`` with a symbolic leaf (``symbolic.leaf_equal``: ``latex_eval`` first, latex2sympy only for
what it cannot read) and the same rules (:mod:`npu_rl.reward.values`), so the verdict does not depend on the path.

Values (leaves)
  * Rationals are exact: ``1/2^{99}`` is not ``1/2^{98}``.
  * A decimal is the fraction it spells: ``0.25`` is ``\\frac14``, ``0.333`` is not ``\\frac13`` and ``5.43``
    is not a ground truth of ``5.4``: there is no rounding tolerance. A repeating decimal (``0.1\\overline{6}``)
    is its exact fraction, and so is a mixed number (``2\\frac{1}{3}`` is 7/3).
  * Everything else (``\\pi``, roots, logs, trig, ``i``) compares at 50 digits with relative tolerance 1e-35:
    ``\\sqrt8`` is ``2\\sqrt2``, ``3.14`` is not ``\\pi``. There is no absolute floor, so ``e^{-100}`` is not
    ``0`` (nor is ``10^{-50}``); a computation that cancels at those digits is exactly 0 (``\\sin\\pi``,
    ``\\sqrt2^2 - 2``).
  * A fraction equals an irrational only if it is short (|p|·q < 10^30, :mod:`npu_rl.reward.values`):
    ``\\log_2 8`` is ``3``, but ``\\pi`` is no decimal, not even one of 50 digits: the decimal is a fraction.
  * Expressions in variables are equal when they are the same function: equal at random rational points drawn
    from a fixed seed (positive points always, points with negative coordinates where both sides are real, so
    ``|x|`` is not ``x``), and where sampling cannot decide, by sympy's ``simplify`` in the worker.
  * ``\\log`` is the natural log; ``x^23`` is ``x^{23}``; notation that TeX and a reader take two ways
    (``\\frac432``, ``\\sqrt23``) is wrong on both paths.
  * Degrees, ``\\%``, thousands separators and ``\\text`` wrappers are dropped; a numeral in base b (``52_8``)
    equals only itself; multiple choices compare by letter.
  * Units are dropped from the value but compared: when both answers name units they must name the same ones
    (in any spelling: ``\\text{ cm}``, ``\\mbox{cm}``, ``cm``, ``centimeters``; ``cm^2`` is ``square cm``, not
    ``cm``; ``\\$`` is dollars). One side without units is MATH's convention (``5`` for ``5\\text{ cm}``) and
    compares the values only; so does the placeholder "units" (``12`` square units). ``5\\text{ cm}`` is not
    ``5\\text{ m}``.
  * Words (``\\text{Yes}``, ``even``) compare as strings, ignoring case and spaces: ``\\text{Yes}`` is ``yes``,
    and ``east`` is not ``seat`` although both read as the same product of letters.

Structure (decided before value: a scalar never equals a list, so enumerating candidates earns nothing)
  * Lists and sets are the same thing, unordered and one-to-one: ``3, 1``, ``\\{1, 3\\}``, ``1 \\text{ or } 3``,
    ``1, \\text{and } 3``, ``x = 1 \\text{ or } x = 3``, ``x_1 = 1, x_2 = 3``, and ``2 \\pm 1`` all equal each
    other; ``1, 1`` is not ``1``.
  * Tuples and intervals (``(a, b)``, ``[a, b)``) are ordered and their brackets must match; a tuple is never
    a list.
  * An inequality in one variable is an interval: ``2 \\le x < 5`` is ``[2, 5)``, ``x > 3`` is
    ``(3, \\infty)``, ``x \\ne 2`` is ``(-\\infty, 2) \\cup (2, \\infty)``; ``or`` joins intervals into a union,
    ``and`` intersects a lower and an upper bound. Any other inequality (``x < y``) is no value: it equals
    only itself, as text.
  * A union equals the same intervals in any order (they are not merged: ``(0, 1] \\cup (1, 2)`` is not
    ``(0, 2)``).
  * Equations are compared as equations. ``x = a`` (one variable, maybe subscripted, or ``f(x)``) is an
    answer about x: it is the answer ``a`` when the other side has no such left-hand side or the same one
    (``x = 5`` is ``5`` and ``x=5``; ``x = 1, 2`` is ``x = 1, x = 2``). Otherwise both are equations and equal
    only as the same equation, sides possibly swapped: ``y = 5`` is not ``x = 5``, ``y = 2x+3`` is not
    ``x = 2x+3`` but is ``2x - y + 3 = 0``, ``5 = x`` is ``x = 5``.
  * Matrices: same dimensions, entries in order.

Evaluated answers (a rubric rule on top of "equal", :mod:`npu_rl.reward.evaluated`)
  * "Equal" compares values, so ``17 \\times 23`` equals ``391``, but accuracy is paid only for an evaluated
    answer: arithmetic between numerals restates the computation and earns nothing, on every path.

``judge`` answers True/False when the fast path decides and None when only the worker can; the worker's None
(a list too long to match) counts as False.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import lru_cache

from npu_rl.reward import latex_eval
from npu_rl.reward.normalize import assignment, compact, is_text_answer, normalize, units

Leaf = Callable[[str, str], bool | None]  # two normalised expressions -> verdict, None: cannot tell

_MATRIX = re.compile(r"^\\begin\{pmatrix\}(.*)\\end\{pmatrix\}$", re.S)
# "or"/"and" as words (what \text{ or } normalises to) or as logic symbols.
_CONNECTIVE = re.compile(r"(?<![A-Za-z\\])(or|and)(?![A-Za-z])|\\(lor|vee|land|wedge)(?![A-Za-z])")
_RELATION = re.compile(r"\\(?:leqslant|geqslant|leq|geq|neq|le|ge|ne|lt|gt)(?![A-Za-z])|<=|>=|<|>|≤|≥|≠")
_VARIABLE = re.compile(r"([A-Za-z]|\\[A-Za-z]+)(?:_\{?\w+\}?)?")
_MAX_MATCHED = 32  # elements of a list or set matched pairwise; MATH lists are far shorter
_WORD = re.compile(r"[A-Za-z]+(?: [A-Za-z]+)*")


@dataclass(frozen=True)
class Shape:
    kind: str  # scalar | text | choice | set | list | interval | matrix | union | equation | relation
    parts: tuple = ()  # Shapes; for an equation its two sides, for a matrix rows of Shapes
    brackets: str = ""
    text: str = ""
    lhs: str = ""  # the variable of "x = ..." (the answer is about x), kept to compare with the other side's


def _separators(s: str, sep: str | re.Pattern) -> list[tuple[int, int]]:
    """Spans of ``sep`` outside any brackets (``\\{``/``\\}`` count as brackets)."""
    spans, depth, i, n = [], 0, 0, len(s)
    while i < n:
        if s.startswith("\\{", i) or s.startswith("\\}", i):
            depth += 1 if s[i + 1] == "{" else -1
            i += 2
            continue
        c = s[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0:
            if isinstance(sep, re.Pattern):
                m = sep.match(s, i)
                end = m.end() if m else None
            else:
                end = i + len(sep) if s.startswith(sep, i) else None
            if end is not None:
                spans.append((i, end))
                i = end
                continue
        i += 1
    return spans


def split_top(s: str, sep: str | re.Pattern) -> list[str]:
    """Split on ``sep`` outside any brackets."""
    parts, start = [], 0
    for a, b in _separators(s, sep):
        parts.append(s[start:a])
        start = b
    parts.append(s[start:])
    return [p.strip() for p in parts]


def _split_keep(s: str, sep: re.Pattern) -> tuple[list[str], list[str]]:
    spans = _separators(s, sep)
    cuts = [0] + [x for span in spans for x in span] + [len(s)]
    parts = [s[cuts[k] : cuts[k + 1]].strip() for k in range(0, len(cuts), 2)]
    return parts, [s[a:b] for a, b in spans]


def _closes_at_end(s: str) -> bool:
    """True when the bracket opening ``s`` is the one closing it."""
    depth = 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i == len(s) - 1
    return False


def _expand_pm(items: list[str]) -> list[str]:
    """``a \\pm b`` is the two answers a + b and a - b."""
    out: list[str] = []
    for item in items:
        m = re.search(r"\\(?:pm|mp)(?![A-Za-z])", item)
        if m is None or len(out) > 16:
            out.append(item)
            continue
        head, tail = item[: m.start()], item[m.end() :]
        out += _expand_pm([f"{head}+{tail}", f"{head}-{tail}"])
    return out


def _elements(items: Iterable[str]) -> tuple[Shape, ...]:
    """Shapes of list items, a nested bare list flattened (``1, 2 \\text{ or } 3``)."""
    out: list[Shape] = []
    for item in items:
        shape = shape_of(item)
        out += shape.parts if shape.kind == "list" else [shape]
    return tuple(out)


_INF, _NEG_INF = "\\infty", "-\\infty"


def _interval(lo: str, lo_open: bool, hi: str, hi_open: bool) -> Shape:
    brackets = ("(" if lo_open else "[") + (")" if hi_open else "]")
    return Shape("interval", parts=(shape_of(lo), shape_of(hi)), brackets=brackets)


def _is_variable(s: str) -> bool:
    m = _VARIABLE.fullmatch(s)
    if m is None or s in ("e", "i"):
        return False
    return not m.group(1).startswith("\\") or m.group(1) in latex_eval.GREEK


def _relation(op: str) -> tuple[str, bool]:
    """("<" | ">" | "!=", strict)."""
    if op in ("<", "\\lt"):
        return "<", True
    if op in (">", "\\gt"):
        return ">", True
    if op in ("\\ne", "\\neq", "≠"):
        return "!=", True
    return ("<" if op in ("<=", "≤") or op.startswith("\\le") else ">"), False


def _inequality(s: str) -> Shape | None:
    """The interval (or union) that an inequality in one variable describes."""
    parts, ops = _split_keep(s, _RELATION)
    if not ops or not all(parts):
        return None
    rels = [_relation(op) for op in ops]
    if len(parts) == 2:
        (left, right), (rel, strict) = parts, rels[0]
        if _is_variable(right) and not _is_variable(left):
            left, right = right, left
            rel = {"<": ">", ">": "<"}.get(rel, rel)
        elif not _is_variable(left) or _is_variable(right):
            return None
        if rel == "!=":
            return Shape("union", parts=(_interval(_NEG_INF, True, right, True), _interval(right, True, _INF, True)))
        return _interval(_NEG_INF, True, right, strict) if rel == "<" else _interval(right, strict, _INF, True)
    if len(parts) == 3 and _is_variable(parts[1]) and not (_is_variable(parts[0]) or _is_variable(parts[2])):
        (r1, s1), (r2, s2) = rels
        if r1 == r2 == "<":
            return _interval(parts[0], s1, parts[2], s2)
        if r1 == r2 == ">":
            return _interval(parts[2], s2, parts[0], s1)
    return None


def _is_lower_bound(sh: Shape) -> bool:
    return sh.kind == "interval" and len(sh.parts) == 2 and sh.parts[1].text == _INF and sh.parts[0].text != _NEG_INF


def _is_upper_bound(sh: Shape) -> bool:
    return sh.kind == "interval" and len(sh.parts) == 2 and sh.parts[0].text == _NEG_INF and sh.parts[1].text != _INF


def _joined(s: str) -> Shape | None:
    """Alternatives joined by "or"/"and": a list, or a union/intersection of intervals."""
    pieces, seps = _split_keep(s, _CONNECTIVE)
    pieces = [p.strip(", ") for p in pieces]
    if len(pieces) < 2 or not all(pieces):
        return None
    words = {"and" if w.strip().lstrip("\\") in ("and", "land", "wedge") else "or" for w in seps}
    shapes = [shape_of(p) for p in pieces]
    if words == {"or"} and all(sh.kind in ("interval", "union") for sh in shapes):
        return Shape("union", parts=tuple(p for sh in shapes for p in (sh.parts if sh.kind == "union" else [sh])))
    if words == {"and"} and len(shapes) == 2:
        lower = next((sh for sh in shapes if _is_lower_bound(sh)), None)
        upper = next((sh for sh in shapes if _is_upper_bound(sh)), None)
        if lower is not None and upper is not None and lower is not upper:
            brackets = lower.brackets[0] + upper.brackets[1]
            return Shape("interval", parts=(lower.parts[0], upper.parts[1]), brackets=brackets)
    return Shape("list", parts=_elements(pieces))


def _about(shape: Shape, var: str) -> Shape:
    """``shape`` as the value of ``var``; ``x = 1, 2`` is the list ``x = 1, x = 2``."""
    if shape.kind in ("list", "set"):
        return replace(shape, parts=tuple(p if p.lhs else replace(p, lhs=var) for p in shape.parts))
    return replace(shape, lhs=var)


@lru_cache(maxsize=65536)
def shape_of(raw: str) -> Shape:
    s = normalize(raw)
    assigned = assignment(s)
    if assigned is not None:
        return _about(shape_of(assigned[1]), assigned[0])
    if _CONNECTIVE.search(s):
        joined = _joined(s)
        if joined is not None:
            return joined
    # A word is a string even where it also reads as a product of letters ("east" is not "seat").
    if is_text_answer(raw) and (latex_eval.parse(s) is None or _WORD.fullmatch(s)):
        return Shape("text", text=compact(s).lower())
    if re.fullmatch(r"[A-E]", s):
        return Shape("choice", text=s)
    m = _MATRIX.match(s)
    if m:
        rows = [row for row in re.split(r"\\\\", m.group(1)) if row.strip()]
        return Shape("matrix", parts=tuple(tuple(shape_of(c.strip()) for c in row.split("&")) for row in rows))
    union = split_top(s, "\\cup")
    if len(union) > 1:
        return Shape("union", parts=tuple(shape_of(p) for p in union))
    if s.startswith("\\{") and s.endswith("\\}"):
        return Shape("set", parts=_elements(_expand_pm([p for p in split_top(s[2:-2], ",") if p])))
    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]" and _closes_at_end(s):
        inner = split_top(s[1:-1], ",")
        if len(inner) > 1:
            return Shape("interval", parts=tuple(shape_of(p) for p in inner), brackets=s[0] + s[-1])
    items = [p for p in split_top(s, ",") if p]
    if len(items) > 1:
        return Shape("list", parts=_elements(_expand_pm(items)))
    expanded = _expand_pm([s])
    if len(expanded) > 1:
        return Shape("set", parts=_elements(expanded))
    if _RELATION.search(s):
        inequality = _inequality(s)
        return inequality if inequality is not None else Shape("relation", text=compact(s))
    sides = split_top(s, "=")
    if len(sides) == 2 and all(sides):
        return Shape("equation", parts=tuple(sides))
    return Shape("scalar", text=s)


_BASED = re.compile(r"^([0-9A-Za-z]+)_\{?(\d+)\}?$")


def fast_leaf(pred: str, gt: str) -> bool | None:
    tp, tg = latex_eval.parse(pred), latex_eval.parse(gt)
    if tp is None or tg is None:
        return None
    return latex_eval.equal(tp, tg)


def scalar_equal(pred: str, gt: str, leaf: Leaf = fast_leaf) -> bool | None:
    p, g = normalize(pred), normalize(gt)
    if compact(p) == compact(g):
        return True
    bp, bg = _BASED.match(compact(p)), _BASED.match(compact(g))
    if bp or bg:  # 52_8 is a numeral in base 8: same digits, same base, or not the answer
        return bool(bp and bg and bp.groups() == bg.groups())
    if latex_eval.refused(p) or latex_eval.refused(g):
        return False
    return leaf(p, g)


def _all(verdicts: Iterable[bool | None]) -> bool | None:
    """False as soon as one is False; otherwise None if any is None, else True."""
    undecided = False
    for v in verdicts:
        if v is False:
            return False
        undecided |= v is None
    return None if undecided else True


def _ordered(preds: tuple, gts: tuple, leaf: Leaf) -> bool | None:
    if len(preds) != len(gts):
        return False
    return _all(shapes_equal(p, g, leaf) for p, g in zip(preds, gts))


def _unordered(preds: tuple, gts: tuple, leaf: Leaf) -> bool | None:
    if len(preds) != len(gts):
        return False
    if len(preds) > _MAX_MATCHED:
        return None
    # Greedy matching on sure pairs is exact: equality is transitive.
    used: set[int] = set()
    for p in preds:
        row = {j: shapes_equal(p, g, leaf) for j, g in enumerate(gts) if j not in used}
        j = next((j for j, v in row.items() if v), None)
        if j is None:
            return None if None in row.values() else False
        used.add(j)
    return True


def _sides(sh: Shape) -> tuple[str, str] | None:
    if sh.kind == "equation":
        return sh.parts
    return (sh.lhs, sh.text) if sh.kind == "scalar" and sh.lhs else None


def _same_equation(pred: tuple[str, str], gt: tuple[str, str], leaf: Leaf) -> bool | None:
    """The same equation, possibly with the sides swapped."""
    (pl, pr), (gl, gr) = pred, gt
    diff = f"{pl}-({pr})"
    verdicts = (scalar_equal(diff, f"{gl}-({gr})", leaf), scalar_equal(diff, f"{gr}-({gl})", leaf))
    if True in verdicts:
        return True
    return None if None in verdicts else False


def shapes_equal(pred: Shape, gt: Shape, leaf: Leaf = fast_leaf) -> bool | None:
    if (pred.lhs and gt.lhs and pred.lhs != gt.lhs) or ("equation" in (pred.kind, gt.kind) and (pred.lhs or gt.lhs)):
        # Not both about one variable: equations, equal only as equations (y = 5 is not x = 5).
        ps, gs = _sides(pred), _sides(gt)
        return False if ps is None or gs is None else _same_equation(ps, gs, leaf)
    if {pred.kind, gt.kind} <= {"set", "list"}:
        return _unordered(pred.parts, gt.parts, leaf)
    if {pred.kind, gt.kind} == {"text", "scalar"} and _WORD.fullmatch(f"{pred.text} {gt.text}"):
        # A bare "No" is too short to be taken for a word on its own, but against a word it is one.
        return compact(pred.text).lower() == compact(gt.text).lower()
    if pred.kind != gt.kind:
        return False
    if gt.kind == "scalar":
        return scalar_equal(pred.text, gt.text, leaf)
    if gt.kind in ("text", "choice", "relation"):
        return pred.text == gt.text
    if gt.kind == "interval":
        return False if pred.brackets != gt.brackets else _ordered(pred.parts, gt.parts, leaf)
    if gt.kind == "union":
        return _unordered(pred.parts, gt.parts, leaf)
    if gt.kind == "matrix":
        if [len(r) for r in pred.parts] != [len(r) for r in gt.parts]:
            return False
        return _ordered(tuple(c for r in pred.parts for c in r), tuple(c for r in gt.parts for c in r), leaf)
    if gt.kind == "equation":
        return _same_equation(pred.parts, gt.parts, leaf)
    return None


def judge(pred: str, gt: str, leaf: Leaf = fast_leaf) -> bool | None:
    """True/False when decided; None: the fast leaf could not tell, ask the worker."""
    pred_units, gt_units = units(pred), units(gt)
    if pred_units and gt_units and pred_units != gt_units:
        return False
    if compact(normalize(pred)) == compact(normalize(gt)):
        return True
    return shapes_equal(shape_of(pred), shape_of(gt), leaf)
