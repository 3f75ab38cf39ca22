"""Parameter inventory of a DeepSeek-V3/R1-style MoE model in a canonical (HF) layout.

Each parameter is one logical tensor; routed experts of a layer are stacked along a
leading expert dimension (one layer's ``w13`` is [E, 2F, H], the unit the all_gather
baseline materialises). A parameter says, per dimension, which parallel axis splits it
in training and in inference, and how many fused sub-blocks (gate/up) that dimension
has: each sub-block is split separately, as Megatron and vLLM both do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}

EMBED_LAYER = -1  # lives on the first pipeline stage


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple[int, ...]
    layer: int  # EMBED_LAYER, a decoder layer index, or num_layers for the final norm / head
    train_split: tuple[str | None, ...]
    infer_split: tuple[str | None, ...]
    fused: tuple[int, ...] | None = None
    dtype: str = "bfloat16"
    # Per dimension, the block a shard boundary must not cut (an attention head's rows).
    granule: tuple[int, ...] | None = None

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def fuse(self) -> tuple[int, ...]:
        return self.fused or (1,) * len(self.shape)

    @property
    def grain(self) -> tuple[int, ...]:
        return self.granule or (1,) * len(self.shape)


@dataclass(frozen=True)
class ModelShapes:
    """Defaults are DeepSeek-V3 / R1 (config.json of deepseek-ai/DeepSeek-V3)."""

    num_layers: int = 61
    first_k_dense: int = 3
    hidden: int = 7168
    intermediate: int = 18432
    moe_intermediate: int = 2048
    num_experts: int = 256
    num_shared_experts: int = 1
    vocab: int = 129280
    num_heads: int = 128
    q_lora_rank: int = 1536
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    dtype: str = "bfloat16"

    @classmethod
    def tiny(cls, **kw: int) -> ModelShapes:
        """Same structure at toy sizes, for multi-process CPU tests."""
        base: dict[str, Any] = dict(
            num_layers=4,
            first_k_dense=1,
            hidden=16,
            intermediate=32,
            moe_intermediate=8,
            num_experts=16,
            vocab=64,
            num_heads=4,
            q_lora_rank=8,
            kv_lora_rank=8,
            qk_nope_head_dim=4,
            qk_rope_head_dim=2,
            v_head_dim=4,
        )
        base.update(kw)
        return cls(**base)


def model_params(m: ModelShapes) -> list[ParamSpec]:
    """Every weight of the model, in the order the weight sync walks them (embedding, layers, head)."""
    col, row, rep = ("tp", None), (None, "tp"), (None, None)
    h, dt = m.hidden, m.dtype
    qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim

    def p(name: str, shape: tuple[int, ...], layer: int, train, infer=None, fused=None, dtype=dt, granule=None):
        return ParamSpec(name, shape, layer, train, infer if infer is not None else train, fused, dtype, granule)

    out = [p("model.embed_tokens.weight", (m.vocab, h), EMBED_LAYER, col)]
    for i in range(m.num_layers):
        pre = f"model.layers.{i}."
        out += [
            p(pre + "input_layernorm.weight", (h,), i, (None,)),
            # MLA: the low-rank down projections are replicated, the per-head up projections are TP-split by head.
            p(pre + "self_attn.q_a_proj.weight", (m.q_lora_rank, h), i, rep),
            p(pre + "self_attn.q_a_layernorm.weight", (m.q_lora_rank,), i, (None,)),
            p(pre + "self_attn.q_b_proj.weight", (m.num_heads * qk_head, m.q_lora_rank), i, col, granule=(qk_head, 1)),
            p(pre + "self_attn.kv_a_proj_with_mqa.weight", (m.kv_lora_rank + m.qk_rope_head_dim, h), i, rep),
            p(pre + "self_attn.kv_a_layernorm.weight", (m.kv_lora_rank,), i, (None,)),
            p(
                pre + "self_attn.kv_b_proj.weight",
                (m.num_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank),
                i,
                col,
                granule=(m.qk_nope_head_dim + m.v_head_dim, 1),
            ),
            p(pre + "self_attn.o_proj.weight", (h, m.num_heads * m.v_head_dim), i, row, granule=(1, m.v_head_dim)),
            p(pre + "post_attention_layernorm.weight", (h,), i, (None,)),
        ]
        if i < m.first_k_dense:
            out += [
                p(pre + "mlp.gate_up_proj.weight", (2 * m.intermediate, h), i, col, fused=(2, 1)),
                p(pre + "mlp.down_proj.weight", (h, m.intermediate), i, row),
            ]
            continue
        shared = m.moe_intermediate * m.num_shared_experts
        out += [
            p(pre + "mlp.gate.weight", (m.num_experts, h), i, rep),
            p(pre + "mlp.gate.e_score_correction_bias", (m.num_experts,), i, (None,), dtype="float32"),
            p(pre + "mlp.shared_experts.gate_up_proj.weight", (2 * shared, h), i, col, fused=(2, 1)),
            p(pre + "mlp.shared_experts.down_proj.weight", (h, shared), i, row),
            # Routed experts: Megatron splits them over EP and (ETP = TP) inside each expert;
            # vLLM with expert parallelism keeps every expert whole on one rank.
            p(
                pre + "mlp.experts.w13_weight",
                (m.num_experts, 2 * m.moe_intermediate, h),
                i,
                ("ep", "tp", None),
                ("ep", None, None),
                fused=(1, 2, 1),
            ),
            p(
                pre + "mlp.experts.w2_weight",
                (m.num_experts, h, m.moe_intermediate),
                i,
                ("ep", None, "tp"),
                ("ep", None, None),
            ),
        ]
    out += [
        p("model.norm.weight", (h,), m.num_layers, (None,)),
        p("lm_head.weight", (m.vocab, h), m.num_layers, col),
    ]
    return out
