"""Shared fixtures: paths to the repo and to ../shared (absent in a user's fresh clone)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = (REPO / ".." / "shared").resolve()


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"../shared not found at {SHARED} (only CI and developers have it)")
    return SHARED


@pytest.fixture(scope="session")
def math500(shared_dir: Path) -> Path:
    path = shared_dir / "data" / "math500" / "test.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    return path
