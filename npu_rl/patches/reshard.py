"""Weight sync through the alltoallv reshard for verl 0.6.1's megatron strategy (NPU).

verl's ``ActorRolloutRefWorker.rollout_mode`` turns the Megatron shards into full HF
tensors with ``per_tensor_generator`` (PP broadcast + EP/TP all_gather on every rank)
and feeds them to ``rollout.update_weights``. This patch keeps that method and swaps
the two ends: inside ``rollout_mode`` the generator returns a :class:`ReshardRequest`
(this rank's training shards and a cached plan), and ``update_weights`` executes it
straight into the vLLM model's parameters. Installed only when a recipe sets
``reshard.enabled`` (the launcher adds ``reshard`` to ``NPU_RL_PATCHES``); the schema
allows that only on NPU platforms.
"""

from __future__ import annotations

import contextvars
from typing import Any

from ..reshard.layout import InferLayout, TrainLayout
from .guard import MEGATRON_WORKERS, VERL_0_6_1, VLLM_ROLLOUT, Patch, PatchVersionError
from .vllm_dp import expert_parallel_size

PATCH_NAME = "reshard"

# Source fingerprints (npu_rl.patches.guard) of what the wrappers rely on, in verl 0.6.1:
# rollout_mode passes per_tensor_generator's result to rollout.update_weights when no
# mbridge is used, and update_weights loads into the engine's model.
FINGERPRINTS = {
    f"{MEGATRON_WORKERS}:ActorRolloutRefWorker.rollout_mode": "2ab43d19621d8ae1",
    "verl.utils.megatron_utils:per_tensor_generator": "b63b338ac4b31f89",
    f"{VLLM_ROLLOUT}:vLLMRollout.update_weights": "b185a260121c953b",
    f"{VLLM_ROLLOUT}:vLLMAsyncRollout.update_weights": "c2c5f5f23d8853ce",
}
PATCH = Patch(PATCH_NAME, {VERL_0_6_1: FINGERPRINTS})

_worker: contextvars.ContextVar[Any] = contextvars.ContextVar("npu_rl_reshard_worker", default=None)


# --- training side -------------------------------------------------------------------------------


def parallel_info() -> dict[str, int]:
    """This rank's Megatron-core layout (a separate function so tests can stand in for mcore)."""
    import torch.distributed as dist  # lazy: torch
    from megatron.core import parallel_state as mpu  # lazy: megatron

    if mpu.get_expert_tensor_parallel_world_size() != mpu.get_tensor_model_parallel_world_size():
        raise PatchVersionError("reshard assumes expert TP == TP (Megatron-core's default)")
    return {
        "rank": dist.get_rank(),
        "world": dist.get_world_size(),
        "tp": mpu.get_tensor_model_parallel_world_size(),
        "pp": mpu.get_pipeline_model_parallel_world_size(),
        "ep": mpu.get_expert_model_parallel_world_size(),
        "tp_rank": mpu.get_tensor_model_parallel_rank(),
        "pp_rank": mpu.get_pipeline_model_parallel_rank(),
        "ep_rank": mpu.get_expert_model_parallel_rank(),
    }


def _stage_sizes(num_layers: int, pp: int, tf_config: Any) -> tuple[int, ...] | None:
    first = getattr(tf_config, "num_layers_in_first_pipeline_stage", None)
    last = getattr(tf_config, "num_layers_in_last_pipeline_stage", None)
    if first is None and last is None:
        return None
    first = first if first is not None else 0
    last = last if last is not None else 0
    middle = pp - (first > 0) - (last > 0)
    per = (num_layers - first - last) // max(middle, 1)
    sizes = [per] * pp
    if first:
        sizes[0] = first
    if last:
        sizes[-1] = last
    return tuple(sizes)


