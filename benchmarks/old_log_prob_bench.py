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

import statistics
import time

from train_runs import log, parse, prepare, train

SETTINGS = (("off", True), ("on", False))  # name, recompute_old_log_prob


def run_once(name: str, recompute: bool, steps: int, tag: str) -> dict[str, list[float]]:
    overrides = {
        "logging.experiment": f"olp_bench_{tag}_{name}",
        "optimizations.recompute_old_log_prob": recompute,
        "algorithm.total_training_steps": steps,
        "checkpoint.test_freq": -1,
        "checkpoint.save_freq": -1,
        "checkpoint.resume": "disable",
    }
    _, scalars, seconds = train(overrides)
    out = {
        t: list(scalars[t].values)
        for t in ("timing_s/step", "timing_s/old_log_prob", "timing_s/update_actor")
        if t in scalars
    }
    log(
        f"  {name}: {len(out['timing_s/step'])} steps, run {seconds:.0f} s, "
        f"step times {', '.join(f'{v:.2f}' for v in out['timing_s/step'])}"
    )
    return out


def main() -> int:
    args = parse(__doc__.splitlines()[0], rounds=3, steps=4, per="setting")
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
