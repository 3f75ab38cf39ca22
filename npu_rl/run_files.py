"""Where a run's files go, derived from the recipe and the workspace."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from .paths import workspace
from .recipe.schema import Recipe


def resolve(path: str | Path) -> Path:
    try:
        p = Path(path).expanduser()
    except RuntimeError:  # ~name of a user this host does not know: a relative path like any other
        p = Path(path)
    return p if p.is_absolute() else workspace() / p


def model_dir(recipe: Recipe) -> Path:
    return resolve(recipe.model.path)


def checkpoint_root(recipe: Recipe) -> Path:
    """verl's trainer.default_local_dir: <checkpoint.dir>/<project>/<experiment>."""
    return resolve(recipe.checkpoint.dir) / recipe.logging.project / recipe.logging.experiment


def step_path(root: Path, step: int) -> Path:
    """verl's directory of one step's checkpoint under a checkpoint root."""
    return root / f"global_step_{step}"


def step_dir(recipe: Recipe, step: int) -> Path:
    return step_path(checkpoint_root(recipe), step)


def shards_dir(recipe: Recipe, step: int) -> Path:
    """Where a step's model shards are: the actor's folder of a GRPO checkpoint; an SFT checkpoint's own
    (verl v0.9.0 utils/checkpoint/checkpoint_handler.py ``save_checkpoint``: the engine saves into the step's
    folder)."""
    return step_dir(recipe, step) if recipe.sft is not None else step_dir(recipe, step) / "actor"


def merged_model_dir(recipe: Recipe, step: int) -> Path:
    return shards_dir(recipe, step) / "huggingface"


def log_root(recipe: Recipe) -> Path:
    return resolve(recipe.logging.dir) / recipe.logging.project / recipe.logging.experiment


CONSOLE_LOG = "console.log"


def console_log(recipe: Recipe) -> Path:
    """The raw output of a run's newest attempt: verl, its workers, Ray (the terminal shows a digest)."""
    return log_root(recipe) / CONSOLE_LOG


def new_console_log(recipe: Recipe) -> Path:
    """``console.log`` for a new attempt; the one before is kept as ``console.<n>.log``, n counting attempts."""
    path = console_log(recipe)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        taken = [int(p.suffixes[0][1:]) for p in path.parent.glob("console.*.log") if p.suffixes[0][1:].isdigit()]
        path.rename(path.with_name(f"console.{max(taken, default=0) + 1}.log"))
    return path


def eval_dir(recipe: Recipe) -> Path:
    """Where `npu-rl eval` writes by default: next to the run's logs, where `npu-rl report --run <log root>`
    finds the table."""
    return log_root(recipe) / "eval"


def backend_dir(run_dir: Path, backend: str) -> Path:
    """Where a logging backend (tensorboard, swanlab) writes inside a run directory."""
    return run_dir / backend


def tensorboard_dir(recipe: Recipe) -> Path:
    return backend_dir(log_root(recipe), "tensorboard")


def swanlab_dir(recipe: Recipe) -> Path:
    return backend_dir(log_root(recipe), "swanlab")


def metrics_file(recipe: Recipe, start_step: int = 0) -> Path:
    """verl's `file` logger truncates its file when it opens it, so each resumed
    segment of a run writes its own file (the report reads them all)."""
    return log_root(recipe) / f"metrics-from-step-{start_step}.jsonl"


# verl 0.6.1 FSDPCheckpointManager.save_checkpoint writes one file of each kind per rank
# (``<kind>_world_size_<W>_rank_<r>.pt``); RayPPOTrainer._save_checkpoint then writes the
# dataloader state (``data.pt``) and, last, ``latest_checkpointed_iteration.txt``.
SHARD_KINDS = ("model", "optim", "extra_state")
DATALOADER_STATE = "data.pt"
MARKER = "latest_checkpointed_iteration.txt"
_STEP = re.compile(r"global_step_(\d+)")


def _marker(recipe: Recipe) -> int | None:
    marker = checkpoint_root(recipe) / MARKER
    text = marker.read_text().strip() if marker.is_file() else ""
    return int(text) if text.isdigit() else None


