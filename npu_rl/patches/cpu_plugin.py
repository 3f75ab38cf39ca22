"""The ``cpu`` patch on verl 0.9.0: a CPU platform for verl's platform plugin layer, and what it cannot cover.

verl 0.9 asks one platform object for the device module, the process group's backend, the Ray resource of a
worker and the rollout engines' environment (verl v0.9.0 verl/utils/device.py delegates every call to
``get_platform()``; the platform is ``VERL_PLATFORM``'s when set, plugin/platform/platform_manager.py:92-95,
else detected, falling back to nvidia at :113-117). So most of what the 0.6.1 patch changed in place is one
registered platform here: :func:`register` adds ``PlatformCPU`` to verl's ``PlatformRegistry`` when the
registry's module is imported, and the launcher sets ``VERL_PLATFORM=cpu`` in the driver and every Ray worker
(npu_rl.launcher.overrides.run_env). What remains is patched where it is:

* torch rejects the worker group's ``"cpu:gloo,cpu:gloo"`` (verl/utils/distributed.py:88): one gloo backend
  (the torch-level wrap in npu_rl.patches.cpu_platform, shared by both releases);
* the FSDP engine builds FSDP1 with ``device_id`` and ``sync_module_states=True`` and the reference with
  ``CPUOffload``, FSDP2 with ``CPUOffloadPolicy(pin_memory=True)``, and meta-device weights on ranks > 0
  (workers/engine/fsdp/transformer_impl.py:247, :414-430, :443), all for an accelerator;
* the FSDP engines are registered for ``cuda`` and ``npu`` only (transformer_impl.py:1115, :1562), so the
  engine lookup fails for ``cpu`` (workers/engine/base.py:397-427): registered for ``cpu`` too;
* ``aggressive_empty_cache`` runs a full ``gc.collect()`` at model init and twice per weight sync
  (engine_workers.py:685, :761, :797), with no device cache to free: the no-op of the 0.6.1 patch;
* the engine's train and eval contexts move the model to the device on entry and back on exit
  (workers/engine/base.py ``BaseEngineCtx._context_switch``); with the device the host, ``FSDPEngine.to``
  moves nothing but runs a full ``gc.collect()`` each way (transformer_impl.py:826-834), twice a step: 80% of
  the tiny SFT recipe's step time. The weights and the optimizer never leave host memory on CPU, so it moves
  nothing and collects nothing;
* vLLM 0.23's CPU backend packs each linear layer's weight for oneDNN and drops the plain one
  (vllm/model_executor/layers/utils.py ``dispatch_cpu_unquantized_gemm``, ``remove_weight=True``), so verl's
  weight sync into the rollout server finds nowhere to land ("Attempted to load weight (64, 64) into
  parameter (0)"): the layers keep their plain weights and multiply with ``F.linear``.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Any

from . import verl_platforms
from .cpu_common import KV_CACHE_GIB, WORKER_SLOT, cpu_fsdp_class
from .guard import VERL_0_9_0, Patch

PLATFORM_MANAGER = "verl.plugin.platform.platform_manager"
PLATFORM_BASE = "verl.plugin.platform.platform_base"
FSDP_ENGINE = "verl.workers.engine.fsdp.transformer_impl"
ENGINE_BASE = "verl.workers.engine.base"
VLLM_LAYER_UTILS = "vllm.model_executor.layers.utils"

# The platform's name, for VERL_PLATFORM (and its device name: verl's trainer.device).
PLATFORM = verl_platforms.CPU

# Source fingerprints at verl 0.9.0 (and the line's vLLM 0.23.0), checked as each module is imported.
FINGERPRINTS = {
    f"{PLATFORM_MANAGER}:_detect_platform_name": "d6bc25b1f9358ee6",
    f"{PLATFORM_MANAGER}:PlatformRegistry.register": "dbd279b42396aa28",
    f"{PLATFORM_BASE}:PlatformBase": "509afde7ce222670",
    f"{FSDP_ENGINE}:FSDPEngine._build_module": "2167e48c755ac1ae",
    f"{FSDP_ENGINE}:FSDPEngine._build_fsdp_module": "980b7d8b72c18b36",
    f"{FSDP_ENGINE}:FSDPEngine.to": "3a06781c21d0498f",
    f"{ENGINE_BASE}:BaseEngineCtx._context_switch": "6889b4ff0b200fda",
    f"{ENGINE_BASE}:EngineRegistry.register": "c28412e85d8b9781",
    f"{ENGINE_BASE}:EngineRegistry.get_engine_cls": "802aeb70f04dd67e",
    "verl.utils.memory_utils:aggressive_empty_cache": "19959a2d37ae3efe",
    "verl.utils.distributed:initialize_global_process_group_ray": "e9ec517a0089c3c5",
    f"{VLLM_LAYER_UTILS}:dispatch_cpu_unquantized_gemm": "e74afa7f10961e2a",
}

RELEASES = (VERL_0_9_0,)


class _CPUDeviceModule:
    """``torch.cpu`` with the calls verl makes on a device module (RNG, memory, cache), where a CPU has
    nothing to report or free."""

    def __getattr__(self, name: str) -> Any:
        import torch  # lazy: torch

        return getattr(torch.cpu, name)

    @staticmethod
    def manual_seed(seed: int) -> None:
        import torch  # lazy: torch

        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def get_rng_state(device: Any = None) -> Any:
        import torch  # lazy: torch

        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: Any, device: Any = None) -> None:
        import torch  # lazy: torch

        torch.set_rng_state(state)

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        import psutil  # lazy: psutil

        vm = psutil.virtual_memory()
        return vm.available, vm.total

    def empty_cache(self) -> None:
        return None

    def memory_allocated(self, device: Any = None) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        return None

    def is_available(self) -> bool:
        return True

    def get_device_name(self, device: Any = None) -> str:
        return PLATFORM

    def device_count(self) -> int:
        return 1

    def current_device(self) -> int:
        return 0

    def set_device(self, device: Any) -> None:
        return None

    def synchronize(self, device: Any = None) -> None:
        return None


class _CPUIndex(str):
    """The current device as verl uses it: ``tensor.to(x)`` takes ``"cpu"`` whole, while ``f"{name}:{x}"``
    (verl formats ``get_device_name()`` with ``get_device_id()``) must read ``cpu:0``."""

    def __format__(self, spec: str) -> str:
        return "0"


def platform_class(base: type) -> type:
    """``PlatformCPU``, a subclass of verl's ``PlatformBase`` (handed in: its module is verl's)."""

    class PlatformCPU(base):  # type: ignore[misc, valid-type]
        device_name = PLATFORM
        vendor_name = PLATFORM
        device_module = _CPUDeviceModule()

        def is_available(self) -> bool:
            return True

        def current_device(self) -> Any:
            return _CPUIndex(PLATFORM)

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            self.device_module.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            self.device_module.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None  # no caching allocator to configure (vllm_async_server.py:263-266)

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            # No device to hide from a process: a name nothing sets.
            return "NPU_RL_CPU_VISIBLE_DEVICES"

        @contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return WORKER_SLOT

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            # The weight sync goes through shared memory instead of CUDA IPC (bucketed_weight_transfer.py).
            return False

        def rollout_env_vars(self) -> dict[str, str]:
            import os  # the run's settings win over these defaults

            # vLLM's default "auto" pins each engine's OpenMP threads to a NUMA node and migrates its
            # memory there, which a container without CAP_SYS_NICE refuses: the engine shares the cores.
            return {
                "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB),
                "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
            }

        def cudart(self) -> Any:
            return None

    return PlatformCPU


def register(patch: Patch) -> None:
    """Add the verl 0.9.0 hooks to the ``cpu`` patch."""

    @patch.applies_to(PLATFORM_MANAGER, also=(PLATFORM_BASE,), releases=RELEASES)
    def _register_cpu_platform(mod) -> None:
        from verl.plugin.platform.platform_base import PlatformBase  # lazy: verl

        mod.PlatformRegistry.register(platform=PLATFORM)(platform_class(PlatformBase))

    @patch.applies_to(FSDP_ENGINE, also=(ENGINE_BASE,), releases=RELEASES)
    def _cpu_fsdp_engine(mod) -> None:
        mod.FSDP = cpu_fsdp_class(mod.FSDP)
        if mod.CPUOffloadPolicy is not None:
            mod.CPUOffloadPolicy = functools.partial(mod.CPUOffloadPolicy, pin_memory=False)
        original_ctx = mod.get_init_weight_context_manager

        def get_init_weight_context_manager(use_meta_tensor=True, mesh=None):
            # Every rank loads real weights (nothing is broadcast: sync_module_states is off).
            return original_ctx(use_meta_tensor=False, mesh=mesh)

        mod.get_init_weight_context_manager = get_init_weight_context_manager

        def to(self, device: str, model: bool = True, optimizer: bool = True, grad: bool = True) -> None:
            return None  # host memory is the device's: nothing to move, and no gc.collect() each way

        mod.FSDPEngine.to = functools.wraps(mod.FSDPEngine.to)(to)
        for engine, model_type in (
            (mod.FSDPEngineWithLMHead, "language_model"),
            (mod.FSDPEngineWithValueHead, "value_model"),
        ):
            mod.EngineRegistry.register(model_type=model_type, backend=["fsdp", "fsdp2"], device=PLATFORM)(engine)

    @patch.applies_to(VLLM_LAYER_UTILS, releases=RELEASES)
    def _keep_plain_linear_weights(mod) -> None:
        import torch  # lazy: torch

        def dispatch_cpu_unquantized_gemm(layer, remove_weight: bool) -> None:
            layer.cpu_linear = torch.nn.functional.linear

        # linear.py imports it from this module when it packs a layer (linear.py:213): the new one.
        mod.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm
