"""Glue between verl's megatron worker, vLLM's model and the reshard executor.

Training shards come from Megatron-core's named parameters (the names verl 0.6.1's converters read:
``verl/models/mcore/weight_converter.py`` McoreToHFWeightConverterDpskv3 for DeepSeek-V3, and
McoreToHFWeightConverterDense / Qwen3Moe for Qwen3-MoE), with layer numbers made global by the caller;
inference targets are vLLM's parameters, overwritten in place. A target whose shape is the expected one
with the last two dims swapped (vllm-ascend keeps MoE weights transposed for its grouped matmul) is
written through a transposed view; any other mismatch is an error, never a skip.

Qwen3's attention is one fused tensor on both sides, laid out differently: Megatron's ``linear_qkv``
interleaves per key/value group ``[q of the group's heads; k; v]`` (how verl 0.6.1's
``utils/megatron_utils.py`` convert_qkv_shard reads it), vLLM's ``qkv_proj`` holds ``[q; k; v]`` of the
rank's heads (``QKVParallelLinear``). The planner sees q, k and v as three parameters: the training
side de-interleaves a copy, the inference side writes three row ranges of ``qkv_proj``. DeepSeek's MLA down
projections are one tensor in vLLM 0.23 (``fused_qkv_a_proj``, ``[q_a_proj; kv_a_proj_with_mqa]``:
``vllm/model_executor/models/deepseek_v2.py:927-933, 1353-1356`` at v0.23.0, which vllm-ascend 0.23 keeps),
two in vllm-ascend 0.9.1's own DeepSeek model (``vllm_ascend/models/deepseek_v2.py:415, 436``): a rollout
model's own names say which (``ROW_FUSED``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from .executor import _DTYPES, ExecStats, execute, execute_stream
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


_MCORE_QWEN3_LAYER = {
    "input_layernorm.weight": "input_layernorm.weight",
    "self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
    "self_attention.q_layernorm.weight": "self_attn.q_norm.weight",
    "self_attention.k_layernorm.weight": "self_attn.k_norm.weight",
    "self_attention.linear_proj.weight": "self_attn.o_proj.weight",
    "pre_mlp_layernorm.weight": "post_attention_layernorm.weight",
    "mlp.router.weight": "mlp.gate.weight",
}
_QKV = "self_attention.linear_qkv.weight"
_QKV_PARTS = ("q_proj", "k_proj", "v_proj")
# vLLM parameters that hold several of the planner's attention parameters as row ranges, in this order
# (vLLM's stacked_params_mapping of each model's load_weights; tests/reshard/test_patch_verl09.py reads them
# from vLLM 0.23's code).
ROW_FUSED = {
    "self_attn.qkv_proj.weight": tuple(f"self_attn.{q}.weight" for q in _QKV_PARTS),
    "self_attn.fused_qkv_a_proj.weight": ("self_attn.q_a_proj.weight", "self_attn.kv_a_proj_with_mqa.weight"),
}


def fused_name(name: str) -> tuple[str, int] | None:
    """The vLLM parameter that holds planner parameter ``name`` as rows, and its place among the parts."""
    for fused, parts in ROW_FUSED.items():
        for k, part in enumerate(parts):
            if name.endswith("." + part):
                return name[: -len(part)] + fused, k
    return None


def shapes_from_hf_config(cfg: Any) -> ModelShapes:
    """The planner's shapes of a model from its HF config; an architecture it does not know is one error."""
    kind = getattr(cfg, "model_type", None)
    if kind == "qwen3_moe":
        if getattr(cfg, "mlp_only_layers", None) or getattr(cfg, "decoder_sparse_step", 1) != 1:
            raise ReshardLayoutError("reshard: Qwen3-MoE with dense layers (mlp_only_layers) is not mapped")
        return ModelShapes(
            arch="qwen3_moe",
            num_layers=cfg.num_hidden_layers,
            first_k_dense=0,
            hidden=cfg.hidden_size,
            intermediate=cfg.intermediate_size,
            moe_intermediate=cfg.moe_intermediate_size,
            num_experts=cfg.num_experts,
            num_shared_experts=0,
            vocab=cfg.vocab_size,
            num_heads=cfg.num_attention_heads,
            num_kv_heads=cfg.num_key_value_heads,
            head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
        )
    if kind != "deepseek_v3":
        raise ReshardLayoutError(
            f"reshard: no plan for model_type {kind!r} (it maps deepseek_v3 and qwen3_moe); "
            "set reshard.enabled false to sync through verl's own gather"
        )
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


