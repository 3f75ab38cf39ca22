"""Run a function on N local CPU processes joined by a gloo process group, and build the
seeded full weights and per-rank shards the tests and benchmarks/reshard_bench.py compare against, and the same
shards under the names Megatron-core and vLLM give them (stand-ins of the two models' parameters).

Imported as ``reshard_harness``: pytest puts this folder on sys.path, and so does Python for
verl09_sync.py (run as a script by the line's environment) and the benchmark for itself."""

from __future__ import annotations

import multiprocessing as mp
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from npu_rl.cluster.probe import free_port
from npu_rl.reshard.executor import _DTYPES
from npu_rl.reshard.layout import InferLayout, TrainLayout
from npu_rl.reshard.params import ModelShapes
from npu_rl.reshard.planner import Plan
from npu_rl.reshard.shards import extract
from npu_rl.reshard.verl_sync import _MCORE_LAYER, _MCORE_QWEN3_LAYER, _MCORE_TOP, ROW_FUSED, fused_name


def _entry(rank: int, world: int, port: int, fn, args, queue, timeout_s: float) -> None:
    try:
        torch.set_num_threads(1)
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=timeout_s),
        )
        result = fn(rank, world, *args)
        dist.barrier()
        queue.put((rank, True, result))
    except BaseException:  # report any failure to the parent instead of hanging it
        queue.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ranks(world: int, fn: Callable[..., Any], *args: Any, timeout_s: float = 120.0) -> list[Any]:
    """``fn(rank, world, *args)`` on ``world`` processes; returns the results by rank.

    Uses fork so the children reuse the parent's imported torch (spawning 16 interpreters
    on a shared 2-core machine costs more than the test itself).
    """
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(r, world, port, fn, args, queue, timeout_s)) for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    errors = []
    try:
        for _ in range(world):
            rank, ok, value = queue.get(timeout=timeout_s + 30)
            (results.__setitem__(rank, value) if ok else errors.append(f"rank {rank}:\n{value}"))
            if errors:
                break
    finally:
        for p in procs:
            p.join(timeout=5 if not errors else 0.5)
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        raise RuntimeError("reshard worker failed: " + errors[0])
    return [results[r] for r in range(world)]


def full_weights(plan: Plan, seed: int = 0) -> dict[str, torch.Tensor]:
    """Deterministic random full parameters (identical on every rank)."""
    gen = torch.Generator().manual_seed(seed)
    return {p.name: torch.randn(p.shape, generator=gen, dtype=torch.float32).to(_DTYPES[p.dtype]) for p in plan.params}


def train_shards(plan: Plan, rank: int, full: dict[str, torch.Tensor], experts_as_list: bool = False):
    """This rank's Megatron-style training shards cut from the full weights."""
    out: dict[str, Any] = {}
    for i, p in enumerate(plan.params):
        if plan.train_shape(i, rank) is None:
            continue
        g, key = plan.geometry[i], plan.train_key(i, rank)
        shard = extract(full[p.name], [g.train_runs[d][key[d]] for d in range(len(key))])
        out[p.name] = list(shard.unbind(0)) if experts_as_list and p.train_split[0] == "ep" else shard
    return out


