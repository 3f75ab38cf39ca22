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

import statistics
import time

from train_runs import log, parse, prepare, train

from npu_rl.demo import VLLM_MODEL_ARGS, VLLM_SETS

ROLLOUTS = ("hf", "vllm")
GEN, ENGINE, LENGTH = "timing_s/gen", "timing_s/generate_sequences", "response_length/mean"


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
    recipe, scalars, seconds = train(overrides)
    out = {t: list(scalars[t].values) for t in (GEN, ENGINE, LENGTH)}
    out["sequences"] = [float(recipe.algorithm.train_batch_size * recipe.algorithm.rollout_n)]
    log(f"  {rollout}: {len(out[GEN])} steps in {seconds:.0f} s")
    return out


def main() -> int:
    args = parse(__doc__.splitlines()[0], rounds=2, steps=6, per="rollout")
    prepare(VLLM_SETS, tuple(VLLM_MODEL_ARGS))
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
