"""The CPU rollout engine: HF ``generate`` on a separate inference copy of the policy.

It plays vLLM's part on NPU: verl's hybrid engine pushes the trained weights into it every step, and it generates
with verl's own ``HFRollout`` code, whose constructor predates verl 0.6.1's rollout interface (``update_weights``).

With ``actor_rollout_ref.rollout.calculate_log_probs`` it also returns its own log-probs of the sampled
tokens (``rollout_log_probs``), as vLLM 0.9.1 reports them: from the inference copy's raw logits, before
temperature (``vllm/v1/sample/sampler.py`` ``Sampler.forward``, lines 31-39), in the precision it generated in.

It generates in ``actor_rollout_ref.rollout.dtype`` (the recipe's ``model.dtype``) where verl's ``HFRollout``
hard-codes bfloat16 autocast (verl 0.6.1 ``workers/rollout/hf_rollout.py:111``, fingerprinted by the cpu
patch), which torch emulates, slowly, on a CPU without bfloat16 arithmetic (docs/demo.md).
``NPU_RL_DRILL=rollout_weights`` lands every weight sync with noise, as a broken sync would: a drill that the
consistency gate (:mod:`npu_rl.patches.consistency`) must stop at step 1.
"""

from __future__ import annotations

import contextlib
import functools
import os
import types
from collections.abc import Generator

import torch
from verl import DataProto
from verl.utils.torch_dtypes import PrecisionType
from verl.workers.rollout import hf_rollout
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.hf_rollout import HFRollout

from .consistency import DRILL_ENV, WEIGHTS_DRILL, drilled


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


def autocast_in(dtype: torch.dtype) -> contextlib.AbstractContextManager:
    """Autocast to ``dtype``; none at all for float32 (the inference copy's own precision)."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type="cpu", dtype=dtype)


@contextlib.contextmanager
def _hf_rollout_autocast(dtype: torch.dtype):
    """While HFRollout generates, its module's ``torch.autocast`` is :func:`autocast_in` ``dtype``; only
    that module's name is rebound, so nothing else in the process sees it."""
    if dtype == torch.bfloat16:  # what HFRollout does by itself
        yield
        return
    proxy = types.ModuleType("torch")
    proxy.__dict__.update(torch.__dict__)
    proxy.autocast = lambda *args, **kwargs: autocast_in(dtype)  # type: ignore[attr-defined]  # a copy of torch
    hf_rollout.torch = proxy
    try:
        yield
    finally:
        hf_rollout.torch = torch


class CPURollout(HFRollout):
    def __init__(self, config, model_config, device_mesh):
        # HFRollout.__init__ has the pre-0.6 signature; set up as a BaseRollout instead.
        BaseRollout.__init__(self, config=config, model_config=model_config, device_mesh=device_mesh)
        from transformers import AutoModelForCausalLM  # lazy: transformers

        path = self.model_config.local_path or self.model_config.path
        self.module = AutoModelForCausalLM.from_pretrained(
            path,
            torch_dtype=torch.float32,
            attn_implementation="eager",
            trust_remote_code=self.model_config.trust_remote_code,
        )
        self.module.eval()
        self.module.generate = _without_position_ids(self.module.generate)
        self._params = dict(self.module.named_parameters())
        self.dtype = PrecisionType.to_dtype(self.config.get("dtype", "bfloat16"))

    async def resume(self, tags: list[str]):
        # Weights and KV cache live in host memory already.
        return None

    async def release(self):
        return None

    async def update_weights(self, weights: Generator[tuple[str, torch.Tensor], None, None], **kwargs):
        if os.environ.get(DRILL_ENV) == WEIGHTS_DRILL:
            weights = drilled(weights)
        with torch.no_grad():
            for name, tensor in weights:
                target = self._params.get(name)
                if target is None:
                    # Tied lm_head / buffers that the inference copy shares.
                    continue
                target.copy_(tensor.to(dtype=target.dtype))

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        with _hf_rollout_autocast(self.dtype):
            out = super().generate_sequences(prompts)
        if self.config.get("calculate_log_probs", False) and not prompts.meta_info.get("validate", False):
            out.batch["rollout_log_probs"] = self._sampled_log_probs(out)
        return out

    @torch.no_grad()
    def _sampled_log_probs(self, out: DataProto) -> torch.Tensor:
        responses = out.batch["responses"]
        n = responses.size(1)
        with autocast_in(self.dtype):
            logits = self.module(
                input_ids=out.batch["input_ids"],
                attention_mask=out.batch["attention_mask"],
                position_ids=out.batch["position_ids"],
            ).logits
        logits = logits[:, -n - 1 : -1].float()  # the logits that predicted each response token
        picked = torch.log_softmax(logits, dim=-1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)
        return picked * out.batch["attention_mask"][:, -n:].to(picked.dtype)  # 0 after the end of a response
