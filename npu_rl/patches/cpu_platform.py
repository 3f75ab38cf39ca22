"""CPU platform for verl 0.6.1: the real GRPO trainer on CPU processes with gloo (NPU runs never install it).

Each fix is the smallest change past a place where verl assumes an accelerator, applied when its module is
imported: installing the patch imports neither torch nor verl, so a reward worker does not pay for them.

* ``torch.cpu`` lacks the RNG / cache / memory calls verl makes through ``get_torch_device()`` -> added;
  the worker process group is ``"cpu:gloo,cpu:<nccl>"`` -> one gloo backend.
* ``RayResourcePool`` asks Ray for a ``cpu`` resource per worker, which no node has -> each takes one
  ``WORKER_SLOT`` (``NPU``, what every npu-rl node registers for its ``--devices``): workers spread over
  nodes as NPU workers do, and verl's own resource check counts them.
* FSDP1's ``device_id``/``sync_module_states`` and FSDP2's ``CPUOffloadPolicy(pin_memory=True)`` assume an
  accelerator; rollout ``hf`` is unregistered (:mod:`npu_rl.patches.cpu_rollout`); ``topk_reduce_ratio_min_max``
  all-gathers a 0-d tensor into shape-(1,) buffers, which gloo rejects; ``aggressive_empty_cache`` runs a
  full ``gc.collect()`` at three mode switches of every step, with nothing to free on a CPU -> a no-op.
"""

from __future__ import annotations

import functools
from typing import Any

from .guard import FSDP_WORKERS, RAY_BASE, RAY_TRAINER, Patch

PATCH_NAME = "cpu"

# Source fingerprints of the verl code this patch replaces or depends on, as of verl 0.6.1,
# checked when each module is imported (guard.Patch).
FINGERPRINTS = {
    f"{RAY_TRAINER}:ResourcePoolManager.create_resource_pool": "27130303dd094e08",
    f"{RAY_TRAINER}:ResourcePoolManager._check_resource_available": "dbee1ee8aa428613",
    f"{RAY_BASE}:RayResourcePool.get_placement_groups": "82e7609b32721544",
    f"{FSDP_WORKERS}:ActorRolloutRefWorker.__init__": "3864afde1a867752",
    f"{FSDP_WORKERS}:ActorRolloutRefWorker._build_model_optimizer": "b23c5e67dbbc9012",
    f"{FSDP_WORKERS}:ActorRolloutRefWorker._build_rollout": "fc50256b25fbe303",
    "verl.utils.device:get_nccl_backend": "826b15796bda392a",
    "verl.utils.device:get_torch_device": "ac596dd4e91409cc",
    "verl.utils.profiler.performance:topk_reduce_ratio_min_max": "279a580aea136416",
    "verl.workers.rollout.base:get_rollout_class": "16daabb5959456cf",
    "verl.workers.rollout.base:BaseRollout": "43e817692cebd80b",
    "verl.workers.rollout.hf_rollout:HFRollout.generate_sequences": "ecd9a25f52ce5fd6",
    "verl.workers.rollout.hf_rollout:HFRollout._generate_minibatch": "c1c9c6b1559b2355",
    "verl.utils.memory_utils:aggressive_empty_cache": "19959a2d37ae3efe",
}

PATCH = Patch(PATCH_NAME, FINGERPRINTS)


@PATCH.applies_to("torch")
def _extend_torch_cpu(torch) -> None:
    def _mem_get_info(device=None):
        import psutil  # lazy: psutil

        vm = psutil.virtual_memory()
        return vm.available, vm.total

    extras = {
        "get_rng_state": lambda device=None: torch.get_rng_state(),
        "set_rng_state": lambda state, device=None: torch.set_rng_state(state),
        "manual_seed": torch.manual_seed,
        "manual_seed_all": torch.manual_seed,
        "empty_cache": lambda: None,
        "memory_allocated": lambda device=None: 0,
        "max_memory_allocated": lambda device=None: 0,
        "memory_reserved": lambda device=None: 0,
        "max_memory_reserved": lambda device=None: 0,
        "reset_peak_memory_stats": lambda device=None: None,
        "mem_get_info": _mem_get_info,
    }
    for name, fn in extras.items():
        if not hasattr(torch.cpu, name):
            setattr(torch.cpu, name, fn)


@PATCH.wrap("torch.distributed", "init_process_group")
def _single_gloo_backend(original):
    def init_process_group(*args, **kwargs):
        backend = kwargs.get("backend")
        if isinstance(backend, str) and "," in backend:
            # "cpu:gloo,cpu:gloo" names the cpu device twice, which torch rejects.
            kwargs["backend"] = "gloo"
        return original(*args, **kwargs)

    return init_process_group


@PATCH.applies_to("verl.utils.device")
def _patch_device(mod) -> None:
    mod.get_nccl_backend = lambda: "gloo"


# What a CPU worker reserves on its node instead of a device: one of the node's worker slots.
WORKER_SLOT = "NPU"