def build_request(worker: Any, actor_module: list, hf_config: Any, tf_config: Any):
    from ..reshard.verl_sync import (  # lazy: torch
        ReshardRequest,
        bucket_bytes_from_env,
        cached_plan,
        megatron_shards,
        shapes_from_hf_config,
    )

    info = parallel_info()
    if len(actor_module) != 1:
        raise PatchVersionError("reshard does not support virtual pipeline stages")
    shapes = shapes_from_hf_config(hf_config)
    train = TrainLayout(
        info["world"],
        tp=info["tp"],
        pp=info["pp"],
        ep=info["ep"],
        layers_per_stage=_stage_sizes(shapes.num_layers, info["pp"], tf_config),
    )
    mine = train.coords(info["rank"])
    if (mine["tp"], mine["pp"], mine["ep"]) != (info["tp_rank"], info["pp_rank"], info["ep_rank"]):
        raise PatchVersionError(f"reshard: Megatron's rank order differs from the planner's ({mine} vs {info})")
    rollout = worker.config.rollout
    # With the vllm_dp patch the rollout EP is TP x VLLM_DP_SIZE (verl's own expert_parallel_size stays 1).
    infer = InferLayout(info["world"], tp=rollout.tensor_model_parallel_size, ep=expert_parallel_size(rollout))
    plan = cached_plan(shapes, train, infer, bucket_bytes_from_env())

    offset = sum(train.stage_sizes(shapes.num_layers)[: info["pp_rank"]])
    module = actor_module[0]
    while hasattr(module, "module"):  # DDP / Float16Module wrappers
        module = module.module
    named = dict(module.named_parameters())
    # router.expert_bias is a buffer: in state_dict, not in named_parameters.
    for k, v in module.state_dict().items():
        if k not in named and "_extra_state" not in k:
            named[k] = v

    def global_name(name: str) -> str:
        parts = name.split(".")
        if len(parts) > 2 and parts[0] == "decoder" and parts[1] == "layers":
            parts[2] = str(int(parts[2]) + offset)
        return ".".join(parts)

    shards = megatron_shards((global_name(n), t) for n, t in named.items())
    return ReshardRequest(plan=plan, rank=info["rank"], train_shards=shards)


@PATCH.applies_to(MEGATRON_WORKERS, also=("verl.utils.megatron_utils",))
def patch_megatron_workers(module: Any) -> None:
    cls = module.ActorRolloutRefWorker
    original_mode = cls.rollout_mode
    original_gen = module.per_tensor_generator

    async def rollout_mode(self, *args, **kwargs):
        token = _worker.set(self)
        try:
            return await original_mode(self, *args, **kwargs)
        finally:
            _worker.reset(token)

    def per_tensor_generator(actor_module, model_config, weight_converter, transformer_config, *args, **kwargs):
        worker = _worker.get()
        if worker is None:  # any other caller keeps verl's gather-everything generator
            return original_gen(actor_module, model_config, weight_converter, transformer_config, *args, **kwargs)
        return build_request(worker, actor_module, model_config, transformer_config)

    cls.rollout_mode = rollout_mode
    module.per_tensor_generator = per_tensor_generator


# --- rollout side --------------------------------------------------------------------------------


def rollout_model(rollout: Any) -> Any:
    """The vLLM model object behind a verl rollout (sync engine or async worker extension)."""
    engine = rollout.inference_engine
    if hasattr(engine, "worker"):
        return engine.worker.model_runner.model
    return engine.llm_engine.model_executor.driver_worker.worker.model_runner.model


@PATCH.applies_to(VLLM_ROLLOUT)
def patch_vllm_rollout(module: Any) -> None:
    from ..reshard.verl_sync import ReshardRequest  # lazy: torch

    for cls in (module.vLLMRollout, module.vLLMAsyncRollout):
        original = cls.update_weights

        async def update_weights(self, weights, _original=original, **kwargs):
            if isinstance(weights, ReshardRequest):
                weights.apply(rollout_model(self).named_parameters())
                return None
            return await _original(self, weights, **kwargs)

        cls.update_weights = update_weights
