"""Reads the version pins from ``configs/versions.yaml`` (the only place they live).

``python -m npu_rl.versions get verl.version`` prints one pin (the Makefile's npu-stack);
``cpu_constraints`` are the CPU locks' constraints (npu_rl.envs.locks).
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from .paths import config_dir


@cache
def load(path: str | None = None) -> dict[str, Any]:
    p = Path(path) if path else config_dir() / "versions.yaml"
    with open(p, encoding="utf-8") as f:
        return yaml.safe_load(f)


def get(dotted: str, pins: dict[str, Any] | None = None) -> Any:
    node: Any = pins if pins is not None else load()
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"no pin {dotted!r} in configs/versions.yaml")
        node = node[part]
    return node


def pin_spec(value: str) -> str:
    """A pin as a requirement specifier: "1.2" -> "==1.2"; "<2" stays."""
    value = str(value)
    return value if value[:1] in "<>=!~" else f"=={value}"


def cpu_constraints(pins: dict[str, Any] | None = None) -> list[str]:
    """The pins that constrain the CPU locks (cpu, dev)."""
    pins = pins if pins is not None else load()
    return [
        f"verl{pin_spec(get('verl.version', pins))}",
        f"torch{pin_spec(get('cpu.torch', pins))}",
        f"numpy{pin_spec(get('common.numpy', pins))}",
        f"pyarrow{pin_spec(get('common.pyarrow', pins))}",
        f"datasets{pin_spec(get('common.datasets', pins))}",
        f"transformers{pin_spec(get('common.transformers', pins))}",
        f"ray{pin_spec(get('common.ray', pins))}",
        # The NPU image's Megatron-core, also on CPU: verl's megatron workers import it (the rehearsal).
        f"megatron-core{pin_spec(get('ascend.megatron_core', pins))}",
        f"tensorboard{pin_spec(get('dashboards.tensorboard', pins))}",
        f"math-verify{pin_spec(get('reward.math_verify', pins))}",
        f"antlr4-python3-runtime{pin_spec(get('reward.antlr4_python3_runtime', pins))}",
    ]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "get":
        print(get(argv[1]))
        return 0
    print("usage: python -m npu_rl.versions get DOTTED.KEY", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
