"""The static checks a contributor runs before every commit, configured in pyproject.toml: ruff's lint and
format check over the code and the tests, mypy over npu_rl/ (--check-untyped-defs), and import-linter's
contracts, which state the layers: which package of npu_rl may import which."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CODE = ["npu_rl", "tests", "benchmarks"]


def _run(*argv: str, timeout: int = 600) -> subprocess.CompletedProcess:
    tool = BIN / argv[0]
    if not tool.is_file():
        pytest.fail(f"{tool} is missing: it is in the dev lock (make venv)")
    return subprocess.run([str(tool), *argv[1:]], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_ruff_lint():
    out = _run("ruff", "check", "--no-cache", *CODE)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr


def test_ruff_format():
    out = _run("ruff", "format", "--check", "--no-cache", *CODE)
    assert out.returncode == 0, (
        out.stdout[-6000:] + out.stderr + "\n(run: .venv/bin/ruff format npu_rl tests benchmarks)"
    )


def test_mypy():
    # Its cache under .mypy_cache makes a second run take seconds.
    out = _run("mypy")
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr


def test_import_layers():
    out = _run("lint-imports", "--no-cache")
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr
