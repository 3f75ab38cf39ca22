"""The training steps a run showed: on the terminal (npu-rl's step lines, npu_rl.console.train) and in its
console.log (verl's own step lines)."""

from __future__ import annotations

import re

# Not anchored: `docker compose up` puts "cpu-demo-1  | " before each line of a container.
_SHOWN = re.compile(r"\bnpu-rl: step (\d+)(?:/\d+)? \|")
_RAW = re.compile(r"\bstep:(\d+) - ")


def shown_steps(terminal: str) -> list[int]:
    return [int(s) for s in _SHOWN.findall(terminal)]


def raw_steps(console_log: str) -> list[int]:
    return [int(s) for s in _RAW.findall(console_log)]
