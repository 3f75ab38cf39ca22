"""The instruction set a stack line's CPU numerics are held to (``cpu_isa`` in configs/stacks/<line>.yaml).

torch's own kernels, MKL and oneDNN pick their code path (AVX2, AVX-512) when the library loads, from
these variables or else from the CPU. Different paths round differently, and a seeded CPU run diverges
from its recorded curves within a few steps: the seeds' line pins AVX2, on which its demo's claim and
baseline were made. The pins are read once per process start, so they go into the environment of a
process that has not loaded torch yet: the training launch's (``npu_rl.launcher.overrides.run_env``) and
the warm start's (`npu-rl model tiny` runs itself again under them). A variable already set wins.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping

from .. import versions


def pins(line: str | None) -> dict[str, str]:
    """The line's ISA variables on an x86-64 machine (the variables name x86 instruction sets); none elsewhere."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return {}
    return {str(k): str(v) for k, v in (versions.load(stack=line).get("cpu_isa") or {}).items()}


def missing(line: str | None, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The line's pins that ``environ`` does not set yet (set ones are the user's choice and stay)."""
    return {k: v for k, v in pins(line).items() if k not in environ}
