"""The Python interpreter a stack line's CPU environment is created with (`make venv STACK=<line>`).

A line pins its Python (``common.python``: 3.12 on cann9.1-verl0.9, the base images'), which need not be
this machine's ``python3``. Looked for, in order: ``LINE_PYTHON``; ``python<X.Y>`` on PATH; pyenv's
installed versions (whose PATH shim fails unless the version is selected); uv's managed interpreters.
Each candidate is run to ask its version, so a shim that cannot start one is passed over.

    python -m npu_rl.envs.interpreter LINE   # prints the interpreter's path, or one error line (exit 2)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .. import versions


def _version_of(path: str) -> str | None:
    try:
        out = subprocess.run(
            [path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def candidates(version: str) -> list[str]:
    found = [os.environ.get("LINE_PYTHON", ""), shutil.which(f"python{version}") or ""]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found += [str(p) for p in sorted(pyenv.glob(f"{version}*/bin/python{version}"), reverse=True)]
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    try:
        out = subprocess.run(
            [uv, "python", "find", "--no-project", "--no-python-downloads", version],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "UV_NO_CONFIG": "1"},
        )
        found.append(out.stdout.strip() if out.returncode == 0 else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return [c for c in dict.fromkeys(found) if c]


def find(line: str) -> str:
    version = str(versions.get("common.python", versions.load(stack=line)))
    for path in candidates(version):
        if _version_of(path) == version:
            return path
    raise LookupError(
        f"no Python {version} on this machine for stack line {line} (its common.python); install one "
        f"(pyenv install {version}, or the distribution's python{version} with venv) or name it in LINE_PYTHON"
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 1:
        print("usage: python -m npu_rl.envs.interpreter LINE", file=sys.stderr)
        return 2
    try:
        print(find(argv[0]))
    except (LookupError, KeyError) as err:
        print(f"npu-rl: error: {err.args[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