def split_qkv(t: torch.Tensor, shapes: ModelShapes) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Megatron's local ``linear_qkv`` shard, ``[q; k; v]`` per key/value group, as this rank's q, k and v rows."""
    d, per_group = shapes.head_dim, shapes.num_heads // shapes.num_kv_heads
    rows = (per_group + 2) * d
    if t.shape[0] % rows:
        raise ReshardLayoutError(
            f"reshard: linear_qkv shard of {t.shape[0]} rows is not whole groups of {rows} "
            f"({per_group} query heads + k + v, head_dim {d})"
        )
    g = t.reshape(t.shape[0] // rows, per_group + 2, d, *t.shape[1:])
    return (
        g[:, :per_group].reshape(-1, *t.shape[1:]).contiguous(),
        g[:, per_group].reshape(-1, *t.shape[1:]).contiguous(),
        g[:, per_group + 1].reshape(-1, *t.shape[1:]).contiguous(),
    )


def megatron_shards(named: Iterable[tuple[str, torch.Tensor]], shapes: ModelShapes | None = None) -> dict[str, Any]:
    """Canonical name -> local training shard (per-expert lists ordered by local expert id).

    ``named`` yields Megatron parameter names whose layer numbers are already global; ``shapes`` says
    which architecture's names they are (default DeepSeek-V3's).
    """
    qwen3 = shapes.arch == "qwen3_moe" if shapes is not None else False
    layer_names = {**_MCORE_LAYER, **_MCORE_QWEN3_LAYER} if qwen3 else _MCORE_LAYER
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
        if shapes is not None and qwen3 and rest == _QKV:
            for part, t in zip(_QKV_PARTS, split_qkv(tensor.data, shapes), strict=True):
                out[f"model.layers.{layer}.self_attn.{part}.weight"] = t
            continue
        if rest not in layer_names:
            raise ReshardLayoutError(f"reshard: no canonical name for Megatron parameter {name!r}")
        out[f"model.layers.{layer}.{layer_names[rest]}"] = tensor.data
    for key, by_id in experts.items():
        out[key] = [by_id[i] for i in sorted(by_id)]
    return out


def _fused_rows(plan: Plan, rank: int, have: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The planner's parameters as row ranges of the vLLM parameters that fuse them (``ROW_FUSED``), where the
    rollout model has the fused one: Qwen3's q, k and v in ``qkv_proj``; DeepSeek's q_a and kv_a in vLLM 0.23's
    ``fused_qkv_a_proj``."""
    layout = _RolloutLayout(plan, rank)
    out = {}
    for name, (target, start, rows) in layout.slot.items():
        if target == name or target not in have:
            continue
        fused, planned = have[target], layout.shape[target][0]
        if fused.shape[0] != planned:
            parts = [n.rsplit(".", 2)[-2] for n, slot in layout.slot.items() if slot[0] == target]
            raise ReshardLayoutError(
                f"reshard: rollout parameter {target} has {fused.shape[0]} rows, "
                f"the plan's {', '.join(parts)} {planned}"
            )
        out[name] = fused[start : start + rows]
    return out


