"""Glue between verl's megatron worker, vLLM's model and the reshard executor.

Training shards come from Megatron-core's named parameters (verl 0.6.1's DeepSeek-V3
naming, see verl.models.mcore.weight_converter.McoreToHFWeightConverterDpskv3), with
layer numbers made global by the caller; inference targets are vLLM's parameters,
overwritten in place. A target whose shape is the expected one with the last two
dims swapped (vllm-ascend keeps MoE weights transposed for its grouped matmul) is
written through a transposed view; any other mismatch is an error, never a skip.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from .executor import ExecStats, execute
from .layout import InferLayout, ReshardLayoutError, TrainLayout
from .params import ModelShapes, model_params
from .planner import BUCKET_ENV, DEFAULT_BUCKET_BYTES, Plan, plan_reshard

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")
_EXPERT = re.compile(r"^mlp\.experts\.linear_fc([12])\.weight(\d+)$")
_MCORE_TOP = {
    "embedding.word_embeddings.weight": "model.embed_tokens.weight",
    "decoder.final_layernorm.weight": "model.norm.weight",
    "output_layer.weight": "lm_head.weight",
}
_MCORE_LAYER = {
    "input_layernorm.weight": "input_layernorm.weight",
    "self_attention.linear_proj.weight": "self_attn.o_proj.weight",
    "self_attention.linear_q_down_proj.weight": "self_attn.q_a_proj.weight",
    "self_attention.linear_q_up_proj.layer_norm_weight": "self_attn.q_a_layernorm.weight",
    "self_attention.linear_q_up_proj.weight": "self_attn.q_b_proj.weight",
    "self_attention.linear_kv_down_proj.weight": "self_attn.kv_a_proj_with_mqa.weight",
    "self_attention.linear_kv_up_proj.layer_norm_weight": "self_attn.kv_a_layernorm.weight",
    "self_attention.linear_kv_up_proj.weight": "self_attn.kv_b_proj.weight",
    "mlp.linear_fc1.layer_norm_weight": "post_attention_layernorm.weight",
    "pre_mlp_layernorm.weight": "post_attention_layernorm.weight",
    # Megatron's fc1 shard is [gate_shard; up_shard], the fused layout the planner assumes.
    "mlp.linear_fc1.weight": "mlp.gate_up_proj.weight",
    "mlp.linear_fc2.weight": "mlp.down_proj.weight",
    "mlp.shared_experts.linear_fc1.weight": "mlp.shared_experts.gate_up_proj.weight",
    "mlp.shared_experts.linear_fc2.weight": "mlp.shared_experts.down_proj.weight",
    "mlp.router.weight": "mlp.gate.weight",
    "mlp.router.expert_bias": "mlp.gate.e_score_correction_bias",
}


def shapes_from_hf_config(cfg: Any) -> ModelShapes:
    return ModelShapes(
        num_layers=cfg.num_hidden_layers,
        first_k_dense=cfg.first_k_dense_replace,
        hidden=cfg.hidden_size,
        intermediate=cfg.intermediate_size,
        moe_intermediate=cfg.moe_intermediate_size,
        num_experts=cfg.n_routed_experts,
        num_shared_experts=cfg.n_shared_experts,
        vocab=cfg.vocab_size,
        num_heads=cfg.num_attention_heads,
        q_lora_rank=cfg.q_lora_rank,
        kv_lora_rank=cfg.kv_lora_rank,
        qk_nope_head_dim=cfg.qk_nope_head_dim,
        qk_rope_head_dim=cfg.qk_rope_head_dim,
        v_head_dim=cfg.v_head_dim,
    )


def megatron_shards(named: Iterable[tuple[str, torch.Tensor]]) -> dict[str, Any]:
    """Canonical name -> local training shard (per-expert lists ordered by local expert id).

    ``named`` yields Megatron parameter names whose layer numbers are already global.
    """
    out: dict[str, Any] = {}
    experts: dict[str, dict[int, torch.Tensor]] = {}
    for name, tensor in named:
        while name.startswith("module."):
            name = name[len("module.") :]
        if name in _MCORE_TOP:
            out[_MCORE_TOP[name]] = tensor.data
            continue
        m = _LAYER.match(name)
        if m is None:
            raise ReshardLayoutError(f"reshard: no canonical name for Megatron parameter {name!r}")
        layer, rest = m.groups()
        e = _EXPERT.match(rest)
        if e is not None:
            kind = "w13_weight" if e.group(1) == "1" else "w2_weight"
            experts.setdefault(f"model.layers.{layer}.mlp.experts.{kind}", {})[int(e.group(2))] = tensor.data
            continue
        if rest not in _MCORE_LAYER:
            raise ReshardLayoutError(f"reshard: no canonical name for Megatron parameter {name!r}")
        out[f"model.layers.{layer}.{_MCORE_LAYER[rest]}"] = tensor.data
    for key, by_id in experts.items():
        out[key] = [by_id[i] for i in sorted(by_id)]
    return out


def inference_targets(plan: Plan, rank: int, named: Iterable[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """vLLM's parameters as writable views in the planner's inference shard shapes."""
    have = {n: t.data for n, t in named}
    out = {}
    for i, p in enumerate(plan.params):
        want = plan.infer_shape(i, rank)
        t = have.get(p.name)
        if t is None:
            raise ReshardLayoutError(f"reshard: the rollout model has no parameter {p.name!r}")
        if ".experts." in p.name and len(want) >= 2 and want[-1] == want[-2]:
            # Square expert matrices hide whether vllm-ascend transposed them.
            raise ReshardLayoutError(f"reshard: cannot tell the orientation of square {p.name} {want}")
        if tuple(t.shape) == want:
            out[p.name] = t
        elif t.dim() >= 2 and tuple(t.transpose(-1, -2).shape) == want:
            out[p.name] = t.transpose(-1, -2)
        else:
            raise ReshardLayoutError(
                f"reshard: rollout parameter {p.name} has shape {tuple(t.shape)}, the plan expects {want}"
            )
    return out


def bucket_bytes_from_env() -> int:
    raw = os.environ.get(BUCKET_ENV)
    return int(raw) << 20 if raw else DEFAULT_BUCKET_BYTES


@dataclass
class ReshardRequest:
    """Stands in for the weight generator verl hands to ``rollout.update_weights``; the patched
    ``update_weights`` recognises it and runs the executor into the rollout model instead."""

    plan: Plan
    rank: int
    train_shards: dict[str, Any]
    group: Any = None

    def apply(self, named_inference_params: Iterable[tuple[str, torch.Tensor]]) -> ExecStats:
        targets = inference_targets(self.plan, self.rank, named_inference_params)
        device = next(iter(targets.values())).device
        return execute(self.plan, self.rank, self.train_shards, targets, group=self.group, device=device)


_plan_cache: dict[tuple, Plan] = {}


def cached_plan(shapes: ModelShapes, train: TrainLayout, infer: InferLayout, bucket_bytes: int) -> Plan:
    """Plans depend only on shapes and layouts; every weight sync reuses the first one."""
    key = (shapes, train, infer, bucket_bytes)
    if key not in _plan_cache:
        _plan_cache[key] = plan_reshard(
            model_params(shapes),
            train,
            infer,
            num_layers=shapes.num_layers,
            num_experts=shapes.num_experts,
            bucket_bytes=bucket_bytes,
        )
    return _plan_cache[key]
