"""Train -> rollout reshard: the alltoallv plan against the all_gather baseline.

1. Plan reports for DeepSeek-V3/R1 shapes (61 layers, 256 routed experts, hidden 7168, MoE
   intermediate 2048): bytes moved / theoretical minimum (goal 1.00), / all_gather baseline,
   and peak extra memory, for the recipe's layouts and the article's EP4 -> EP8 example.
2. Wall time of the executor against the all_gather implementation on CPU gloo processes,
   same shapes (scaled down), same run.

    .venv/bin/python benchmarks/reshard_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from npu_rl.reshard import InferLayout, ModelShapes, TrainLayout, build_report, model_params, plan_reshard
from npu_rl.reshard.baseline import allgather_reshard, make_groups
from npu_rl.reshard.executor import execute

# The ranks and the seeded shards come from the tests' harness (test support, not part of npu-rl).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "reshard"))
from reshard_harness import blank_infer_shards, expected_infer_shards, full_weights, run_ranks, train_shards  # noqa: E402

DEEPSEEK = ModelShapes()
CASES = [
    (
        "article: EP4 PP2 -> EP8, 8 ranks",
        TrainLayout(8, tp=1, pp=2, ep=4, layers_per_stage=(30, 31)),
        InferLayout(8, tp=1, ep=8),
        None,
    ),
    (
        "EP8 PP2 -> EP16, 16 ranks",
        TrainLayout(16, tp=1, pp=2, ep=8, layers_per_stage=(30, 31)),
        InferLayout(16, tp=1, ep=16),
        None,
    ),
    (
        "recipe: TP4 PP8 EP8 -> TP2 EP256, 256 ranks",
        TrainLayout(256, tp=4, pp=8, ep=8, layers_per_stage=(7, 7, 8, 8, 8, 8, 8, 7)),
        InferLayout(256, tp=2, ep=256),
        16,
    ),
]
# DeepSeek-V3's structure at a size 8 CPU processes move in about a second.
TIMED = ModelShapes(
    num_layers=4,
    first_k_dense=1,
    hidden=512,
    intermediate=1024,
    moe_intermediate=256,
    num_experts=32,
    vocab=8192,
    num_heads=8,
    q_lora_rank=128,
    kv_lora_rank=64,
    qk_nope_head_dim=32,
    qk_rope_head_dim=16,
    v_head_dim=32,
)
TIMED_PAIR = (TrainLayout(8, tp=1, pp=2, ep=4, layers_per_stage=(2, 2)), InferLayout(8, tp=1, ep=8))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def plan_tables(bucket_bytes: int, quick: bool) -> None:
    params = model_params(DEEPSEEK)
    reports = []
    for label, train, infer, per_node in CASES[:2] if quick else CASES:
        log(f"planning {label} ...")
        t0 = time.perf_counter()
        plan = plan_reshard(
            params,
            train,
            infer,
            num_layers=DEEPSEEK.num_layers,
            num_experts=DEEPSEEK.num_experts,
            bucket_bytes=bucket_bytes,
            devices_per_node=per_node,
        )
        rep = build_report(plan, DEEPSEEK.num_layers, label)
        log(f"  {len(plan.transfers):,} slices, {plan.num_rounds} rounds, {time.perf_counter() - t0:.1f} s")
        reports.append(rep)
    keys = [k for k, _ in reports[0].rows()]
    cols = [dict(r.rows()) for r in reports]
    w0 = max(len(k) for k in keys)
    widths = [max(len(c[k]) for k in keys) for c in cols]
    print(f"\nDeepSeek-V3/R1 shapes, bf16, bucket {bucket_bytes / 2**20:.0f} MiB")
    for k in keys:
        print(f"  {k:<{w0}}  " + "  ".join(f"{c[k]:>{w}}" for c, w in zip(cols, widths)))


def _time_rank(rank: int, world: int, repeats: int, bucket_bytes: int):
    train, infer = TIMED_PAIR
    plan = plan_reshard(
        model_params(TIMED),
        train,
        infer,
        num_layers=TIMED.num_layers,
        num_experts=TIMED.num_experts,
        bucket_bytes=bucket_bytes,
    )
    full = full_weights(plan, seed=1)
    shards = train_shards(plan, rank, full)
    want = expected_infer_shards(plan, rank, full)
    groups = make_groups(plan, rank)
    sched = plan.rank_schedule(rank)
    times = {"alltoallv": [], "all_gather": []}
    peak = {}
    for _ in range(repeats):
        for name in ("alltoallv", "all_gather"):
            out = blank_infer_shards(plan, rank)
            dist.barrier()
            t0 = time.perf_counter()
            if name == "alltoallv":
                peak[name] = execute(plan, rank, shards, out, schedule=sched).peak_staging_bytes
            else:
                peak[name] = allgather_reshard(plan, rank, shards, out, groups)
            dist.barrier()
            times[name].append(time.perf_counter() - t0)
            assert all(torch.equal(out[n], want[n]) for n in want), f"{name} produced wrong shards"
    return {"times": times, "peak": peak}


def timing(repeats: int, bucket_bytes: int) -> None:
    train, infer = TIMED_PAIR
    nbytes = sum(p.nbytes for p in model_params(TIMED))
    log(f"timing on {train.world} CPU processes ({nbytes / 2**20:.0f} MiB model, {repeats} repeats) ...")
    res = run_ranks(train.world, _time_rank, repeats, bucket_bytes, timeout_s=300)
    # A sync is as slow as its slowest rank.
    med = {
        n: statistics.median(max(r["times"][n][i] for r in res) for i in range(repeats))
        for n in ("alltoallv", "all_gather")
    }
    peak = {n: max(r["peak"][n] for r in res) for n in med}
    print(
        f"\nCPU gloo timing: {train.describe()} -> {infer.describe()}, {nbytes / 2**20:.0f} MiB bf16, "
        f"bucket {bucket_bytes / 2**20:.0f} MiB, median of {repeats}"
    )
    for n in med:
        print(f"  {n:<10}  {med[n] * 1e3:8.1f} ms   peak extra {peak[n] / 2**20:7.2f} MiB")
    print(f"  all_gather / alltoallv time: {med['all_gather'] / med['alltoallv']:.2f}x")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bucket-mb", type=int, default=64)
    ap.add_argument("--timed-bucket-mb", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="skip the 256-rank plan (about half a minute)")
    args = ap.parse_args(argv)
    plan_tables(args.bucket_mb << 20, args.quick)
    timing(args.repeats, args.timed_bucket_mb << 20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
