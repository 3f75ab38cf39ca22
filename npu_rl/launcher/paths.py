"""Where a run's files go, derived from the recipe and the workspace."""

from __future__ import annotations

import re
from pathlib import Path

from ..paths import workspace
from ..recipe.schema import Recipe


def resolve(path: str | Path) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else workspace() / p


def model_dir(recipe: Recipe) -> Path:
    return resolve(recipe.model.path)


def checkpoint_root(recipe: Recipe) -> Path:
    """verl's trainer.default_local_dir: <checkpoint.dir>/<project>/<experiment>."""
    return resolve(recipe.checkpoint.dir) / recipe.logging.project / recipe.logging.experiment


def step_dir(recipe: Recipe, step: int) -> Path:
    return checkpoint_root(recipe) / f"global_step_{step}"


def merged_model_dir(recipe: Recipe, step: int) -> Path:
    return step_dir(recipe, step) / "actor" / "huggingface"


def log_root(recipe: Recipe) -> Path:
    return resolve(recipe.logging.dir) / recipe.logging.project / recipe.logging.experiment


def tensorboard_dir(recipe: Recipe) -> Path:
    return log_root(recipe) / "tensorboard"


def swanlab_dir(recipe: Recipe) -> Path:
    return log_root(recipe) / "swanlab"


def metrics_file(recipe: Recipe, start_step: int = 0) -> Path:
    """verl's `file` logger truncates its file when it opens it, so each resumed
    segment of a run writes its own file (the report reads them all)."""
    return log_root(recipe) / f"metrics-from-step-{start_step}.jsonl"


def saved_steps(recipe: Recipe) -> list[int]:
    root = checkpoint_root(recipe)
    if not root.is_dir():
        return []
    steps = []
    for d in root.iterdir():
        m = re.fullmatch(r"global_step_(\d+)", d.name)
        if m and (d / "actor").is_dir():
            steps.append(int(m.group(1)))
    return sorted(steps)


def latest_step(recipe: Recipe) -> int | None:
    """The step verl resumes from (its latest_checkpointed_iteration.txt), else the newest dir."""
    marker = checkpoint_root(recipe) / "latest_checkpointed_iteration.txt"
    if marker.is_file():
        text = marker.read_text().strip()
        if text.isdigit():
            return int(text)
    steps = saved_steps(recipe)
    return steps[-1] if steps else None
