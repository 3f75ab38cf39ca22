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


def write_complete_checkpoint(step_dir: Path, world: int) -> Path:
    """The files of a complete verl FSDP checkpoint of ``world`` ranks (placeholder contents);
    returns its ``actor/huggingface`` directory, where a merge writes the model."""
    actor = step_dir / "actor"
    (actor / "huggingface").mkdir(parents=True, exist_ok=True)
    for kind in ("model", "optim", "extra_state"):
        for rank in range(world):
            (actor / f"{kind}_world_size_{world}_rank_{rank}.pt").write_bytes(b"shard")
    (step_dir / "data.pt").write_bytes(b"dataloader")
    return actor / "huggingface"


@pytest.fixture
def complete_checkpoint():
    return write_complete_checkpoint
