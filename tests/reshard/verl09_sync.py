"""Weight syncs of verl 0.9.0 with the reshard patch, on gloo CPU ranks, run by the line's CPU environment
(tests/reshard/test_patch_verl09.py runs it as ``python verl09_sync.py CASE[:FAULT] ...``; it prints one JSON
line, each case's results by rank).

What runs is verl's own code, with the patch installed the way a run installs it (``PATCH.install`` before
verl is imported, so the fingerprints are checked on import; once, in this process, whose forked ranks
inherit the patched modules): the engine worker's
``ActorRolloutRefWorker.update_weights`` in naive (colocated) mode, the megatron engine's
``get_per_tensor_param`` (patched), ``ServerAdapter.update_weights`` with verl's bucketed sender over ZMQ and
shared memory, and the vLLM worker extension's ``update_weights_from_ipc`` with verl's receiver and its
post-load step. Megatron-core's own ``parallel_state`` gives each rank its layout.

Stand-ins, at the device boundary: the Megatron model (its named parameters, as Megatron-core names them), the
vLLM model (its named parameters as vLLM 0.23 fuses them, which ``vllm_fusions`` reads from vLLM's own code;
MoE weights transposed as vllm-ascend keeps them), the vLLM worker running in a thread of the training rank's
process instead of a process of its own, and the attributes verl's constructors would set (a megatron engine
and an engine worker are not built on CPU). What the stand-ins leave out: the pairing of a training rank with
its vLLM rank (verl's ``_resolve_vllm_weight_sync_local_rank``; here rank r sends to the worker of rank r), the
IPC transport (shared memory only, as on CPU), and ``process_weights_after_loading`` (nothing to do on the
stand-in model).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import os
import sys
import traceback
import types

import torch
from reshard_harness import (
    SYNC_CASES,
    VLLM_0_23_FUSED,
    full_weights,
    hf_config,
    megatron_named,
    run_ranks,
    vllm_named,
)

from npu_rl.reshard import InferLayout, ModelShapes, TrainLayout
from npu_rl.reshard.verl_sync import cached_plan

# Per case: the model, the training layout (Megatron's), the rollout's and the pipeline split verl's
# TransformerConfig gives; a fault to inject comes with the case's name (CASE:FAULT).
CASES = {
    **SYNC_CASES,
    # The 235B recipe's kind of layout on 8 ranks: TP2 PP2 EP2 with whole experts, rollout TP2 x DP4 = EP8.
    "qwen3_moe_8": (
        ModelShapes.tiny(arch="qwen3_moe", moe_intermediate=4),
        TrainLayout(8, tp=2, pp=2, ep=2, etp=1),
        InferLayout(8, tp=2, ep=8),
        (None, None),
    ),
}


class MegatronModule(torch.nn.Module):
    """Megatron-core's names: stage-local layers, per-expert weights, the router's expert bias a buffer."""

    def __init__(self, named: dict[str, torch.Tensor]):
        super().__init__()
        self._named = named

    def named_parameters(self, *args, **kwargs):
        return iter([(n, t) for n, t in self._named.items() if not n.endswith("expert_bias")])

    def state_dict(self, *args, **kwargs):
        return dict(self._named)


class VllmModel(torch.nn.Module):
    def __init__(self, params: dict[str, torch.nn.Parameter]):
        super().__init__()
        self._params = params
        self.model = torch.nn.Module()  # vLLM's ForCausalLM wraps its decoder as .model (verl looks there)

    def named_parameters(self, *args, **kwargs):
        return iter(self._params.items())


def _install() -> None:
    """The cpu and reshard patches, then the verl modules the sync runs, as a CPU run of the line has them."""
    from npu_rl.patches import PATCHES, reshard
    from npu_rl.patches.verl_platforms import CPU as VERL_CPU

    # verl's device layer on CPU as a CPU run has it: the cpu patch's platform, named as the launcher names it.
    os.environ["VERL_PLATFORM"] = VERL_CPU
    os.environ["NPU_RL_RESHARD_BUCKET_MB"] = "1"
    for name in ("cpu", reshard.PATCH_NAME):
        importlib.import_module(PATCHES[name]).PATCH.install()
    for module in (
        "megatron.core.parallel_state",
        "verl.workers.engine_workers",
        "verl.workers.engine.megatron.transformer_impl",
        "verl.workers.rollout.vllm_rollout.utils",
        "verl.workers.rollout.vllm_rollout.vllm_rollout",
    ):
        importlib.import_module(module)


def _sync(rank: int, world: int, case: str, fault: str | None) -> dict:
    from megatron.core import parallel_state as mpu
    from verl.workers import engine_workers
    from verl.workers.engine.megatron import transformer_impl
    from verl.workers.rollout.vllm_rollout import utils as vllm_utils
    from verl.workers.rollout.vllm_rollout import vllm_rollout

    model_shapes, train, infer, stages = CASES[case]
    # Megatron-core lays out its groups; the patch reads them (parallel_info) and checks its own rank order.
    mpu.initialize_model_parallel(
        tensor_model_parallel_size=train.tp,
        pipeline_model_parallel_size=train.pp,
        expert_model_parallel_size=train.ep,
        expert_tensor_parallel_size=train.etp,
    )
    plan = cached_plan(model_shapes, train, infer, 256)
    full = full_weights(plan, seed=5)
    offset = sum(train.stage_sizes(model_shapes.num_layers)[: train.coords(rank)["pp"]])

    class Engine(transformer_impl.MegatronEngine):
        is_param_offload_enabled = False

        def __init__(self):  # what MegatronEngine's constructor would have set
            self.peft_cls, self._qat_enabled = None, False
            self.module = [MegatronModule(megatron_named(plan, rank, full, model_shapes, offset))]
            self.model_config = types.SimpleNamespace(hf_config=hf_config(model_shapes))
            self.tf_config = types.SimpleNamespace(
                num_layers_in_first_pipeline_stage=stages[0], num_layers_in_last_pipeline_stage=stages[1]
            )

    want = vllm_named(plan, rank, full, VLLM_0_23_FUSED)  # vLLM 0.23's names (vllm_fusions checks them)
    params = {
        n: torch.nn.Parameter(
            torch.full(t.transpose(-1, -2).shape if ".experts." in n else t.shape, float("nan"), dtype=t.dtype),
            requires_grad=False,
        )
        for n, t in want.items()
    }
    if fault == "unplanned_parameter":  # a rollout parameter the plan has no value for
        params["model.layers.0.mlp.extra.weight"] = torch.nn.Parameter(torch.zeros(2), requires_grad=False)
    if fault == "renamed_parameter":  # a name the rollout model does not have: its bucket fails on the rollout side
        params["model.layers.1.self_attn.o_proj.renamed"] = params.pop("model.layers.1.self_attn.o_proj.weight")

    class Extension(vllm_utils.vLLMColocateWorkerExtension):
        pass

    ext = object.__new__(Extension)  # vLLM's worker, as verl's __new__ leaves it for a bf16 model
    ext._is_qat_model = ext._is_modelopt_qat = False
    ext.device, ext.local_rank = torch.device("cpu"), rank
    ext.model_runner = types.SimpleNamespace(
        model=VllmModel(params),
        vllm_config=types.SimpleNamespace(
            quant_config=None,
            speculative_config=None,
            model_config=types.SimpleNamespace(dtype=torch.float32, quantization=None),
        ),
    )
    handle = f"ipc:///tmp/npu-rl-reshard-{os.getppid()}-{case}-rank-{rank}.sock"
    ext._get_zmq_handle = lambda: handle

    rollout_cfg = types.SimpleNamespace(
        tensor_model_parallel_size=infer.tp,
        expert_parallel_size=infer.ep,
        free_cache_engine=False,
        checkpoint_engine=types.SimpleNamespace(
            backend="nccl" if fault == "disaggregated" else "naive", update_weights_bucket_megabytes=1
        ),
    )

    class Adapter(vllm_rollout.ServerAdapter):
        def __init__(self):
            self.zmq_handle, self.use_shm, self.config = handle, True, rollout_cfg
            self._has_server, self.replica_rank, self.rollout_rank = False, 0, rank

        async def _execute_method(self, method, non_block=False, kwargs=None):
            # The vLLM worker's side of the sync, as its process would run it.
            call = functools.partial(getattr(ext, method), **(kwargs or {}))

            def run():
                try:
                    return call()
                except BaseException:
                    traceback.print_exc()
                    raise

            return asyncio.get_running_loop().run_in_executor(None, run)

    worker = types.SimpleNamespace(
        config=types.SimpleNamespace(rollout=rollout_cfg),
        rollout=Adapter(),
        actor=types.SimpleNamespace(engine=Engine()),
        layered_summon=False,
        peft_merge=False,
        base_sync_done=False,
        checkpoint_engine=types.SimpleNamespace(send_weights=None),
    )
    try:
        asyncio.run(engine_workers.ActorRolloutRefWorker.update_weights(worker, global_steps=1))
    except Exception as e:  # the fault cases' one line
        return {"error": f"{type(e).__name__}: {e}", "at": traceback.format_exc(limit=-3)}
    bad = [n for n, t in want.items() if not torch.equal(params[n].data.reshape(-1), _as_stored(t, n).reshape(-1))]
    return {"bad": bad, "params": len(want), "base_sync_done": worker.base_sync_done}


def _as_stored(t: torch.Tensor, name: str) -> torch.Tensor:
    return t.transpose(-1, -2).contiguous() if ".experts." in name else t


def vllm_fusions() -> dict[str, list[str]]:
    """The fused parameters of vLLM's own DeepSeek-V2/V3 and Qwen3-MoE models, read from the stacked-parameter
    mappings of their ``load_weights`` (``(fused, part, shard id)``), in the order vLLM stacks the parts."""
    import ast
    import inspect

    from vllm.model_executor.models import deepseek_v2, qwen3_moe

    fusions: dict[str, list[str]] = {}
    for cls in (deepseek_v2.DeepseekV2Model, qwen3_moe.Qwen3MoeModel):
        for node in ast.walk(ast.parse(inspect.getsource(cls.load_weights).lstrip().replace("\n    ", "\n"))):
            if (
                isinstance(node, ast.Tuple)
                and len(node.elts) == 3
                and all(isinstance(e, ast.Constant) for e in node.elts[:2])
            ):
                fused, part = node.elts[0].value, node.elts[1].value
                if isinstance(fused, str) and isinstance(part, str) and part not in fusions.setdefault(fused, []):
                    fusions[fused].append(part)
    return fusions


if __name__ == "__main__":
    _install()
    results: dict = {"vllm_fusions": vllm_fusions()}
    for arg in sys.argv[1:]:
        case, _, fault = arg.partition(":")
        results[arg] = run_ranks(CASES[case][1].world, _sync, case, fault or None, timeout_s=240)
    print(json.dumps(results))
