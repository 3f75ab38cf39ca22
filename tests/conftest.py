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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """`make test` spreads tests over every core (pytest-xdist, ``--dist loadgroup``). The tests of a
    module that share a module-scoped fixture stay on one worker, so the fixture is built once; an
    explicit ``xdist_group`` mark (the 2-node pods' runs, shared across modules) is kept as it is."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info else ()
        if any(d[-1].scope == "module" for d in defs if d):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
