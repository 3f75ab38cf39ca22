"""Is the extracted answer the ground truth? Structure first, then value.

``judge`` answers True/False when cheap checks decide, or None when only the
symbolic fallback (run in a worker process under the time budget) can. Shape is
decisive: a list, set or tuple never equals a scalar, which is what makes
enumerating candidates (``\\boxed{4, 5, 6}``) worthless.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from npu_rl.reward import latex_eval
from npu_rl.reward.normalize import compact, is_text_answer, normalize

_OPENERS = {"(": ")", "[": "]", "{": "}"}
_MATRIX = re.compile(r"^\\begin\{pmatrix\}(.*)\\end\{pmatrix\}$", re.S)


@dataclass(frozen=True)
class Shape:
    kind: str  # scalar | text | choice | set | list | interval | matrix | union | equation
    parts: tuple = ()
    brackets: str = ""
    text: str = ""


def split_top(s: str, sep: str) -> list[str]:
    """Split on ``sep`` outside any brackets (``\\{``/``\\}`` count as brackets)."""
    parts, depth, start, i, n = [], 0, 0, 0, len(s)
    while i < n:
        if s.startswith("\\{", i):
            depth += 1
            i += 2
            continue
        if s.startswith("\\}", i):
            depth -= 1
            i += 2
            continue
        c = s[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and s.startswith(sep, i):
            parts.append(s[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(s[start:])
    return [p.strip() for p in parts]


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


@lru_cache(maxsize=65536)
def shape_of(raw: str) -> Shape:
    s = normalize(raw)
    if is_text_answer(raw) and latex_eval.parse(s) is None:
        return Shape("text", text=compact(s).lower())
    if re.fullmatch(r"[A-E]", s):
        return Shape("choice", text=s)
    m = _MATRIX.match(s)
    if m:
        rows = tuple(tuple(c.strip() for c in row.split("&")) for row in re.split(r"\\\\", m.group(1)) if row.strip())
        return Shape("matrix", parts=rows)
    union = split_top(s, "\\cup")
    if len(union) > 1:
        return Shape("union", parts=tuple(shape_of(p) for p in union))
    if s.startswith("\\{") and s.endswith("\\}"):
        return Shape("set", parts=tuple(_expand_pm([p for p in split_top(s[2:-2], ",") if p])))
    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]" and _closes_at_end(s):
        inner = split_top(s[1:-1], ",")
        if len(inner) > 1:
            return Shape("interval", parts=tuple(inner), brackets=s[0] + s[-1])
    items = split_top(s, ",")
    if len(items) > 1:
        return Shape("list", parts=tuple(_expand_pm(items)))
    expanded = _expand_pm([s])
    if len(expanded) > 1:
        return Shape("set", parts=tuple(expanded))
    sides = split_top(s, "=")
    if len(sides) == 2 and all(sides):
        return Shape("equation", parts=tuple(sides))
    return Shape("scalar", text=s)


_BASED = re.compile(r"^([0-9A-Za-z]+)_\{?(\d+)\}?$")


def scalar_equal(pred: str, gt: str) -> bool | None:
    p, g = normalize(pred), normalize(gt)
    if compact(p) == compact(g):
        return True
    bp, bg = _BASED.match(compact(p)), _BASED.match(compact(g))
    if bp or bg:  # 52_8 is a numeral in base 8: same digits, same base, or not the answer
        return bool(bp and bg and bp.groups() == bg.groups())
    tp, tg = latex_eval.parse(p), latex_eval.parse(g)
    if tp is None or tg is None:
        return None
    return latex_eval.equal(tp, tg)


def _ordered(preds: tuple, gts: tuple) -> bool | None:
    if len(preds) != len(gts):
        return False
    verdicts = [scalar_equal(p, g) for p, g in zip(preds, gts)]
    if False in verdicts:
        return False
    return None if None in verdicts else True


def _unordered(preds: tuple, gts: tuple) -> bool | None:
    if len(preds) != len(gts) or len(preds) > 12:
        return False if len(preds) != len(gts) else None
    table = [[scalar_equal(p, g) for g in gts] for p in preds]
    # Greedy matching on sure pairs is exact here: equality is transitive.
    used: set[int] = set()
    for row in table:
        j = next((j for j, v in enumerate(row) if v and j not in used), None)
        if j is None:
            return None if any(v is None for v in row) else False
        used.add(j)
    return True


def shapes_equal(pred: Shape, gt: Shape) -> bool | None:
    kinds = {pred.kind, gt.kind}
    if kinds <= {"set", "list"}:
        return _unordered(pred.parts, gt.parts)
    if pred.kind != gt.kind:
        return False
    if gt.kind == "scalar":
        return scalar_equal(pred.text, gt.text)
    if gt.kind in ("text", "choice"):
        return pred.text == gt.text
    if gt.kind == "interval":
        return False if pred.brackets != gt.brackets else _ordered(pred.parts, gt.parts)
    if gt.kind == "matrix":
        if [len(r) for r in pred.parts] != [len(r) for r in gt.parts]:
            return False
        return _ordered(tuple(c for r in pred.parts for c in r), tuple(c for r in gt.parts for c in r))
    if gt.kind == "equation":  # the same equation, possibly with the sides swapped
        (pl, pr), (gl, gr) = pred.parts, gt.parts
        verdicts = (scalar_equal(f"{pl}-({pr})", f"{gl}-({gr})"), scalar_equal(f"{pl}-({pr})", f"{gr}-({gl})"))
        if True in verdicts:
            return True
        return None if None in verdicts else False
    if gt.kind == "union":
        if len(pred.parts) != len(gt.parts):
            return False
        verdicts = [shapes_equal(p, g) for p, g in zip(pred.parts, gt.parts)]
        return False if False in verdicts else (None if None in verdicts else True)
    return None


def judge(pred: str, gt: str) -> bool | None:
    """True/False when the cheap checks decide; None: ask the symbolic fallback."""
    if compact(normalize(pred)) == compact(normalize(gt)):
        return True
    return shapes_equal(shape_of(pred), shape_of(gt))
