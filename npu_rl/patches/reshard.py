"""Weight sync through the alltoallv reshard for verl's megatron strategy (NPU), on verl 0.6.1 and 0.9.0.

verl's ``ActorRolloutRefWorker.rollout_mode`` turns the Megatron shards into full HF
tensors with ``per_tensor_generator`` (PP broadcast + EP/TP all_gather on every rank)
and feeds them to ``rollout.update_weights``. This patch keeps that method and swaps
the two ends: inside ``rollout_mode`` the generator returns a :class:`ReshardRequest`
(this rank's training shards and a cached plan), and ``update_weights`` executes it
straight into the vLLM model's parameters. Installed only when a recipe sets
``reshard.enabled`` (the launcher adds ``reshard`` to ``NPU_RL_PATCHES``); the schema
allows that only on NPU platforms.

verl 0.9.0 runs vLLM as a server in processes of its own: the engine worker's ``update_weights`` asks its
megatron engine for ``get_per_tensor_param`` (always the bridge's full-tensor export there) and streams
what it yields to the paired vLLM worker (training rank r to the rollout rank r % replica size, over ZMQ and
CUDA IPC or shared memory), where ``vLLMColocateWorkerExtension._update_weights`` loads each bucket with
``model.load_weights``. On that release the patch replaces the export inside ``update_weights``: the
alltoallv runs among the training ranks into fresh tensors of this rank's rollout shards, each handed to verl's
own transport as soon as it is whole (0.6.1 wrote into vLLM's parameters in place); the rollout side copies
them into the parameters of the same names and checks that every parameter got a value. An error on the
rollout side is raised once the transport's last bucket is acknowledged: verl's sender waits on each
bucket's acknowledgement with no timeout (``bucketed_weight_transfer.py:131-133, 161-162`` at v0.9.0), so a
receiver that raised mid-sync would leave the trainer waiting until the watchdog ended the run.
"""

from __future__ import annotations

import contextvars
import sys
from typing import Any

from ..reshard.layout import InferLayout, ReshardLayoutError, TrainLayout
from .guard import MEGATRON_WORKERS, VERL_0_6_1, VERL_0_9_0, VLLM_ROLLOUT, Patch, PatchVersionError
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
# verl 0.9.0: the engine worker's sync, its megatron engine's export, and the vLLM worker's loading of each
# bucket (and the receive loop around it).
ENGINE_WORKERS = "verl.workers.engine_workers"
MEGATRON_ENGINE = "verl.workers.engine.megatron.transformer_impl"
VLLM_EXTENSION = "verl.workers.rollout.vllm_rollout.utils"
FINGERPRINTS_0_9_0 = {
    f"{ENGINE_WORKERS}:ActorRolloutRefWorker.update_weights": "e46e1b5427467d57",
    f"{MEGATRON_ENGINE}:MegatronEngine.get_per_tensor_param": "bd1dd0fd5d852e62",
    f"{VLLM_EXTENSION}:vLLMColocateWorkerExtension.update_weights_from_ipc": "5145af889f2cb217",
    f"{VLLM_EXTENSION}:vLLMColocateWorkerExtension._update_weights": "8ba99b166681a4aa",
}
V061, V090 = (VERL_0_6_1,), (VERL_0_9_0,)
PATCH = Patch(PATCH_NAME, {VERL_0_6_1: FINGERPRINTS, VERL_0_9_0: FINGERPRINTS_0_9_0})

_worker: contextvars.ContextVar[Any] = contextvars.ContextVar("npu_rl_reshard_worker", default=None)


# --- training side -------------------------------------------------------------------------------


def parallel_info() -> dict[str, int]:
    """This rank's Megatron-core layout (a separate function so tests can stand in for mcore)."""
    import torch.distributed as dist  # lazy: torch
    from megatron.core import parallel_state as mpu  # lazy: megatron

    return {
        "rank": dist.get_rank(),
        "world": dist.get_world_size(),
        "tp": mpu.get_tensor_model_parallel_world_size(),
        "pp": mpu.get_pipeline_model_parallel_world_size(),
        "ep": mpu.get_expert_model_parallel_world_size(),
        "etp": mpu.get_expert_tensor_parallel_world_size(),
        "tp_rank": mpu.get_tensor_model_parallel_rank(),
        "pp_rank": mpu.get_pipeline_model_parallel_rank(),
        "ep_rank": mpu.get_expert_model_parallel_rank(),
        "etp_rank": mpu.get_expert_tensor_parallel_rank(),
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
        etp=info["etp"],
        layers_per_stage=_stage_sizes(shapes.num_layers, info["pp"], tf_config),
    )
    mine = train.coords(info["rank"])
    axes = ("tp", "pp", "ep", "etp")
    if tuple(mine[a] for a in axes) != tuple(info[f"{a}_rank"] for a in axes):
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

    shards = megatron_shards(((global_name(n), t) for n, t in named.items()), shapes)
    return ReshardRequest(plan=plan, rank=info["rank"], train_shards=shards)


