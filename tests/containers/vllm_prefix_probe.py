"""Run inside the cpu-vllm image (tests/containers/test_vllm_rollout.py): vLLM 0.9.1's V1 engine on CPU, built
from verl 0.6.1's rollout config the way verl builds it (``enable_prefix_caching=config.enable_prefix_caching``,
vllm_rollout_spmd.py:247), on a GRPO-shaped batch: one prompt long enough to fill a KV block sampled several
times, then prompts of their own. Each prompt's greedy tokens in the batch are compared with its tokens
decoded alone.

``python vllm_prefix_probe.py MODEL_DIR patched`` takes the config through the cpu patch
(npu_rl.patches.cpu_platform.engine_config); ``... verl`` keeps verl's default, the prefix cache on, under
which IPEX's decode kernel takes the long prompt's samples for beams (tests/containers/ipex_decode_probe.py).
Prints one JSON line: the engine's prefix-cache setting, and the error raised or the prompts whose batched
tokens differ from their own.
"""

from __future__ import annotations

import json
import os
import sys

# verl's engine runs in its worker's process: verl builds it with the external launcher, which turns V1's
# engine-core process off (vLLM 0.9.1 vllm/config.py:1896-1898). In one process the scheduler has every
# request before its first step, so the batch is laid out the same each time.
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

from verl.workers.config.rollout import RolloutConfig  # noqa: E402
from vllm import LLM, SamplingParams  # noqa: E402
from vllm.inputs import TokensPrompt  # noqa: E402

from npu_rl.patches.cpu_platform import engine_config  # noqa: E402

BLOCK = 128  # vLLM's CPU block size with IPEX (vllm/platforms/cpu.py:103-104)
SAMPLES = 5  # the long prompt's samples: 64 sequences are no whole number of groups of 5
TOKENS = 12


def prompts() -> list[list[int]]:
    """Token ids, one request each (greedy takes no n > 1): two prompts long enough to fill a KV block, one
    sampled 5 times and the other 59, 64 sequences in all, no whole number of groups of either."""
    first = [7 + (i * 5) % 500 for i in range(BLOCK + 12)]
    second = [11 + (i * 13) % 500 for i in range(BLOCK + 22)]
    return [first] * SAMPLES + [second] * (64 - SAMPLES)


def main(model: str, mode: str) -> dict:
    config = RolloutConfig(name="vllm", dtype="bfloat16", free_cache_engine=False)
    if mode == "patched":
        config = engine_config(config)
    llm = LLM(
        model=model,
        dtype=config.dtype,
        enable_prefix_caching=config.enable_prefix_caching,
        enforce_eager=True,
        max_model_len=512,
        seed=0,
    )
    batch = [TokensPrompt(prompt_token_ids=ids) for ids in prompts()]
    greedy = SamplingParams(temperature=0.0, max_tokens=TOKENS, ignore_eos=True)
    found: dict = {"enable_prefix_caching": config.enable_prefix_caching}
    try:
        together = llm.generate(batch, greedy, use_tqdm=False)
    except Exception as e:  # the engine's own error, as a run would die of it
        found["error"] = " ".join(str(e).split())[-300:]
        return found
    differ = []
    for k, (prompt, out) in enumerate(zip(batch, together)):
        (alone,) = llm.generate([prompt], greedy, use_tqdm=False)
        if list(out.outputs[0].token_ids) != list(alone.outputs[0].token_ids):
            differ.append(k)
    found["differ"] = differ
    return found


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])), flush=True)
