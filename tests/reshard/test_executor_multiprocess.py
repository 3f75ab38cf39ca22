"""The alltoallv executor on 8 and 16 gloo CPU processes: every inference shard equals, bit for bit,
both a direct slice of the full weights and the all_gather (gather-then-slice) reference. DeepSeek-V3's
structure and Qwen3-MoE's, with the experts split inside each expert like the dense layers (ETP = TP,
Megatron's default) or not at all (ETP 1, the Qwen3-235B recipe's)."""

from __future__ import annotations

import torch
from reshard_harness import (
    blank_infer_shards,
    expected_infer_shards,
    full_weights,
    run_ranks,
    train_shards,
)

from npu_rl.reshard import InferLayout, ModelShapes, TrainLayout, model_params, plan_reshard
from npu_rl.reshard.baseline import allgather_reshard, make_groups
from npu_rl.reshard.executor import execute
from npu_rl.reshard.report import min_recv_bytes

MODEL = ModelShapes.tiny()
QWEN3 = ModelShapes.tiny(arch="qwen3_moe")
BUCKET = 512  # bytes: small enough to force many rounds and chunked slices


def _check_pairs(rank: int, world: int, pairs, experts_as_list: bool, model: ModelShapes = MODEL):
    out = []
    for train, infer in pairs:
        plan = plan_reshard(
            model_params(model),
            train,
            infer,
            num_layers=model.num_layers,
            num_experts=model.num_experts,
            bucket_bytes=BUCKET,
            devices_per_node=4,
        )
        full = full_weights(plan, seed=7)
        shards = train_shards(plan, rank, full, experts_as_list=experts_as_list)
        got = blank_infer_shards(plan, rank)
        stats = execute(plan, rank, shards, got)
        ref = blank_infer_shards(plan, rank)
        allgather_reshard(plan, rank, train_shards(plan, rank, full), ref, make_groups(plan, rank))
        want = expected_infer_shards(plan, rank, full)
        bad = [n for n in want if not (torch.equal(got[n], want[n]) and torch.equal(ref[n], want[n]))]
        out.append({"bad": bad, "recv": stats.recv_bytes, "peak": stats.peak_staging_bytes, "rounds": stats.rounds})
    return out


def _assert_exact(results, pairs, model: ModelShapes = MODEL):
    for i, (train, infer) in enumerate(pairs):
        world = train.world
        minimum = min_recv_bytes(model_params(model), train, infer, model.num_layers)
        for rank in range(world):
            r = results[rank][i]
            assert r["bad"] == [], f"{train.describe()} -> {infer.describe()} rank {rank}: wrong {r['bad'][:3]}"
            # Nothing received twice, nothing missing: exactly the bytes the rank lacked.
            assert r["recv"] == minimum[rank]
            assert r["peak"] <= BUCKET
        assert max(results[r][i]["rounds"] for r in range(world)) > 1


PAIRS_8 = [
    (TrainLayout(8, tp=2, pp=1, ep=4), InferLayout(8, tp=2, ep=8)),  # EP4 -> EP8
    (TrainLayout(8, tp=1, pp=2, ep=4, layers_per_stage=(1, 3)), InferLayout(8, tp=1, ep=8)),  # the article's
    (TrainLayout(8, tp=4, pp=2, ep=1), InferLayout(8, tp=2, ep=8)),  # experts split by ETP4 inside each expert
    (TrainLayout(8, tp=2, pp=2, ep=2), InferLayout(8, tp=4, ep=4)),  # inference TP larger than training TP
    (TrainLayout(8, tp=2, pp=1, ep=4, etp=1), InferLayout(8, tp=2, ep=8)),  # whole experts in training too
]

# Qwen3-MoE: grouped-query attention (8 query heads, 4 key/value heads) with per-head q/k norms.
PAIRS_QWEN3 = [
    (TrainLayout(8, tp=2, pp=2, ep=4, etp=1), InferLayout(8, tp=2, ep=8)),  # the 235B recipe's kind of layout
    (TrainLayout(8, tp=4, pp=2, ep=4, etp=1), InferLayout(8, tp=4, ep=8)),  # one key/value head per TP rank
    (TrainLayout(8, tp=2, pp=1, ep=2), InferLayout(8, tp=4, ep=8)),  # ETP = TP, inference TP larger
]

PAIRS_16 = [
    (TrainLayout(16, tp=2, pp=1, ep=8), InferLayout(16, tp=2, ep=16)),  # EP8 -> EP16
    (TrainLayout(16, tp=1, pp=2, ep=8, layers_per_stage=(2, 2)), InferLayout(16, tp=1, ep=16)),  # with PP
]


def test_reshard_8_ranks_bit_exact():
    results = run_ranks(8, _check_pairs, PAIRS_8, False)
    _assert_exact(results, PAIRS_8)


def test_reshard_16_ranks_ep8_to_ep16_bit_exact_with_megatron_expert_lists():
    results = run_ranks(16, _check_pairs, PAIRS_16, True)
    _assert_exact(results, PAIRS_16)


def test_reshard_qwen3_moe_with_whole_or_split_experts_bit_exact():
    results = run_ranks(8, _check_pairs, PAIRS_QWEN3, True, QWEN3)
    _assert_exact(results, PAIRS_QWEN3, QWEN3)


def _stream_on_rank(rank: int, world: int, train: TrainLayout, infer: InferLayout):
    """ReshardRequest.stream as verl 0.9's sync consumes it (every rollout parameter yielded once, whole and exact
    under vLLM 0.23's names), and the executor's stream under it holding only the parameters in flight."""
    from reshard_harness import VLLM_0_23_FUSED, vllm_named

    from npu_rl.reshard.executor import execute_stream
    from npu_rl.reshard.verl_sync import ReshardRequest, cached_plan

    plan = cached_plan(MODEL, train, infer, BUCKET)
    full = full_weights(plan, seed=3)
    want = vllm_named(plan, rank, full, VLLM_0_23_FUSED)
    got: dict[str, torch.Tensor] = {}
    twice = []
    for name, tensor in ReshardRequest(plan=plan, rank=rank, train_shards=train_shards(plan, rank, full)).stream():
        twice += [name] if name in got else []
        got[name] = tensor.clone()
    bad = [n for n in want if n not in got or not torch.equal(got[n], want[n])]

    blank = blank_infer_shards(plan, rank)
    made: set[str] = set()

    class Lazy(dict):
        def __missing__(self, name):
            made.add(name)
            return blank[name]

    held, finished = 0, set()
    for done in execute_stream(plan, rank, train_shards(plan, rank, full), Lazy()):
        finished |= {plan.params[i].name for i in done}
        held = max(held, len(made - finished))
    # The most parameters any one round of this rank's schedule writes into.
    per_round = max(len({t.param for t in recvs}) for _, recvs in plan.rank_schedule(rank).rounds)
    return {"bad": bad, "extra": sorted(set(got) - set(want)), "twice": twice, "held": held, "round": per_round}


def test_the_stream_yields_each_rollout_parameter_once_whole_and_holds_only_those_in_flight():
    # TP 2 -> 1: each rank keeps half of every dense parameter and receives the other half.
    train, infer = TrainLayout(2, tp=2, pp=1, ep=2, etp=1), InferLayout(2, tp=1, ep=2)
    for rank, r in enumerate(run_ranks(2, _stream_on_rank, train, infer)):
        assert r["bad"] == [] and r["extra"] == [] and r["twice"] == [], (rank, r)
        # Never more made and unsent than one round's parameters (local copies first, as execute does them,
        # held 22 of the 59 at once here).
        assert 0 < r["held"] <= r["round"], (rank, r)
