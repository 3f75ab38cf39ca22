"""Planner properties on one process: simulate every transfer of a plan between in-memory ranks
and compare with slicing the full weights; byte counts against the independent minimum."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reshard_harness import blank_infer_shards, expected_infer_shards, full_weights, train_shards

from npu_rl.errors import UserError
from npu_rl.reshard import (
    InferLayout,
    ModelShapes,
    ReshardLayoutError,
    TrainLayout,
    build_report,
    model_params,
    plan_reshard,
)
from npu_rl.reshard.planner import wire_bytes
from npu_rl.reshard.shards import as_shard

MODEL = ModelShapes.tiny()


def _plan(train, infer, bucket=1024, model=MODEL):
    return plan_reshard(
        model_params(model),
        train,
        infer,
        num_layers=model.num_layers,
        num_experts=model.num_experts,
        bucket_bytes=bucket,
    )


def _simulate(plan, experts_as_list=False):
    """Apply the plan's local copies and transfers directly between per-rank dicts."""
    full = full_weights(plan, seed=3)
    world = plan.world
    src = [train_shards(plan, r, full, experts_as_list) for r in range(world)]
    dst = [blank_infer_shards(plan, r) for r in range(world)]
    names = [p.name for p in plan.params]
    for t in plan.local + plan.transfers:
        as_shard(src[t.src][names[t.param]]).copy_to(t.src_box, as_shard(dst[t.dst][names[t.param]]), t.dst_box)
    return full, dst


layouts = st.sampled_from(
    [
        (TrainLayout(8, tp=2, pp=2, ep=2), InferLayout(8, tp=2, ep=8)),
        (TrainLayout(8, tp=4, pp=1, ep=2), InferLayout(8, tp=1, ep=4)),
        (TrainLayout(8, tp=1, pp=4, ep=2, layers_per_stage=(1, 1, 1, 1)), InferLayout(8, tp=4, ep=8)),
        (TrainLayout(4, tp=1, pp=1, ep=4), InferLayout(4, tp=4, ep=4)),
        (TrainLayout(16, tp=2, pp=2, ep=4, layers_per_stage=(3, 1)), InferLayout(16, tp=2, ep=16)),
        (TrainLayout(2, tp=2, pp=1, ep=1), InferLayout(2, tp=1, ep=1)),
    ]
)


@settings(max_examples=12, deadline=None)
@given(pair=layouts, bucket=st.sampled_from([64, 256, 4096]), as_list=st.booleans())
def test_simulated_plan_reproduces_slices_and_moves_the_minimum(pair, bucket, as_list):
    train, infer = pair
    plan = _plan(train, infer, bucket)
    full, got = _simulate(plan, as_list)
    for r in range(plan.world):
        want = expected_infer_shards(plan, r, full)
        for name, tensor in want.items():
            assert torch.equal(got[r][name], tensor), (r, name)
    report = build_report(plan, MODEL.num_layers)
    assert report.recv == report.minimum
    assert report.total <= sum(report.allgather)
    assert max(plan.peak_stage_bytes) <= max(bucket, 16)
    assert all(t.src != t.dst for t in plan.transfers)
    assert all(wire_bytes(t.nbytes) <= bucket or t.nbytes <= bucket for t in plan.transfers)


def test_every_round_number_is_used_and_rank_schedules_agree():
    plan = _plan(TrainLayout(8, tp=2, pp=2, ep=2), InferLayout(8, tp=2, ep=8), bucket=256)
    assert set(plan.round_of) == set(range(plan.num_rounds))
    scheds = [plan.rank_schedule(r) for r in range(plan.world)]
    for k in range(plan.num_rounds):
        sent = sorted((t.src, t.dst, t.param, t.dst_box) for s in scheds for t in s.rounds[k][0])
        recv = sorted((t.src, t.dst, t.param, t.dst_box) for s in scheds for t in s.rounds[k][1])
        assert sent == recv


def test_deepseek_v3_expert_shapes_and_baseline_peak():
    m = ModelShapes()
    params = {p.name: p for p in model_params(m)}
    w13 = params["model.layers.3.mlp.experts.w13_weight"]
    assert w13.shape == (m.num_experts, 2 * m.moe_intermediate, m.hidden)
    assert "model.layers.2.mlp.experts.w13_weight" not in params  # first_k_dense layers have a dense MLP
    total = sum(p.numel for p in params.values())
    assert 660e9 < total < 680e9  # DeepSeek-V3 is 671B parameters without the MTP module


@pytest.mark.parametrize(
    "train,infer,needle",
    [
        (TrainLayout(8, tp=1, pp=1, ep=4), InferLayout(8, tp=1, ep=2), "does not divide inference EP"),
        (TrainLayout(8, tp=1, pp=1, ep=8), InferLayout(4, tp=1, ep=4), "same ranks"),
        (TrainLayout(8, tp=1, pp=2, ep=4, layers_per_stage=(2, 3)), InferLayout(8, ep=8), "sums to 5"),
        (TrainLayout(8, tp=1, pp=1, ep=1), InferLayout(8, tp=1, ep=8), None),
        (TrainLayout(8, tp=8, pp=1, ep=1), InferLayout(8, tp=1, ep=8), "would cut a block of 6"),
        (TrainLayout(8, tp=2, pp=1, ep=1), InferLayout(8, tp=4, ep=8), "vocab_or_embed"),
    ],
)
def test_unmappable_layouts_fail_with_a_named_reason(train, infer, needle):
    # 66 vocabulary rows split over TP2 but not TP4.
    model = ModelShapes.tiny(vocab=66) if needle == "vocab_or_embed" else MODEL
    if needle is None:
        _plan(train, infer, model=model)  # a valid pair plans without error
        return
    if needle == "vocab_or_embed":
        needle = r"model\.embed_tokens\.weight \(inference\): dimension of size 66"
    with pytest.raises(ReshardLayoutError, match=needle) as err:
        _plan(train, infer, model=model)
    assert isinstance(err.value, UserError) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(world=8, tp=3), "does not divide the 8 ranks"),
        (dict(world=8, tp=1, pp=2, ep=8), r"ETP\*EP \(1\*8\) does not divide the 4 ranks of a pipeline stage"),
        (dict(world=8, tp=2, pp=2, ep=2, etp=4), r"ETP\*EP \(4\*2\) does not divide the 4 ranks"),
        (dict(world=8, pp=2, layers_per_stage=(4,)), "1 entries for PP 2"),
        (dict(world=0), "positive"),
    ],
)
def test_bad_training_layouts(kwargs, needle):
    with pytest.raises(ReshardLayoutError, match=needle):
        TrainLayout(**kwargs)
