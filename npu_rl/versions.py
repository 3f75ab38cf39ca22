"""Reads the version pins from ``configs/versions.yaml`` (the only place they live).

``python -m npu_rl.versions constraints`` prints a pip constraints file for the CPU
environment; ``python -m npu_rl.versions get verl.version`` prints one pin (used by
the Makefile and the image build).
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from .paths import config_dir


@lru_cache(maxsize=None)
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


def _spec(value: str) -> str:
    value = str(value)
    return value if value[:1] in "<>=!~" else f"=={value}"


def cpu_constraints(pins: dict[str, Any] | None = None) -> list[str]:
    """pip constraint lines for the CPU training environment."""
    pins = pins if pins is not None else load()
    return [
        f"verl{_spec(get('verl.version', pins))}",
        f"torch{_spec(get('cpu.torch', pins))}",
        f"numpy{_spec(get('common.numpy', pins))}",
        f"pyarrow{_spec(get('common.pyarrow', pins))}",
        f"datasets{_spec(get('common.datasets', pins))}",
        f"transformers{_spec(get('common.transformers', pins))}",
        f"ray{_spec(get('common.ray', pins))}",
        # The NPU image's Megatron-core, also on CPU: verl's megatron workers import it (the rehearsal).
        f"megatron-core{_spec(get('ascend.megatron_core', pins))}",
        f"tensorboard{_spec(get('dashboards.tensorboard', pins))}",
        f"math-verify{_spec(get('reward.math_verify', pins))}",
        f"antlr4-python3-runtime{_spec(get('reward.antlr4_python3_runtime', pins))}",
    ]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["constraints"]:
        print("\n".join(cpu_constraints()))
        return 0
    if len(argv) == 2 and argv[0] == "get":
        print(get(argv[1]))
        return 0
    print("usage: python -m npu_rl.versions constraints | get DOTTED.KEY", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