def expected_infer_shards(plan: Plan, rank: int, full: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for i, p in enumerate(plan.params):
        g = plan.geometry[i]
        key = g.infer_key(plan.infer.coords(rank))
        out[p.name] = extract(full[p.name], [g.infer_runs[d][key[d]] for d in range(len(key))])
    return out


def blank_infer_shards(plan: Plan, rank: int) -> dict[str, torch.Tensor]:
    """Inference tensors filled with NaN, so a slice the reshard misses cannot compare equal."""
    return {
        p.name: torch.full(plan.infer_shape(i, rank), float("nan"), dtype=_DTYPES[p.dtype])
        for i, p in enumerate(plan.params)
    }


def megatron_named(
    plan: Plan, rank: int, full: dict[str, torch.Tensor], shapes: ModelShapes, offset: int
) -> dict[str, torch.Tensor]:
    """This rank's training shards as Megatron-core names them: stage-local layer numbers (``offset``: the
    stage's first layer), one parameter per local expert, Qwen3's q, k and v in one ``linear_qkv`` interleaved
    per key/value group, the router's expert bias among them (a buffer: the caller keeps it out of
    ``named_parameters``)."""
    qwen3 = shapes.arch == "qwen3_moe"
    top = {v: k for k, v in _MCORE_TOP.items()}
    # One Megatron name per canonical one: TE's fused input norm for Qwen3, Megatron's own pre-MLP norm.
    skip = {"mlp.linear_fc1.layer_norm_weight", "input_layernorm.weight" if qwen3 else ""}
    table = {**_MCORE_LAYER, **_MCORE_QWEN3_LAYER} if qwen3 else _MCORE_LAYER
    layer = {v: k for k, v in table.items() if k not in skip}
    shards = train_shards(plan, rank, full, experts_as_list=True)
    out: dict[str, torch.Tensor] = {}
    qkv: dict[str, dict[str, torch.Tensor]] = {}
    for name, t in shards.items():
        if name in top:
            out[top[name]] = t
            continue
        _, _, i, rest = name.split(".", 3)
        local = f"decoder.layers.{int(i) - offset}."
        if rest.startswith("mlp.experts."):
            fc = "1" if rest.endswith("w13_weight") else "2"
            out.update({f"{local}mlp.experts.linear_fc{fc}.weight{j}": e for j, e in enumerate(t)})
        elif rest.split(".")[-2] in ("q_proj", "k_proj", "v_proj"):
            qkv.setdefault(local, {})[rest.split(".")[-2]] = t
        else:
            out[local + layer[rest]] = t
    d, per_group = shapes.head_dim, shapes.num_heads // max(shapes.num_kv_heads, 1)
    for local, parts in qkv.items():
        groups = parts["k_proj"].shape[0] // d
        rows = [
            torch.cat([parts["q_proj"][g * per_group * d : (g + 1) * per_group * d], parts[k][g * d : (g + 1) * d]])
            if k == "k_proj"
            else parts[k][g * d : (g + 1) * d]
            for g in range(groups)
            for k in ("k_proj", "v_proj")
        ]
        out[local + "self_attention.linear_qkv.weight"] = torch.cat(rows)
    return out


# Weight syncs the verl hooks are tested on (tests/reshard/test_patch.py on verl 0.6.1, verl09_sync.py on
# 0.9.0), each the model, the training layout (Megatron's), the rollout's, and the pipeline split verl's
# TransformerConfig gives. Non-square expert matrices: their orientation is unambiguous.
SYNC_CASES: dict[str, tuple[ModelShapes, TrainLayout, InferLayout, tuple[int | None, int | None]]] = {
    "deepseek_v3": (
        ModelShapes.tiny(moe_intermediate=4),
        TrainLayout(2, tp=1, pp=2, ep=1, layers_per_stage=(1, 3)),
        InferLayout(2, tp=1, ep=2),
        (1, 3),
    ),
    # Qwen3-MoE's attention interleaved per group across TP 2, whole experts in training (ETP 1, EP 2).
    "qwen3_moe": (
        ModelShapes.tiny(arch="qwen3_moe", moe_intermediate=4),
        TrainLayout(2, tp=2, pp=1, ep=2, etp=1),
        InferLayout(2, tp=1, ep=2),
        (None, None),
    ),
}


# What each rollout model fuses: vllm-ascend 0.9.1's own DeepSeek model keeps MLA's down projections apart
# (the seeds' line), vLLM 0.23's fuses them too (npu_rl.reshard.verl_sync.ROW_FUSED).
VLLM_0_9_FUSED = ("self_attn.qkv_proj.weight",)
VLLM_0_23_FUSED = tuple(ROW_FUSED)


def vllm_named(
    plan: Plan, rank: int, full: dict[str, torch.Tensor], fused: tuple[str, ...] = VLLM_0_9_FUSED
) -> dict[str, torch.Tensor]:
    """This rank's inference shards as vLLM names them: the planner's parts of each of ``fused`` as one
    tensor of their rows in order (Qwen3's [q; k; v] in ``qkv_proj``; DeepSeek's [q_a; kv_a] in vLLM 0.23's
    ``fused_qkv_a_proj``)."""
    out: dict[str, torch.Tensor] = {}
    for name, t in expected_infer_shards(plan, rank, full).items():
        target = fused_name(name)
        if target is None or not target[0].endswith(tuple("." + f for f in fused)):
            out[name] = t
            continue
        have = out.get(target[0])
        out[target[0]] = t if have is None else torch.cat([have, t])
    return out


def hf_config(shapes: ModelShapes) -> Any:
    """A stand-in of the model's transformers config, with the fields ``verl_sync.shapes_from_hf_config`` reads."""
    from types import SimpleNamespace

    common = dict(
        num_hidden_layers=shapes.num_layers,
        hidden_size=shapes.hidden,
        intermediate_size=shapes.intermediate,
        moe_intermediate_size=shapes.moe_intermediate,
        vocab_size=shapes.vocab,
        num_attention_heads=shapes.num_heads,
    )
    if shapes.arch == "qwen3_moe":
        return SimpleNamespace(
            model_type="qwen3_moe",
            num_experts=shapes.num_experts,
            num_key_value_heads=shapes.num_kv_heads,
            head_dim=shapes.head_dim,
            mlp_only_layers=[],
            decoder_sparse_step=1,
            **common,
        )
    return SimpleNamespace(
        model_type="deepseek_v3",
        first_k_dense_replace=shapes.first_k_dense,
        n_routed_experts=shapes.num_experts,
        n_shared_experts=shapes.num_shared_experts,
        q_lora_rank=shapes.q_lora_rank,
        kv_lora_rank=shapes.kv_lora_rank,
        qk_nope_head_dim=shapes.qk_nope_head_dim,
        qk_rope_head_dim=shapes.qk_rope_head_dim,
        v_head_dim=shapes.v_head_dim,
        **common,
    )
