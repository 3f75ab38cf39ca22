"""The lines of a healthy run that npu-rl keeps off the terminal (they stay in ``console.log``), each with
why a user can do nothing about it. A warning not listed here reaches the terminal once.

Add an entry only with its reason; an entry hides every line it matches, in every run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .lines import is_exception, read


@dataclass(frozen=True)
class Noise:
    pattern: str  # a regular expression searched in the line's text
    reason: str

    def matches(self, text: str) -> bool:
        return re.search(self.pattern, text) is not None


NOISE: tuple[Noise, ...] = (
    Noise(
        r"Failed to detect NPU type|No module named 'acl'",
        "Ray asks AscendCL for the NPU type when a node has NPU resources (ray 2.60 "
        "ray/_private/accelerators/npu.py 77-82, logger.exception); CPU hosts register worker slots as NPU without "
        "CANN, and the type is never used",
    ),
    Noise(
        r"Apex (is|are) not installed",
        "Megatron-core's import-time notice; on NPU MindSpeed replaces these kernels, on CPU the fallbacks run",
    ),
    Noise(r"pynvml package is deprecated", "torch.cuda imports pynvml; there is no NVIDIA GPU on these hosts"),
    Noise(
        r"CPU Autocast only supports|In CPU autocast, but the target dtype is not supported",
        "the CPU platform trains in float32 on purpose (npu_rl.patches.cpu_platform); verl's autocast is a no-op",
    ),
    Noise(
        r"FSDP\.state_dict_type\(\) and FSDP\.set_state_dict_type\(\) are being deprecated",
        "verl's own FSDP checkpoint code (fsdp_workers.py) calls it; nothing in a recipe changes it",
    ),
    Noise(
        r"FSDP is switching to use `NO_SHARD` instead of ShardingStrategy\.FULL_SHARD since the world size is 1",
        "one rank has nothing to shard with: a one-device run (the tiny SFT recipe) is whole on its rank",
    ),
    Noise(r"Torch profiler tool config is not fully supported", "verl's default profiler section; profiling is off"),
    Noise(r"Disabled critic as algorithm\.adv_estimator != gae", "GRPO has no critic by design"),
    Noise(r"'set_vital' is deprecated", "torchdata inside verl's dataloader"),
    Noise(
        r"`generation_config` default values have been modified",
        "transformers fills the tiny model's pad/bos/eos ids from its config, which is what the rollout wants",
    ),
    Noise(
        r"NCCL_CUMEM_ENABLE is set to 0, skipping override",
        "verl sets it for every worker (trainer/constants_ppo.py, against weight-sync hangs); vLLM notes that it "
        "keeps it (vllm/env_override.py), on hosts with no NCCL at all",
    ),
    Noise(
        r"Methods determine_num_available_blocks,device_config,get_cache_block_size_bytes,initialize_cache "
        r"not implemented",
        "vLLM's V0 executor interface, which its V1 CPU worker does not have and verl's rollout never calls",
    ),
    Noise(r"Pin memory is not supported on CPU", "vLLM's CPU platform saying so once per engine; nothing is pinned"),
    # verl 0.9 with vLLM 0.23 (the cann9.1-verl0.9 line), each once per process of a run:
    Noise(
        r"(torchtitan|veomni|automodel) engine is not available",
        "verl 0.9's optional training engines (verl/workers/engine/__init__.py); npu-rl trains with FSDP or Megatron",
    ),
    Noise(
        r"Triton is installed, but doesn't include CPU backend",
        "the CPU stand-in's torch is PyPI's CUDA build, which brings triton; vLLM's CPU backend does not use it",
    ),
    Noise(
        r"IPC is not supported on your devices\. Falling back to shared memory",
        "the cpu patch's platform says so on purpose (is_ipc_supported False): the weight sync goes through /dev/shm",
    ),
    Noise(
        r"target_num_threads \d+ should not exceed total physical CPU cores",
        "TransferQueue caps its own threads at the host's cores, and says so in every process it starts",
    ),
    Noise(
        r"(libtcmalloc|libiomp) is not found in LD_PRELOAD",
        "vLLM's CPU backend's speed hint; the CPU path stands in for NPU runs, where it does not apply",
    ),
    Noise(
        r"Unknown vLLM environment variable detected: VLLM_USE_V1",
        "the recipes set VLLM_USE_V1=1 for vLLM 0.9.1 (the seeds' line); vLLM 0.23 has only the V1 engine",
    ),
    Noise(
        r"Enforce eager set, disabling torch\.compile|Inductor compilation was disabled by user settings",
        "on CPU the rollout runs eager on purpose (npu_rl.launcher.overrides: no graphs to capture)",
    ),
    Noise(
        r"Default vLLM sampling parameters have been overridden by the model's `generation_config\.json`",
        "verl sends every request's own sampling parameters (the recipe's temperature, top_p, length)",
    ),
    Noise(
        r"LoRA dynamic loading & unloading is enabled in the API server",
        "verl sets VLLM_ALLOW_RUNTIME_LORA_UPDATING for its LoRA weight sync (verl/trainer/constants_ppo.py:78); the "
        "server answers only the run's own agent loop",
    ),
    Noise(
        r"Passing raw prompts to InputProcessor is deprecated",
        "how verl 0.9's vLLM server hands vLLM 0.23 its token prompts; nothing in a recipe changes it",
    ),
)


def hidden(text: str) -> Noise | None:
    """The entry that hides this line, if any."""
    for noise in NOISE:
        if noise.matches(text):
            return noise
    return None


def quiet_warnings() -> None:
    """In npu-rl's own process, Python warnings of the listed kinds are not printed (what verl and torch
    emit on import there reaches the terminal directly, not through a run's stream)."""
    import warnings

    for noise in NOISE:
        warnings.filterwarnings("ignore", message=f".*(?:{noise.pattern})")


class Tracebacks:
    """Drops the listed lines from a stream, and a whole traceback whose exception is listed (Ray logs
    its NPU detection failure with one); any other traceback passes whole."""

    _START = "Traceback (most recent call last):"

    def __init__(self, longest: int = 200):
        self.held: list[str] = []
        self.longest = longest

    def feed(self, raw: str) -> list[str]:
        """The raw lines to pass on now (none while a traceback is being read)."""
        text = read(raw).text
        if self.held:
            self.held.append(raw)
            if is_exception(text) or len(self.held) > self.longest:
                block, self.held = self.held, []
                return [] if hidden(text) else block
            return []
        if text.strip() == self._START:
            self.held = [raw]
            return []
        return [] if hidden(text) else [raw]

    def flush(self) -> list[str]:
        block, self.held = self.held, []
        return block
