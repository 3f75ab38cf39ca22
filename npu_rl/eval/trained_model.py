"""Which trained model to evaluate, on top of the launcher's checkpoint layout."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import UserError
from ..recipe.schema import Recipe
from ..run_files import checkpoint_root, latest_step, merged_model_dir

_STEP_DIR = re.compile(r"global_step_(\d+)$")


def step_of(path: Path) -> int | None:
    """The training step a model path belongs to (``.../global_step_280/actor/huggingface`` -> 280)."""
    for part in reversed(path.parts):
        m = _STEP_DIR.search(part)
        if m:
            return int(m.group(1))
    return None


def resolve_trained_model(recipe: Recipe, step: int | None) -> tuple[Path, int]:
    """The merged model of ``step`` (the newest saved step when None), failing with what to run."""
    if step is None:
        step = latest_step(recipe)
        if step is None:
            raise UserError(f"no checkpoints under {checkpoint_root(recipe)} (train first, or pass --model PATH)")
    path = merged_model_dir(recipe, step)
    # verl saves config and tokenizer into actor/huggingface with every checkpoint; weights come from the merge.
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        if path.parent.is_dir():
            raise UserError(f"step {step} is not merged yet: run `npu-rl merge --recipe {recipe.name} --step {step}`")
        raise UserError(f"no checkpoint for step {step} under {checkpoint_root(recipe)}")
    return path, step
