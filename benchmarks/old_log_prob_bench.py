"""Step time with the old_log_prob pass skipped (on) against recomputed (off), tiny CPU recipe.

Runs ``npu-rl train`` for both settings alternately (off, on, off, on, ...) in one
workspace, each run a fresh experiment of ``--steps`` steps, and compares the
per-step ``timing_s/step`` of all steps after the first (warm-up) ones:

    median step time ratio (on / off), and the time removed per step (off - on).

    NPU_RL_WORKSPACE=/tmp/ws .venv/bin/python benchmarks/old_log_prob_bench.py [--rounds 3 --steps 4]

The workspace needs the tiny model and the math sample (created here when absent);
without NPU_RL_WORKSPACE it is workspace/bench (git-ignored), never the current directory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from npu_rl import run_files
from npu_rl.cli import main as npu_rl
from npu_rl.recipe import load_recipe
from npu_rl.report.scalars import load_run

RECIPE = "tiny_math_cpu"
SETTINGS = (("off", True), ("on", False))  # name, recompute_old_log_prob


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def prepare() -> None:
    recipe = load_recipe(RECIPE)
    if not (run_files.model_dir(recipe) / "config.json").is_file():
        log("creating the tiny model ...")
        assert npu_rl(["model", "tiny", "--out", str(run_files.model_dir(recipe))]) == 0
    data = run_files.resolve(recipe.data.train_files[0]).parent
    if not data.is_dir():
        assert npu_rl(["data", "math", "--from", "sample", "--out", str(data)]) == 0


def run_once(name: str, recompute: bool, steps: int, tag: str) -> dict[str, list[float]]:
    overrides = {
        "logging.experiment": f"olp_bench_{tag}_{name}",
        "optimizations.recompute_old_log_prob": recompute,
        "algorithm.total_training_steps": steps,
        "checkpoint.test_freq": -1,
        "checkpoint.save_freq": -1,
        "checkpoint.resume": "disable",
    }
    args = ["train", "--recipe", RECIPE]
    for key, value in overrides.items():
        args += ["--set", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    t0 = time.perf_counter()
    if npu_rl(args) != 0:
        raise SystemExit(f"training run {overrides['logging.experiment']} failed")
    scalars = load_run(run_files.log_root(load_recipe(RECIPE, overrides)))
    out = {
        t: list(scalars[t].values)
        for t in ("timing_s/step", "timing_s/old_log_prob", "timing_s/update_actor")
        if t in scalars
    }
    log(
        f"  {name}: {len(out['timing_s/step'])} steps, run {time.perf_counter() - t0:.0f} s, "
        f"step times {', '.join(f'{v:.2f}' for v in out['timing_s/step'])}"
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="runs per setting (alternating)")
    ap.add_argument("--steps", type=int, default=4, help="training steps per run")
    ap.add_argument("--warmup", type=int, default=1, help="leading steps of each run left out")
    args = ap.parse_args()
    if args.steps <= args.warmup:
        raise SystemExit("--steps must exceed --warmup")
    os.environ.setdefault("NPU_RL_WORKSPACE", str(Path(__file__).resolve().parents[1] / "workspace" / "bench"))
    prepare()
    tag = time.strftime("%H%M%S")
    steps: dict[str, list[float]] = {name: [] for name, _ in SETTINGS}
    old_pass: list[float] = []
    for i in range(args.rounds):
        for name, recompute in SETTINGS:
            log(f"round {i + 1}/{args.rounds}, old_log_prob skip {name} ...")
            result = run_once(name, recompute, args.steps, f"{tag}_{i}")
            steps[name] += result["timing_s/step"][args.warmup :]
            old_pass += result.get("timing_s/old_log_prob", [])[args.warmup :]
            if name == "on" and "timing_s/old_log_prob" in result:
                raise SystemExit("timing_s/old_log_prob logged with the pass skipped")
    off, on = statistics.median(steps["off"]), statistics.median(steps["on"])
    print(f"steps measured per setting: {len(steps['off'])} (off) / {len(steps['on'])} (on)")
    print(f"median step time: off {off:.3f} s, on {on:.3f} s")
    print(f"median step-time ratio (on / off): {on / off:.3f}")
    print(
        f"time removed per step (off - on): {off - on:.3f} s "
        f"(median old_log_prob pass when recomputed: {statistics.median(old_pass):.3f} s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
