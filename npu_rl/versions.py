"""Reads the version pins: ``configs/versions.yaml`` (what every stack line shares) merged with one stack
line's ``configs/stacks/<line>.yaml`` (its verl, CANN, torch_npu, vLLM, ... whole), the only places they live.

``load()`` is the default line's merged pins (``stacks.default``), the set `make venv`, the images and the
locks follow; ``load(stack=name)`` another line's. ``python -m npu_rl.versions get verl.version
[--stack LINE]`` prints one pin (the Makefile's npu-stack); ``lines`` lists the lines;
``cpu_constraints`` are the CPU locks' constraints (npu_rl.envs.locks).
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from .paths import config_dir

STACKS_DIR = "stacks"
# The verl releases the stack lines pin, by name (npu_rl.patches.guard fingerprints each patch per release;
# the launcher and the renderers say per release what differs).
VERL_0_6_1 = "0.6.1"
VERL_0_9_0 = "0.9.0"


def _read(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f) or {}


def stacks_dir() -> Path:
    return config_dir() / STACKS_DIR


def line_names() -> list[str]:
    """Every stack line there is a file for, by name."""
    return sorted(p.stem for p in stacks_dir().glob("*.yaml"))


@cache
def _shared() -> dict[str, Any]:
    return _read(config_dir() / "versions.yaml")


def default_line() -> str:
    return str(_shared()["stacks"]["default"])


def line_file(name: str) -> Path:
    path = stacks_dir() / f"{name}.yaml"
    if not path.is_file():
        raise KeyError(f"no stack line {name!r} (configs/stacks/ has: {', '.join(line_names())})")
    return path


@cache
def load(path: str | None = None, stack: str | None = None) -> dict[str, Any]:
    """The pins: ``path`` read as it is (a test's own file), else the shared pins with ``stack``'s (the
    default line when None). A line that sets a shared section is refused: one place per pin."""
    if path:
        return _read(Path(path))
    shared = _shared()
    name = stack or default_line()
    line = _read(line_file(name))
    if line.get("line", {}).get("name") != name:
        raise ValueError(f"configs/stacks/{name}.yaml names itself {line.get('line', {}).get('name')!r}")
    both = sorted(set(shared) & set(line))
    if both:
        raise ValueError(f"configs/stacks/{name}.yaml sets {', '.join(both)}, which configs/versions.yaml holds")
    return {**shared, **line}


def other_line(line: str | None) -> str | None:
    """``line`` when it is another stack line than the default; None for the default one (or None): the default
    line's locks, image tags and build arguments name no line."""
    return None if line in (None, default_line()) else line


def line_verl(line: str) -> str:
    """The verl release a stack line pins."""
    return str(get("verl.version", load(stack=line)))


def get(dotted: str, pins: dict[str, Any] | None = None) -> Any:
    node: Any = pins if pins is not None else load()
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"no pin {dotted!r} in configs/versions.yaml nor the stack line's file")
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


USAGE = "usage: python -m npu_rl.versions get DOTTED.KEY [--stack LINE] | lines"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["lines"]:
        print("\n".join(line_names()))
        return 0
    stack = None
    if len(argv) == 4 and argv[2] == "--stack":
        stack, argv = argv[3], argv[:2]
    if len(argv) == 2 and argv[0] == "get":
        try:
            print(get(argv[1], load(stack=stack)))
        except KeyError as e:
            print(f"npu-rl: error: {e.args[0]}", file=sys.stderr)
            return 2
        return 0
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