@PATCH.applies_to(MEGATRON_WORKERS, also=("verl.utils.megatron_utils",), releases=V061)
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


@PATCH.applies_to(VLLM_ROLLOUT, releases=V061)
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


# --- verl 0.9.0 ----------------------------------------------------------------------------------


@PATCH.wrap(ENGINE_WORKERS, "ActorRolloutRefWorker.update_weights", releases=V090)
def engine_worker_sync(original):
    """Marks the engine worker's weight sync, so that its engine's export (and no other caller's) reshards."""

    async def update_weights(self, global_steps=None, mode="auto"):
        # The plan pairs training rank r with the rollout rank on the same device: only verl's colocated
        # ("naive") sync is that; a checkpoint engine sends to rollout replicas elsewhere (engine_workers.py:
        # 747-758 at v0.9.0).
        backend = mode if mode != "auto" else self.config.rollout.checkpoint_engine.backend
        if getattr(getattr(self.config.rollout, "mtp", None), "enable_rollout", False):
            # verl loads the same full weights into vLLM's MTP drafter too; the shards are the main model's only.
            raise PatchVersionError("reshard does not sync an MTP drafter: turn rollout.mtp or the reshard off")
        if backend != "naive":
            raise PatchVersionError(
                "reshard syncs colocated training and rollout only (checkpoint_engine.backend naive), "
                f"not {backend!r}: set reshard.enabled false for a disaggregated rollout"
            )
        token = _worker.set(self)
        try:
            return await original(self, global_steps=global_steps, mode=mode)
        finally:
            _worker.reset(token)

    return update_weights


@PATCH.wrap(MEGATRON_ENGINE, "MegatronEngine.get_per_tensor_param", releases=V090)
def engine_reshard_export(original):
    """Inside the sync: this rank's rollout shards by the alltoallv plan instead of the bridge's full tensors."""

    def get_per_tensor_param(self, *args, **kwargs):
        worker = _worker.get()
        if worker is None:
            return original(self, *args, **kwargs)
        if self.peft_cls is not None or self._qat_enabled:
            raise PatchVersionError("reshard maps full weights only: turn it off for LoRA or QAT runs")
        # Offloaded parameters come back first, as verl's own export does.
        sys.modules[MEGATRON_ENGINE].load_megatron_model_to_gpu(self.module, load_grad=False)
        request = build_request(worker, self.module, self.model_config.hf_config, self.tf_config)
        device = next(iter(request.train_shards.values()))
        device = (device[0] if isinstance(device, list) else device).device
        return request.stream(device), None

    return get_per_tensor_param


@PATCH.wrap(VLLM_EXTENSION, "vLLMColocateWorkerExtension.update_weights_from_ipc", releases=V090)
def rollout_receive(original):
    """One sync's receive loop: afterwards every parameter of the rollout model has had a value, and the first
    error a bucket met is raised, after the sender had every acknowledgement it waits for."""

    def update_weights_from_ipc(self, *args, **kwargs):
        from ..reshard.verl_sync import require_all_written  # lazy: torch

        self._npu_rl_written, self._npu_rl_error = set(), None
        out = original(self, *args, **kwargs)
        if self._npu_rl_error is not None:
            raise self._npu_rl_error
        require_all_written(self.model_runner.model.named_parameters(), self._npu_rl_written)
        return out

    return update_weights_from_ipc


@PATCH.wrap(VLLM_EXTENSION, "vLLMColocateWorkerExtension._update_weights", releases=V090)
def rollout_write(original):
    """A received bucket holds rollout shards: copied into the parameters, not resharded by ``load_weights``."""

    def _update_weights(self, weights, peft_config, base_sync_done):
        from ..reshard.verl_sync import write_shards  # lazy: torch

        if peft_config:
            return original(self, weights, peft_config, base_sync_done)
        if self._npu_rl_error is not None:
            return None  # the sync has failed: the rest is acknowledged unread
        try:
            if self._use_mtp_drafter_weight_sync():
                # verl loads the same full weights into the MTP drafter too; these shards are the main model's.
                raise PatchVersionError("reshard does not sync an MTP drafter: turn rollout.mtp or the reshard off")
            if self.model_runner.vllm_config.quant_config is not None:
                # A copy into quantized parameters would cast silently; verl requantizes through load_weights.
                raise PatchVersionError("reshard syncs unquantized rollouts only: turn quantization or the reshard off")
            self._npu_rl_written |= write_shards(self.model_runner.model.named_parameters(), weights)
        except (PatchVersionError, ReshardLayoutError) as err:
            # Without its frames: they hold this bucket's tensors, views of the transport's shared memory,
            # which the receiver must close once the last bucket is in.
            self._npu_rl_error = err.with_traceback(None)
        return None

    return _update_weights