@PATCH.wrap(RAY_BASE, "RayResourcePool.get_placement_groups")
def _patch_resource_pool(original):
    def get_placement_groups(self, strategy="STRICT_PACK", name=None, device_name="cuda"):
        # verl names the bundle's device resource after trainer.device; "cpu" is no Ray resource.
        return original(
            self, strategy=strategy, name=name, device_name=WORKER_SLOT if device_name == "cpu" else device_name
        )

    return get_placement_groups


@PATCH.applies_to(FSDP_WORKERS)
def _patch_fsdp_workers(mod) -> None:
    base_fsdp: Any = mod.FSDP  # torch's FSDP class, as verl's fsdp_workers imports it

    class CPUFSDP(base_fsdp):
        """FSDP1 without the accelerator-only arguments."""

        def __init__(self, module, *args, **kwargs):
            import torch  # lazy: torch

            # An explicit CPU device: without one FSDP looks for an accelerator.
            kwargs["device_id"] = torch.device("cpu")
            # Every rank loads the same weights from disk (no meta-device init on
            # CPU), so there is nothing to broadcast.
            kwargs["sync_module_states"] = False
            # Parameters already live in host memory; CPU offload would only pin them.
            kwargs["cpu_offload"] = None
            super().__init__(module, *args, **kwargs)

    CPUFSDP.__name__ = CPUFSDP.__qualname__ = "FullyShardedDataParallel"
    mod.FSDP = CPUFSDP

    policy = mod.CPUOffloadPolicy
    if policy is not None:
        mod.CPUOffloadPolicy = functools.partial(policy, pin_memory=False)

    # verl decides meta-device init from tie_word_embeddings; on CPU every rank
    # materialises real weights so no broadcast is needed.
    original_ctx = mod.get_init_weight_context_manager

    def get_init_weight_context_manager(use_meta_tensor=True, mesh=None):
        return original_ctx(use_meta_tensor=False, mesh=mesh)

    mod.get_init_weight_context_manager = get_init_weight_context_manager

    # _build_rollout seeds the rollout RNG (dp rank + 1000) and then calls trainer_mode(),
    # which overwrites that state with the unseeded training RNG, so HF sampling differed
    # from run to run. Re-seed it afterwards, as verl intends (vLLM samples with its own seed).
    worker = mod.ActorRolloutRefWorker
    original_build_rollout = worker._build_rollout

    @functools.wraps(original_build_rollout)
    def _build_rollout(self, *args, **kwargs):
        import torch  # lazy: torch

        result = original_build_rollout(self, *args, **kwargs)
        training_state = torch.get_rng_state()
        torch.manual_seed(self.rank + 1000)
        self.gen_random_states = torch.get_rng_state()
        torch.set_rng_state(training_state)
        return result

    worker._build_rollout = _build_rollout


@PATCH.applies_to("verl.utils.profiler.performance")
def _patch_performance(mod) -> None:
    import torch  # lazy: torch
    import torch.distributed as dist  # lazy: torch

    def topk_reduce_ratio_min_max(timing: float, k: int = 10):
        if not dist.is_initialized():
            return -1.0, -1.0, -1.0
        world = dist.get_world_size()
        mine = torch.tensor([timing], dtype=torch.float32)
        gathered = [torch.zeros(1, dtype=torch.float32) for _ in range(world)]
        dist.all_gather(gathered, mine)
        stack = torch.cat(gathered)
        threshold = torch.quantile(stack, 1 - k / 100)
        return (stack > threshold).float().mean().item(), stack.min().item(), stack.max().item()

    mod.topk_reduce_ratio_min_max = topk_reduce_ratio_min_max


@PATCH.applies_to("verl.utils.memory_utils")
def _patch_memory_utils(mod) -> None:
    # verl 0.6.1 memory_utils.py:31-74 releases a device's cached blocks: gc.collect(), empty_cache() and
    # synchronize(), again while a round frees 1 GB or more, if get_torch_device().is_available(). With
    # torch.cpu as the device (above) that holds, and with no cache to release all it does is one full
    # collection of the worker's large heap, at rollout_mode's start and end and at trainer_mode
    # (fsdp_workers.py:653, 724, 744). Measured with py-spy on the tiny recipe: 55% of a worker's time,
    # 1.4 s of a 2.7 s step. Python's own collector still runs; refcounting frees the synced weights as
    # before. Patched where it is defined, so every module that imports it (the sharding managers too)
    # gets this one.
    def aggressive_empty_cache(force_sync: bool = True, max_retries: int = 3) -> None:
        return None

    mod.aggressive_empty_cache = aggressive_empty_cache


@PATCH.applies_to("verl.workers.rollout.base", also=("verl.workers.rollout.hf_rollout",))
def _patch_rollout_registry(mod) -> None:
    mod._ROLLOUT_REGISTRY[("hf", "sync")] = "npu_rl.patches.cpu_rollout.CPURollout"
