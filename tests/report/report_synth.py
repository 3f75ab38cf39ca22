"""Synthetic runs written with TensorBoard's own writer (torch.utils.tensorboard, as
verl's tensorboard logger uses), healthy by default, with pathologies injected."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

STEPS = np.arange(1, 41)
VAL_EVERY = 5
DS = "DigitalLearningGmbH/MATH-lighteval"
VAL_REWARD = f"val-aux/{DS}/reward/mean@1"
VAL_ACC = f"val-core/{DS}/acc/mean@1"


def healthy_metrics(seed: int = 0) -> dict[str, dict[int, float]]:
    """Curves shaped like a sound GRPO run on MATH, per the recipe's reading rules."""
    rng = np.random.default_rng(seed)
    n = len(STEPS)
    frac = (STEPS - 1) / (n - 1)
    curves = {
        "actor/entropy": 0.6 - 0.2 * frac + rng.normal(0, 0.01, n),
        "actor/kl_loss": np.concatenate([[0.0], 0.001 + 0.01 * frac[1:] + rng.uniform(0, 5e-4, n - 1)]),
        "actor/pg_loss": rng.normal(0.0, 0.03, n),
        "actor/pg_clipfrac": 0.15 + rng.uniform(-0.03, 0.03, n),
        "actor/grad_norm": 0.3 + rng.uniform(-0.1, 0.1, n),
        "response_length/mean": 400 + 50 * frac + rng.normal(0, 10, n),
        "response_length/clip_ratio": 0.02 + rng.uniform(0, 0.02, n),
        "critic/score/mean": 0.3 + 0.3 * frac + rng.normal(0, 0.01, n),
    }
    out = {tag: {int(s): float(v) for s, v in zip(STEPS, vals)} for tag, vals in curves.items()}
    val_steps = [int(s) for s in STEPS if s % VAL_EVERY == 0]
    out[VAL_ACC] = {s: 0.40 + 0.15 * (s / STEPS[-1]) for s in val_steps}
    out[VAL_REWARD] = {s: 0.35 + 0.15 * (s / STEPS[-1]) for s in val_steps}
    return out


def write_events(run_dir: Path, metrics: dict[str, dict[int, float]]) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    run_dir.mkdir(parents=True, exist_ok=True)
    writer = SummaryWriter(str(run_dir))
    # verl logs all metrics of a step together, step by step.
    for step in sorted({s for by_step in metrics.values() for s in by_step}):
        for tag, by_step in metrics.items():
            if step in by_step:
                writer.add_scalar(tag, by_step[step], step)
    writer.close()
    return run_dir


def write_jsonl(path: Path, metrics: dict[str, dict[int, float]]) -> Path:
    """verl's `file` logger format: one {"step": N, "data": {...}} line per step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for step in sorted({s for by_step in metrics.values() for s in by_step}):
            data = {tag: by_step[step] for tag, by_step in metrics.items() if step in by_step}
            f.write(json.dumps({"step": step, "data": data}) + "\n")
    return path


def with_timing(
    metrics: dict[str, dict[int, float]],
    *,
    sequences: int,
    devices: int,
    prompt: float = 120.0,
    response: float = 400.0,
    step_s: float = 10.0,
    warmup_s: float = 30.0,
    seed: int = 0,
) -> dict[str, dict[int, float]]:
    """Adds what verl 0.6.1 logs about each step's time and tokens: ``timing_s/*``, the batch's mean
    prompt/response lengths and ``perf/*`` computed the way verl computes them (total tokens of the
    ``sequences`` in the batch / step time / ``devices``). Step 1 is slow (warm-up)."""
    rng = np.random.default_rng(seed)
    out = {tag: dict(by_step) for tag, by_step in metrics.items()}
    for s in (int(x) for x in STEPS):
        t = (warmup_s if s == 1 else step_s) * (1 + rng.uniform(-0.02, 0.02))
        p, r = prompt + rng.uniform(-5, 5), response + rng.uniform(-20, 20)
        parts = {
            "generate_sequences": 0.45 * t,
            "ref": 0.08 * t,
            "update_actor": 0.25 * t,
            "reward": 0.03 * t,
            "adv": 0.01 * t,
        }
        parts["gen"] = parts["generate_sequences"] + 0.1 * t  # the weight sync and dispatch around it
        total = round((p + r) * sequences)
        values = {f"timing_s/{k}": v for k, v in parts.items()}
        values |= {
            "timing_s/step": t,
            "timing_s/testing": 5.0,
            "prompt_length/mean": p,
            "response_length/mean": r,
            "perf/total_num_tokens": total,
            "perf/time_per_step": t,
            "perf/throughput": total / (t * devices),
            "perf/max_memory_allocated_gb": 40.0 + rng.uniform(0, 0.2),
        }
        for tag, v in values.items():
            out.setdefault(tag, {})[s] = float(v)
    return out
