"""What the ``cpu`` patch's two parts share: its verl 0.6.1 part (npu_rl.patches.cpu_platform) and its
verl 0.9.0 part (npu_rl.patches.cpu_plugin), each importing it, not the other."""

from __future__ import annotations

from typing import Any

# What a CPU worker reserves on its node instead of a device: one of the worker slots every npu-rl node
# registers for its --devices (npu_rl.cluster.raynode).
WORKER_SLOT = "NPU"

# The KV cache of each vLLM engine on CPU, in GiB (VLLM_CPU_KVCACHE_SPACE; 0 means 4 GiB, vLLM 0.9.1
# vllm/platforms/cpu.py:130-140). The tiny recipe's 64 sequences of 224 tokens need a few MB; two
# engines of 4 GiB each would take a third of a 24 GiB host.
KV_CACHE_GIB = "1"


def cpu_fsdp_class(base_fsdp: Any) -> Any:
    """torch's FSDP1 class (as a verl module imports it) without the accelerator-only arguments."""

    class CPUFSDP(base_fsdp):
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
    return CPUFSDP
