"""Generation throughput of the two CPU rollouts, `hf` against `vllm`, on the demo's batch, in one run.

Runs ``npu-rl train`` of the tiny recipe with ``rollout.name=hf`` and ``rollout.name=vllm`` alternately (hf,
vllm, hf, vllm, ...), each a fresh experiment of ``--steps`` steps on the same model (head size 32, which
both take) and data, and compares, over every step after the warm-up ones, verl's own timings:

- the engine's generation: tokens the rollout generated per second of ``timing_s/generate_sequences``;
- the share of the generation phase (``timing_s/gen``) that is not the engine generating: the weight sync
  into the engine and the dispatch around it.

Run it where vLLM's CPU backend is installed, the cpu-vllm image (`make image-cpu-vllm`):

    docker run --rm -v "$PWD:/src" -w /src -e NPU_RL_WORKSPACE=/tmp/bench npu-rl:0.1.0-cpu-vllm \\
        python benchmarks/rollout_bench.py [--rounds 2 --steps 6]
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
from npu_rl.demo import VLLM_MODEL_ARGS, VLLM_SETS
from npu_rl.recipe import load_recipe
from npu_rl.report.scalars import load_run

RECIPE = "tiny_math_cpu"
ROLLOUTS = ("hf", "vllm")
GEN, ENGINE, LENGTH = "timing_s/gen", "timing_s/generate_sequences", "response_length/mean"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def prepare() -> None:
    recipe = load_recipe(RECIPE, VLLM_SETS)
    if not (run_files.model_dir(recipe) / "config.json").is_file():
        log("creating the tiny model (head size 32) ...")
        assert npu_rl(["model", "tiny", "--out", str(run_files.model_dir(recipe)), *VLLM_MODEL_ARGS]) == 0
    data = run_files.resolve(recipe.data.train_files[0]).parent
    if not data.is_dir():
        assert npu_rl(["data", "math", "--from", "sample", "--out", str(data)]) == 0


def run_once(rollout: str, steps: int, tag: str) -> dict[str, list[float]]:
    overrides = {
        **VLLM_SETS,
        "rollout.name": rollout,
        "logging.experiment": f"rollout_bench_{tag}_{rollout}",
        "algorithm.total_training_steps": steps,
        "checkpoint.test_freq": -1,
        "checkpoint.save_freq": -1,
        "checkpoint.resume": "disable",
    }
    args = ["train", "--recipe", RECIPE]
    for key, value in overrides.items():
        args += ["--set", f"{key}={value}"]
    t0 = time.perf_counter()
    if npu_rl(args) != 0:
        raise SystemExit(f"training run {overrides['logging.experiment']} failed")
    recipe = load_recipe(RECIPE, overrides)
    scalars = load_run(run_files.log_root(recipe))
    out = {t: list(scalars[t].values) for t in (GEN, ENGINE, LENGTH)}
    out["sequences"] = [float(recipe.algorithm.train_batch_size * recipe.algorithm.rollout_n)]
    log(f"  {rollout}: {len(out[GEN])} steps in {time.perf_counter() - t0:.0f} s")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="runs per rollout (alternating)")
    ap.add_argument("--steps", type=int, default=6, help="training steps per run")
    ap.add_argument("--warmup", type=int, default=1, help="leading steps of each run left out")
    args = ap.parse_args()
    if args.steps <= args.warmup:
        raise SystemExit("--steps must exceed --warmup")
    os.environ.setdefault("NPU_RL_WORKSPACE", str(Path(__file__).resolve().parents[1] / "workspace" / "bench"))
    prepare()
    tag = time.strftime("%H%M%S")
    tok_s: dict[str, list[float]] = {r: [] for r in ROLLOUTS}
    overhead: dict[str, list[float]] = {r: [] for r in ROLLOUTS}
    for i in range(args.rounds):
        for rollout in ROLLOUTS:
            log(f"round {i + 1}/{args.rounds}, rollout {rollout} ...")
            result = run_once(rollout, args.steps, f"{tag}_{i}")
            seqs = result["sequences"][0]
            for gen, engine, length in list(zip(result[GEN], result[ENGINE], result[LENGTH], strict=True))[
                args.warmup :
            ]:
                tok_s[rollout].append(seqs * length / engine)
                overhead[rollout].append((gen - engine) / gen)
    hf, vllm = statistics.median(tok_s["hf"]), statistics.median(tok_s["vllm"])
    print(f"steps measured per rollout: {len(tok_s['hf'])} (hf) / {len(tok_s['vllm'])} (vllm)")
    print(f"median generated tokens/s (the batch over the workers' generation time): hf {hf:.0f}, vllm {vllm:.0f}")
    print(f"median throughput ratio (vllm / hf): {vllm / hf:.2f}")
    for rollout in ROLLOUTS:
        print(
            f"{rollout}: weight sync and dispatch, median share of the generation phase: "
            f"{statistics.median(overhead[rollout]):.0%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
