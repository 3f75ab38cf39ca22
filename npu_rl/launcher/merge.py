"""Merge a verl FSDP checkpoint into a Hugging Face model with verl's own merger."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .. import run_files
from ..console.progress import activity
from ..errors import UserError
from ..recipe.schema import Recipe
from .preflight import preflight


def merge(recipe: Recipe, step: int | None = None) -> Path:
    preflight(recipe, for_job="merge")
    steps = run_files.saved_steps(recipe)
    for skipped, problem in run_files.damaged_steps(recipe):
        if step is None:
            print(f"npu-rl: skipping damaged global_step_{skipped}: {problem}", flush=True)
    if step is not None and step not in steps:
        damage = dict(run_files.checkpoints(recipe)).get(step)
        why = f"global_step_{step} is incomplete ({damage})" if damage else "no checkpoint"
        raise UserError(f"--step {step}: {why}; complete steps: {', '.join(map(str, steps)) or 'none'}")
    if not steps:
        raise UserError(f"no complete checkpoint under {run_files.checkpoint_root(recipe)} (train first)")
    if step is None:
        step = steps[-1]
    actor = run_files.shards_dir(recipe, step)
    target = run_files.merged_model_dir(recipe, step)
    backend = "megatron" if recipe.actor.strategy == "megatron" else "fsdp"
    cmd = [
        sys.executable,
        "-m",
        "verl.model_merger",
        "merge",
        "--backend",
        backend,
        "--local_dir",
        str(actor),
        "--target_dir",
        str(target),
    ]
    with activity(f"merging global_step_{step} -> {target}"):
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
        raise UserError(f"verl.model_merger failed for {actor} (exit {proc.returncode}):\n{tail}", exit_code=1)
    if not any(target.glob("*.safetensors")):
        raise UserError(f"verl.model_merger wrote no model to {target}", exit_code=1)
    return target
