"""`npu-rl sandbox serve` with named mechanisms of its jail switched off, for tests only.

usage: drill_server.py OFF[,OFF...] SHARED_DIR sandbox serve ARGS... (what tests/sandbox/conftest.py passes):
the real command, its jail made by the real ``make`` and then stripped of ``OFF``.
"""

from __future__ import annotations

import dataclasses
import sys

from npu_rl.cli import main
from npu_rl.sandbox import jail

off = frozenset(x for x in sys.argv[1].split(",") if x)
assert off <= jail.MECHANISMS, off
shared = sys.argv[2] or None
real_make = jail.make


def make(*args, **kwargs):
    return dataclasses.replace(real_make(*args, **kwargs), off=off, shared_dir=shared)


jail.make = make
sys.exit(main(sys.argv[3:]))
