"""What the training benchmarks share: the tiny recipe's model and data, one `npu-rl train` run read back
as its scalars, and the rounds/steps/warm-up arguments with the workspace they run in."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from npu_rl import run_files
from npu_rl.cli import main as npu_rl
from npu_rl.recipe import load_recipe
from npu_rl.report.scalars import load_run

RECIPE = "tiny_math_cpu"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse(description: str, rounds: int, steps: int, per: str) -> argparse.Namespace:
    """``--rounds``, ``--steps``, ``--warmup``; the workspace defaults to workspace/bench (git-ignored)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--rounds", type=int, default=rounds, help=f"runs per {per} (alternating)")
    ap.add_argument("--steps", type=int, default=steps, help="training steps per run")
    ap.add_argument("--warmup", type=int, default=1, help="leading steps of each run left out")
    args = ap.parse_args()
    if args.steps <= args.warmup:
        raise SystemExit("--steps must exceed --warmup")
    os.environ.setdefault("NPU_RL_WORKSPACE", str(Path(__file__).resolve().parents[1] / "workspace" / "bench"))
    return args


def prepare(sets: dict | None = None, model_args: tuple[str, ...] = ()) -> None:
    """The recipe's model (``npu-rl model tiny`` with ``model_args``) and the math sample, when absent."""
    recipe = load_recipe(RECIPE, sets or {})
    if not (run_files.model_dir(recipe) / "config.json").is_file():
        log("creating the tiny model ...")
        assert npu_rl(["model", "tiny", "--out", str(run_files.model_dir(recipe)), *model_args]) == 0
    data = run_files.resolve(recipe.data.train_files[0]).parent
    if not data.is_dir():
        assert npu_rl(["data", "math", "--from", "sample", "--out", str(data)]) == 0


def train(overrides: dict) -> tuple:
    """One `npu-rl train` of the recipe with ``overrides``: (the recipe it ran, its scalars, seconds)."""
    args = ["train", "--recipe", RECIPE]
    for key, value in overrides.items():
        args += ["--set", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    t0 = time.perf_counter()
    if npu_rl(args) != 0:
        raise SystemExit(f"training run {overrides['logging.experiment']} failed")
    recipe = load_recipe(RECIPE, overrides)
    return recipe, load_run(run_files.log_root(recipe)), time.perf_counter() - t0
