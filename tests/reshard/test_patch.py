"""The verl hook: fingerprints of the verl 0.6.1 code it wraps, and the wrapped weight sync run
end to end on 2 gloo ranks with stand-ins for Megatron's module and vLLM's model."""

from __future__ import annotations

import asyncio
import shutil
import types

import pytest
import torch
from reshard_harness import SYNC_CASES, full_weights, hf_config, megatron_named, run_ranks, vllm_named

from npu_rl.patches import reshard as patch
from npu_rl.patches.guard import PatchVersionError, changed_fingerprints, module_file
from npu_rl.reshard import ReshardLayoutError, TrainLayout
from npu_rl.reshard.verl_sync import cached_plan, inference_targets, megatron_shards


def test_a_changed_verl_function_is_refused(tmp_path):
    src = module_file(patch.MEGATRON_WORKERS)
    copy = tmp_path / "megatron_workers.py"
    shutil.copy(src, copy)
    text = copy.read_text()
    anchor = "        await self.rollout.update_weights(per_tensor_param)\n"
    assert anchor in text
    copy.write_text(text.replace(anchor, anchor + "        await self.rollout.update_weights(per_tensor_param)\n"))
    changed = changed_fingerprints(patch.FINGERPRINTS, {patch.MEGATRON_WORKERS: copy})
    assert list(changed) == [f"{patch.MEGATRON_WORKERS}:ActorRolloutRefWorker.rollout_mode"]
    with pytest.raises(PatchVersionError, match="rollout_mode changed"):
        patch.PATCH.check(patch.MEGATRON_WORKERS, copy)


def test_unknown_names_and_shapes_are_errors_not_skips():
    with pytest.raises(ReshardLayoutError, match="no canonical name.*linear_qkv"):
        megatron_shards([("decoder.layers.0.self_attention.linear_qkv.weight", torch.zeros(1))])
    plan = cached_plan(MODEL, TRAIN, INFER, 256)
    named = [(p.name, torch.zeros(plan.infer_shape(i, 0))) for i, p in enumerate(plan.params)]
    assert len(inference_targets(plan, 0, named)) == len(named)
    with pytest.raises(ReshardLayoutError, match="has no parameter 'lm_head.weight'"):
        inference_targets(plan, 0, named[:-1])
    named[0] = (named[0][0], torch.zeros(3, 3))
    with pytest.raises(ReshardLayoutError, match="embed_tokens.weight has shape \\(3, 3\\)"):
        inference_targets(plan, 0, named)


CASES = SYNC_CASES
MODEL, TRAIN, INFER, _ = CASES["deepseek_v3"]


class _Module:
    """Megatron-style names: local layer numbers, per-expert weights, expert_bias only in state_dict."""

    def __init__(self, named: dict[str, torch.Tensor]):
        self._named = named

    def named_parameters(self):
        return [(n, t) for n, t in self._named.items() if not n.endswith("expert_bias")]

    def state_dict(self):
        return dict(self._named)


def _parallel_info(rank: int, world: int, train: TrainLayout):
    coords = train.coords(rank)
    return lambda: {
        "rank": rank,
        "world": world,
        **{a: train.size(a) if a != "pp" else train.pp for a in ("tp", "pp", "ep", "etp")},
        **{f"{a}_rank": coords[a] for a in ("tp", "pp", "ep", "etp")},
    }


def _sync_on_rank(rank: int, world: int, case: str):
    model_shapes, train, infer, stages = CASES[case]
    plan = cached_plan(model_shapes, train, infer, 256)
    full = full_weights(plan, seed=5)
    patch.parallel_info = _parallel_info(rank, world, train)
    offset = sum(train.stage_sizes(model_shapes.num_layers)[: train.coords(rank)["pp"]])
    actor = [_Module(megatron_named(plan, rank, full, model_shapes, offset))]

    # vLLM-side parameters; MoE weights stored transposed, as vllm-ascend keeps them.
    want = vllm_named(plan, rank, full)
    vllm_params = {
        n: torch.full(t.transpose(-1, -2).shape if ".experts." in n else t.shape, float("nan"), dtype=t.dtype)
        for n, t in want.items()
    }
    model = types.SimpleNamespace(named_parameters=lambda: list(vllm_params.items()))

    verl_gen_calls = []

    class ActorRolloutRefWorker:  # the call pattern of verl's rollout_mode when mbridge is off
        async def rollout_mode(self):
            weights = workers.per_tensor_generator(actor, hf, None, tf_config, {})
            await self.rollout.update_weights(weights)

    class _Rollout:
        inference_engine = types.SimpleNamespace(
            worker=types.SimpleNamespace(model_runner=types.SimpleNamespace(model=model))
        )

        async def update_weights(self, weights, **kwargs):
            raise AssertionError("the unpatched update_weights must not see a reshard request")

    workers = types.ModuleType("fake_megatron_workers")
    workers.ActorRolloutRefWorker = ActorRolloutRefWorker
    workers.per_tensor_generator = lambda *a, **k: verl_gen_calls.append(a) or iter(())
    rollout_mod = types.ModuleType("fake_vllm_rollout")
    rollout_mod.vLLMRollout, rollout_mod.vLLMAsyncRollout = _Rollout, type("A", (_Rollout,), {})
    hf = hf_config(model_shapes)
    tf_config = types.SimpleNamespace(
        num_layers_in_first_pipeline_stage=stages[0], num_layers_in_last_pipeline_stage=stages[1]
    )
    patch.patch_megatron_workers(workers, check=False)
    patch.patch_vllm_rollout(rollout_mod, check=False)

    worker = ActorRolloutRefWorker()
    worker.config = types.SimpleNamespace(
        rollout=types.SimpleNamespace(tensor_model_parallel_size=infer.tp, expert_parallel_size=infer.ep)
    )
    worker.rollout = _Rollout()
    import os

    os.environ["NPU_RL_RESHARD_BUCKET_MB"] = "1"
    asyncio.run(worker.rollout_mode())
    outside = workers.per_tensor_generator(actor, hf, None, tf_config, {})  # not inside rollout_mode
    list(outside)
    bad = [
        n
        for n, t in want.items()
        if not torch.equal(vllm_params[n].transpose(-1, -2) if ".experts." in n else vllm_params[n], t)
    ]
    return {"bad": bad, "verl_gen_calls": len(verl_gen_calls)}


@pytest.mark.parametrize("case", CASES)
def test_patched_rollout_mode_reshards_into_the_rollout_model(case):
    for r in run_ranks(2, _sync_on_rank, case):
        assert r["bad"] == []
        assert r["verl_gen_calls"] == 1  # only the call made outside rollout_mode reached verl's generator
