"""Parameter inventory of a MoE model in a canonical (HF) layout: DeepSeek-V3/R1 (MLA attention, dense
first layers, a shared expert) or Qwen3-MoE (grouped-query attention with per-head q/k norms, every
layer sparse, no shared expert).

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


ARCHS = ("deepseek_v3", "qwen3_moe")  # transformers' model_type of each architecture the planner knows


@dataclass(frozen=True)
class ModelShapes:
    """Defaults are DeepSeek-V3 / R1 (config.json of deepseek-ai/DeepSeek-V3); :meth:`qwen3_235b` is
    Qwen3-235B-A22B's. MLA fields are DeepSeek's only, ``num_kv_heads``/``head_dim`` Qwen3's only."""

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
    arch: str = "deepseek_v3"
    num_kv_heads: int = 0
    head_dim: int = 0

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"unknown architecture {self.arch!r} (known: {', '.join(ARCHS)})")

    @classmethod
    def qwen3_235b(cls, **kw: Any) -> ModelShapes:
        """Qwen3-235B-A22B (config.json of Qwen/Qwen3-235B-A22B)."""
        base: dict[str, Any] = dict(
            arch="qwen3_moe",
            num_layers=94,
            first_k_dense=0,
            hidden=4096,
            intermediate=12288,
            moe_intermediate=1536,
            num_experts=128,
            num_shared_experts=0,
            vocab=151936,
            num_heads=64,
            num_kv_heads=4,
            head_dim=128,
        )
        base.update(kw)
        return cls(**base)

    @classmethod
    def tiny(cls, **kw: Any) -> ModelShapes:
        """Same structure at toy sizes, for multi-process CPU tests (``arch="qwen3_moe"``: Qwen3-MoE's)."""
        if kw.get("arch") == "qwen3_moe":
            qwen: dict[str, Any] = dict(
                num_layers=4,
                hidden=16,
                moe_intermediate=8,
                num_experts=16,
                vocab=64,
                num_heads=8,
                num_kv_heads=4,
                head_dim=4,
            )
            qwen.update(kw)
            return cls.qwen3_235b(**qwen)
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


COL, ROW, REP = ("tp", None), (None, "tp"), (None, None)


def _p(m: ModelShapes):
    def p(name: str, shape: tuple[int, ...], layer: int, train, infer=None, fused=None, dtype=None, granule=None):
        infer = infer if infer is not None else train
        return ParamSpec(name, shape, layer, train, infer, fused, dtype or m.dtype, granule)

    return p


def _routed_experts(m: ModelShapes, pre: str, i: int) -> list[ParamSpec]:
    """Megatron splits routed experts over EP and, inside each expert, over ETP (expert tensor parallel);
    vLLM with expert parallelism keeps every expert whole on one rank."""
    p = _p(m)
    return [
        p(
            pre + "mlp.experts.w13_weight",
            (m.num_experts, 2 * m.moe_intermediate, m.hidden),
            i,
            ("ep", "etp", None),
            ("ep", None, None),
            fused=(1, 2, 1),
        ),
        p(
            pre + "mlp.experts.w2_weight",
            (m.num_experts, m.hidden, m.moe_intermediate),
            i,
            ("ep", None, "etp"),
            ("ep", None, None),
        ),
    ]


def model_params(m: ModelShapes) -> list[ParamSpec]:
    """Every weight of the model, in the order the weight sync walks them (embedding, layers, head)."""
    return _qwen3_moe_params(m) if m.arch == "qwen3_moe" else _deepseek_params(m)


def _qwen3_moe_params(m: ModelShapes) -> list[ParamSpec]:
    p, h, d = _p(m), m.hidden, m.head_dim
    out = [p("model.embed_tokens.weight", (m.vocab, h), EMBED_LAYER, COL)]
    for i in range(m.num_layers):
        pre = f"model.layers.{i}."
        out += [
            p(pre + "input_layernorm.weight", (h,), i, (None,)),
            # Whole heads per TP rank, on both sides: vLLM's qkv_proj holds [q; k; v] of its heads, which
            # npu_rl.reshard.verl_sync addresses as three row ranges of the one tensor.
            p(pre + "self_attn.q_proj.weight", (m.num_heads * d, h), i, COL, granule=(d, 1)),
            p(pre + "self_attn.k_proj.weight", (m.num_kv_heads * d, h), i, COL, granule=(d, 1)),
            p(pre + "self_attn.v_proj.weight", (m.num_kv_heads * d, h), i, COL, granule=(d, 1)),
            p(pre + "self_attn.q_norm.weight", (d,), i, (None,)),
            p(pre + "self_attn.k_norm.weight", (d,), i, (None,)),
            p(pre + "self_attn.o_proj.weight", (h, m.num_heads * d), i, ROW, granule=(1, d)),
            p(pre + "post_attention_layernorm.weight", (h,), i, (None,)),
            p(pre + "mlp.gate.weight", (m.num_experts, h), i, REP),
            *_routed_experts(m, pre, i),
        ]
    return out + [
        p("model.norm.weight", (h,), m.num_layers, (None,)),
        p("lm_head.weight", (m.vocab, h), m.num_layers, COL),
    ]


def _deepseek_params(m: ModelShapes) -> list[ParamSpec]:
    col, row, rep = COL, ROW, REP
    p, h = _p(m), m.hidden
    qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
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
            *_routed_experts(m, pre, i),
        ]
    out += [
        p("model.norm.weight", (h,), m.num_layers, (None,)),
        p("lm_head.weight", (m.vocab, h), m.num_layers, col),
    ]
    return out
