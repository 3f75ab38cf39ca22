"""The verl hook: fingerprints of the verl 0.6.1 code it wraps, and the wrapped weight sync run
end to end on 2 gloo ranks with stand-ins for Megatron's module and vLLM's model."""

from __future__ import annotations

import asyncio
import shutil
import types

import pytest
import torch

from npu_rl.patches import reshard as patch
from npu_rl.patches.guard import PatchVersionError, changed_fingerprints, module_file
from npu_rl.reshard import InferLayout, ModelShapes, ReshardLayoutError, TrainLayout
from npu_rl.reshard.harness import expected_infer_shards, full_weights, run_ranks, train_shards
from npu_rl.reshard.verl_sync import _MCORE_LAYER, _MCORE_TOP, cached_plan, inference_targets, megatron_shards


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


MODEL = ModelShapes.tiny(moe_intermediate=4)  # non-square expert matrices: orientation is unambiguous
TRAIN = TrainLayout(2, tp=1, pp=2, ep=1, layers_per_stage=(1, 3))
INFER = InferLayout(2, tp=1, ep=2)


class _Module:
    """Megatron-style names: local layer numbers, per-expert weights, expert_bias only in state_dict."""

    def __init__(self, named: dict[str, torch.Tensor]):
        self._named = named

    def named_parameters(self):
        return [(n, t) for n, t in self._named.items() if not n.endswith("expert_bias")]

    def state_dict(self):
        return dict(self._named)


def _megatron_names(shards: dict, offset: int) -> dict[str, torch.Tensor]:
    top = {v: k for k, v in _MCORE_TOP.items()}
    layer = {v: k for k, v in _MCORE_LAYER.items() if k != "mlp.linear_fc1.layer_norm_weight"}
    out = {}
    for name, t in shards.items():
        if name in top:
            out[top[name]] = t
            continue
        _, _, i, rest = name.split(".", 3)
        local = f"decoder.layers.{int(i) - offset}."
        if rest.startswith("mlp.experts."):
            fc = "1" if rest.endswith("w13_weight") else "2"
            out.update({f"{local}mlp.experts.linear_fc{fc}.weight{j}": e for j, e in enumerate(t)})
        else:
            out[local + layer[rest]] = t
    return out


def _sync_on_rank(rank: int, world: int):
    plan = cached_plan(MODEL, TRAIN, INFER, 256)
    full = full_weights(plan, seed=5)
    coords = TRAIN.coords(rank)
    patch.parallel_info = lambda: {
        "rank": rank,
        "world": world,
        "tp": TRAIN.tp,
        "pp": TRAIN.pp,
        "ep": TRAIN.ep,
        "tp_rank": coords["tp"],
        "pp_rank": coords["pp"],
        "ep_rank": coords["ep"],
    }
    offset = sum(TRAIN.stage_sizes(MODEL.num_layers)[: coords["pp"]])
    actor = [_Module(_megatron_names(train_shards(plan, rank, full, experts_as_list=True), offset))]

    # vLLM-side parameters; MoE weights stored transposed, as vllm-ascend keeps them.
    want = expected_infer_shards(plan, rank, full)
    vllm_params = {
        n: torch.full(t.transpose(-1, -2).shape if ".experts." in n else t.shape, float("nan"), dtype=t.dtype)
        for n, t in want.items()
    }
    model = types.SimpleNamespace(named_parameters=lambda: list(vllm_params.items()))

    verl_gen_calls = []

    class ActorRolloutRefWorker:  # the call pattern of verl's rollout_mode when mbridge is off
        async def rollout_mode(self):
            weights = workers.per_tensor_generator(actor, hf_config, None, tf_config, {})
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
    hf_config = types.SimpleNamespace(
        num_hidden_layers=MODEL.num_layers,
        first_k_dense_replace=MODEL.first_k_dense,
        hidden_size=MODEL.hidden,
        intermediate_size=MODEL.intermediate,
        moe_intermediate_size=MODEL.moe_intermediate,
        n_routed_experts=MODEL.num_experts,
        n_shared_experts=MODEL.num_shared_experts,
        vocab_size=MODEL.vocab,
        num_attention_heads=MODEL.num_heads,
        q_lora_rank=MODEL.q_lora_rank,
        kv_lora_rank=MODEL.kv_lora_rank,
        qk_nope_head_dim=MODEL.qk_nope_head_dim,
        qk_rope_head_dim=MODEL.qk_rope_head_dim,
        v_head_dim=MODEL.v_head_dim,
    )
    tf_config = types.SimpleNamespace(num_layers_in_first_pipeline_stage=1, num_layers_in_last_pipeline_stage=3)
    patch.patch_megatron_workers(workers, check=False)
    patch.patch_vllm_rollout(rollout_mod, check=False)

    worker = ActorRolloutRefWorker()
    worker.config = types.SimpleNamespace(
        rollout=types.SimpleNamespace(tensor_model_parallel_size=1, expert_parallel_size=2)
    )
    worker.rollout = _Rollout()
    import os

    os.environ["NPU_RL_RESHARD_BUCKET_MB"] = "1"
    asyncio.run(worker.rollout_mode())
    outside = workers.per_tensor_generator(actor, hf_config, None, tf_config, {})  # not inside rollout_mode
    list(outside)
    bad = [
        n
        for n, t in want.items()
        if not torch.equal(vllm_params[n].transpose(-1, -2) if ".experts." in n else vllm_params[n], t)
    ]
    return {"bad": bad, "verl_gen_calls": len(verl_gen_calls)}


def test_patched_rollout_mode_reshards_into_the_rollout_model():
    for r in run_ranks(2, _sync_on_rank):
        assert r["bad"] == []
        assert r["verl_gen_calls"] == 1  # only the call made outside rollout_mode reached verl's generator