def inference_targets(plan: Plan, rank: int, named: Iterable[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """vLLM's parameters as writable views in the planner's inference shard shapes."""
    have = {n: t.data for n, t in named}
    have.update(_fused_rows(plan, rank, have))
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

    def stream(self, device: torch.device | str | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """Runs the reshard into fresh tensors and yields each of this rank's rollout parameters under vLLM's
        name (fused as vLLM 0.23 fuses them, ``ROW_FUSED``) once it is whole, for verl 0.9's sync to stream to
        the rollout's process. A parameter is made when its first slice lands and handed on when its last
        has: the extra memory is the parameters of the rounds in flight, not the rank's whole rollout share."""
        layout = _RolloutLayout(self.plan, self.rank)
        made: dict[str, torch.Tensor] = {}  # vLLM name -> the tensor being filled
        left = dict(layout.parts)  # vLLM name -> planner parameters not yet whole

        class Slots(dict):
            def __missing__(slots, name: str) -> torch.Tensor:
                target, start, rows = layout.slot[name]
                if target not in made:
                    made[target] = torch.empty(layout.shape[target], dtype=layout.dtype[target], device=device)
                return made[target][start : start + rows] if target != name else made[target]

        names = [p.name for p in self.plan.params]
        for done in execute_stream(self.plan, self.rank, self.train_shards, Slots(), group=self.group, device=device):
            for i in done:
                target = layout.slot[names[i]][0]
                left[target] -= 1
                if left[target] == 0:
                    yield target, made.pop(target)


class _RolloutLayout:
    """This rank's rollout parameters as vLLM 0.23 names them: for each planner parameter, the vLLM parameter
    that holds it and its rows there; for each vLLM parameter, its shape, dtype and how many parts it has."""

    def __init__(self, plan: Plan, rank: int):
        self.slot: dict[str, tuple[str, int, int]] = {}
        self.shape: dict[str, tuple[int, ...]] = {}
        self.dtype: dict[str, torch.dtype] = {}
        self.parts: dict[str, int] = {}
        for i, p in enumerate(plan.params):
            shape = plan.infer_shape(i, rank)
            fused = fused_name(p.name)
            target = fused[0] if fused else p.name
            start = self.shape[target][0] if target in self.shape else 0
            # Parts come in the planner's order, which is vLLM's row order (checked against vLLM's mapping).
            if fused and fused[1] != self.parts.get(target, 0):
                raise ReshardLayoutError(f"reshard: {p.name} comes out of its order in {target}")
            self.slot[p.name] = (target, start, shape[0])
            self.shape[target] = (start + shape[0], *shape[1:]) if fused else shape
            self.dtype[target] = _DTYPES[p.dtype]
            self.parts[target] = self.parts.get(target, 0) + 1


def write_shards(
    named_params: Iterable[tuple[str, torch.Tensor]], shards: Iterable[tuple[str, torch.Tensor]]
) -> set[str]:
    """Copies received rollout shards into the vLLM model's parameters of the same name, in place (or through a
    transposed view, as vllm-ascend keeps MoE weights); returns the names written. A name or shape the model
    does not have is an error, never a skip."""
    params = dict(named_params)
    written = set()
    for name, t in shards:
        target = params.get(name)
        if target is None:
            raise ReshardLayoutError(f"reshard: the rollout model has no parameter {name!r}")
        if tuple(target.shape) == tuple(t.shape):
            target.data.copy_(t)
        elif target.dim() >= 2 and tuple(target.shape) == tuple(t.transpose(-1, -2).shape):
            target.data.copy_(t.transpose(-1, -2))
        else:
            raise ReshardLayoutError(
                f"reshard: rollout parameter {name} has shape {tuple(target.shape)}, the sync sent {tuple(t.shape)}"
            )
        written.add(name)
    return written


def require_all_written(named_params: Iterable[tuple[str, torch.Tensor]], written: set[str]) -> None:
    """Every parameter of the rollout model received a value: one the plan does not know would keep the
    engine's start-up (dummy) weights and sample from them."""
    missing = sorted(n for n, _ in named_params if n not in written)
    if missing:
        raise ReshardLayoutError(
            f"reshard: {len(missing)} rollout parameter(s) got no value from the sync, e.g. {', '.join(missing[:3])}"
        )


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
