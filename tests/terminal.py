"""What a terminal shows after a program's output: the few control sequences rich and tqdm use (carriage
return, line feed, cursor up, erase line); colours and other sequences dropped. Lines never wrap (a test
sets a wide terminal)."""

from __future__ import annotations

import re

_TOKEN = re.compile(r"\x1b\[([?\d;]*)([A-Za-z])|\r\n|\r|\n|[^\x1b\r\n]+|\x1b")


def screen(raw: bytes) -> list[str]:
    rows: list[str] = [""]
    row = col = 0
    for m in _TOKEN.finditer(raw.decode(errors="replace")):
        token = m.group(0)
        if m.group(2):
            if not m.group(1).isdigit() and m.group(1):
                continue  # a mode or colour: nothing moves
            n = int(m.group(1) or 1)
            if m.group(2) == "A":
                row = max(0, row - n)
            elif m.group(2) == "K":
                rows[row] = rows[row][:col] if m.group(1) in ("", "0") else ""
        elif token in ("\r\n", "\n"):
            row, col = row + 1, 0
            if row == len(rows):
                rows.append("")
        elif token == "\r":
            col = 0
        elif token != "\x1b":
            line = rows[row]
            rows[row] = line[:col].ljust(col) + token + line[col + len(token) :]
            col += len(token)
    while rows and not rows[-1].strip():
        rows.pop()
    return [r.rstrip() for r in rows]
