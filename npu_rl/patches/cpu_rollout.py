"""The CPU rollout engine: HF ``generate`` on a separate inference copy of the policy.

It plays the part vLLM plays on NPU: verl's hybrid engine pushes the trained
weights into it every step (``update_weights``) and it generates the responses.
Generation itself is verl's own ``HFRollout`` code, whose constructor predates
verl 0.6.1's rollout interface (``resume``/``update_weights``/``release``).
"""

from __future__ import annotations

import functools
from typing import Generator

import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.hf_rollout import HFRollout


def _without_position_ids(generate):
    """HFRollout passes the prompt's position_ids to ``generate``; transformers 4.52
    then reuses the last prompt position for every new token, and the model degenerates
    into repeating itself. Without them, generate derives positions from the
    left-padded attention mask exactly as verl computed them, and extends them."""

    @functools.wraps(generate)
    def wrapper(*args, **kwargs):
        kwargs.pop("position_ids", None)
        return generate(*args, **kwargs)

    return wrapper


class CPURollout(HFRollout):
    def __init__(self, config, model_config, device_mesh):
        # HFRollout.__init__ has the pre-0.6 signature; set up as a BaseRollout instead.
        BaseRollout.__init__(self, config=config, model_config=model_config, device_mesh=device_mesh)
        from transformers import AutoModelForCausalLM

        path = self.model_config.local_path or self.model_config.path
        self.module = AutoModelForCausalLM.from_pretrained(
            path, torch_dtype=torch.float32, attn_implementation="eager",
            trust_remote_code=self.model_config.trust_remote_code,
        )
        self.module.eval()
        self.module.generate = _without_position_ids(self.module.generate)
        self._params = dict(self.module.named_parameters())

    async def resume(self, tags: list[str]):
        # Weights and KV cache live in host memory already.
        return None

    async def release(self):
        return None

    async def update_weights(self, weights: Generator[tuple[str, torch.Tensor], None, None], **kwargs):
        with torch.no_grad():
            for name, tensor in weights:
                target = self._params.get(name)
                if target is None:
                    # Tied lm_head / buffers that the inference copy shares.
                    continue
                target.copy_(tensor.to(dtype=target.dtype))