def checkpoint_problem(recipe: Recipe, step: int) -> str | None:
    """Why ``global_step_<step>`` cannot be resumed from or merged (None: it is complete)."""
    d = step_dir(recipe, step)
    actor = shards_dir(recipe, step)
    if not actor.is_dir():
        return "no actor/ directory"
    if recipe.actor.strategy == "megatron":
        if not any(p.name != "huggingface" for p in actor.iterdir()):
            return "actor/ holds no checkpoint"
    else:
        world = recipe.resources.world_size
        shards = [actor / f"{kind}_world_size_{world}_rank_{r}.pt" for kind in SHARD_KINDS for r in range(world)]
        missing = [p.name for p in shards if not p.is_file() or p.stat().st_size == 0]
        if missing:
            where = "" if recipe.sft is not None else "actor/"
            return f"{len(missing)} shard(s) missing or empty, e.g. {where}{missing[0]}"
    if recipe.sft is not None:
        # The SFT trainer saves each data-parallel rank's dataloader (checkpoint_handler.py: data_<dp rank>.pt).
        dp = recipe.resources.world_size // recipe.sft.ulysses_sequence_parallel_size
        lacking = [f"data_{r}.pt" for r in range(dp) if not (d / f"data_{r}.pt").is_file()]
        if lacking:
            return f"no {lacking[0]} (the save did not finish)"
    elif not (d / DATALOADER_STATE).is_file():
        return "no data.pt (the save did not finish)"
    marker = _marker(recipe)
    if marker is not None and step > marker:
        return f"newer than {MARKER} ({marker}): the save did not finish"
    return None


def step_numbers(root: Path) -> list[int]:
    """The steps of the ``global_step_N`` directories under a checkpoint root, oldest first."""
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for d in root.iterdir() if (m := _STEP.fullmatch(d.name)) and d.is_dir())


def remove_steps(root: Path, steps: list[int]) -> list[int]:
    """Remove whole ``global_step_N`` directories (verl's own rotation leaves data.pt behind)."""
    for s in steps:
        shutil.rmtree(step_path(root, s), ignore_errors=True)
    return list(steps)


def checkpoints(recipe: Recipe) -> list[tuple[int, str | None]]:
    """Every ``global_step_N`` directory of the run, oldest first, with its problem (None: complete)."""
    return [(s, checkpoint_problem(recipe, s)) for s in step_numbers(checkpoint_root(recipe))]


def saved_steps(recipe: Recipe) -> list[int]:
    """The complete checkpoints, oldest first."""
    return [s for s, problem in checkpoints(recipe) if problem is None]


def latest_step(recipe: Recipe) -> int | None:
    """The newest complete checkpoint: what a resume, a merge and an eval use."""
    steps = saved_steps(recipe)
    return steps[-1] if steps else None


def damaged_steps(recipe: Recipe) -> list[tuple[int, str]]:
    """Checkpoints newer than the newest complete one, which verl's own resume would pick or trip on."""
    found = checkpoints(recipe)
    latest = max((s for s, p in found if p is None), default=0)
    return [(s, p) for s, p in found if p is not None and s > latest]


def rotate_checkpoints(recipe: Recipe) -> list[int]:
    """Keep the newest ``checkpoint.max_to_keep`` complete checkpoints; returns the steps removed.

    Run by the launcher when a run ends, however it ended, with the full completeness check; the
    rotation during the run (npu_rl.patches.checkpoint_rotation) has only verl's config and counts a
    step complete once its data.pt is written. Older directories beyond the limit and incomplete ones
    older than the newest complete checkpoint go; newer ones are left to the next resume.
    """
    keep = recipe.checkpoint.max_to_keep
    complete = saved_steps(recipe)
    if keep is None or not complete:
        return []
    kept, root = set(complete[-keep:]), checkpoint_root(recipe)
    return remove_steps(root, [s for s in step_numbers(root) if s not in kept and s < complete[-1]])
