"""Finds the final answer of a response, refusing the shapes reward hackers use.

The final answer is the last ``\\boxed{}`` (or ``\\fbox{}``) inside the last
``<answer>`` block, or in the whole response when there is no such block. A
response earns no answer at all when it boxes two or more different things,
leaves its last box empty or unclosed, or gives an answer longer than any real
MATH answer. All of this is a single linear scan, so a 100 kB response is cheap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_ANSWER_CHARS = 1000  # the longest MATH500 answer is ~100 chars
_BOX_RE = re.compile(r"\\(?:boxed|fbox)\b\s*")
_ANSWER_OPEN, _ANSWER_CLOSE = "<answer>", "</answer>"
_MATH_DELIMS = re.compile(r"^\s*(?:\$\$?|\\\(|\\\[)|(?:\$\$?|\\\)|\\\])\s*\.?\s*$")


@dataclass(frozen=True)
class Extraction:
    answer: str | None  # None: no acceptable final answer
    reason: str  # "boxed", "answer_block", or why there is no answer


def _answer_region(response: str) -> tuple[str, bool]:
    start = response.rfind(_ANSWER_OPEN)
    if start == -1:
        return response, False
    body = response[start + len(_ANSWER_OPEN) :]
    end = body.find(_ANSWER_CLOSE)
    return (body if end == -1 else body[:end]), True


def _braced(text: str, open_at: int) -> int:
    """Index just past the brace group opening at ``open_at``, or -1 when it never closes."""
    depth = 0
    i, n = open_at, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2  # an escaped brace \{ does not count
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


def boxed_contents(region: str) -> list[str | None]:
    """Contents of every box in order; None for one that is not closed."""
    out: list[str | None] = []
    pos = 0
    while True:
        m = _BOX_RE.search(region, pos)
        if not m:
            return out
        at = m.end()
        if at < len(region) and region[at] == "{":
            end = _braced(region, at)
            if end == -1:
                out.append(None)
                return out  # everything after an unclosed box is inside it
            out.append(region[at + 1 : end - 1])
            pos = end
        else:  # "\boxed 5": the argument is the next token
            tok = re.match(r"[^\s$\\{}]+", region[at:])
            out.append(tok.group(0) if tok else None)
            pos = at + (tok.end() if tok else 0)


def _canon(s: str) -> str:
    return re.sub(r"\s+|\\[,;:! ]|\\left|\\right", "", s)


def extract_answer(response: str) -> Extraction:
    region, in_block = _answer_region(response)
    boxes = boxed_contents(region)
    if not boxes:
        if in_block:
            # A bare answer in the <answer> block the prompt asked for.
            bare = _MATH_DELIMS.sub("", region.strip()).strip()
            if bare and len(bare) <= MAX_ANSWER_CHARS and "\n" not in bare:
                return Extraction(bare, "answer_block")
        return Extraction(None, "no_box")
    if boxes[-1] is None:
        return Extraction(None, "unclosed_box")
    final = boxes[-1].strip()
    if not final:
        return Extraction(None, "empty_box")
    if len(final) > MAX_ANSWER_CHARS:
        return Extraction(None, "too_long")
    if len({_canon(b) for b in boxes if b is not None and b.strip()}) > 1:
        return Extraction(None, "several_boxed_answers")
    return Extraction(final, "boxed")
