"""The CPU rollout generates in the rollout's dtype (the recipe's ``model.dtype``), in a fresh
interpreter with the cpu patch as a Ray worker has it: verl's own ``HFRollout`` code runs, with the
bfloat16 autocast it hard-codes replaced only when the rollout asks for another dtype."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from npu_rl.patches import env_for

PROBE = r"""
import json, sys, torch
from verl import DataProto
from verl.workers.config import HFModelConfig, RolloutConfig
from verl.workers.rollout import hf_rollout
from npu_rl.patches.cpu_rollout import CPURollout

model_dir, dtype = sys.argv[1:]
rollout = CPURollout(RolloutConfig(name="hf", dtype=dtype, response_length=6, prompt_length=8, temperature=1.0,
                                   calculate_log_probs=True),
                     HFModelConfig(path=model_dir), device_mesh=None)
seen = []  # (autocast on, the dtype a linear layer computed in) at every forward of the inference copy
hook = rollout.module.lm_head.register_forward_hook(
    lambda m, args, out: seen.append((torch.is_autocast_enabled("cpu"), str(out.dtype))))
torch.manual_seed(0)
ids = torch.randint(3, 100, (4, 8))
mask = torch.ones_like(ids)
mask[:2, :3] = 0  # left padding, as verl's prompts have
positions = (mask.cumsum(-1) - 1).clamp(min=0)
out = rollout.generate_sequences(DataProto.from_dict(
    {"input_ids": ids, "attention_mask": mask, "position_ids": positions},
    meta_info={"eos_token_id": 2, "pad_token_id": 0}))
hook.remove()
# The log-probs the rollout reported against the inference copy's own float32 forward.
with torch.no_grad():
    logits = rollout.module(input_ids=out.batch["input_ids"], attention_mask=out.batch["attention_mask"],
                            position_ids=out.batch["position_ids"]).logits[:, -7:-1].float()
resp = out.batch["responses"]
ref = torch.log_softmax(logits, -1).gather(-1, resp.unsqueeze(-1)).squeeze(-1) * out.batch["attention_mask"][:, -6:]
print(json.dumps({"seen": sorted(set(map(tuple, seen))), "responses": list(resp.shape),
                  "max_logprob_diff": float((out.batch["rollout_log_probs"] - ref).abs().max()),
                  "torch_restored": hf_rollout.torch is torch}))
"""


@pytest.fixture(scope="module")
def model_dir(tiny_model, tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("m") / "tiny-qwen2", steps=1)


def _probe(model_dir, dtype: str) -> dict:
    env = {**os.environ, **env_for(["cpu"])}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(model_dir), dtype], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_float32_rollout_generates_and_scores_without_autocast(model_dir):
    out = _probe(model_dir, "float32")
    assert out["seen"] == [[False, "torch.float32"]]
    assert out["responses"] == [4, 6]
    assert out["max_logprob_diff"] < 1e-5
    assert out["torch_restored"] is True


def test_bfloat16_rollout_keeps_verls_autocast(model_dir):
    out = _probe(model_dir, "bfloat16")
    assert out["seen"] == [[True, "torch.bfloat16"]]
    # Reported in the precision it generated in, so not the float32 forward's numbers.
    assert out["max_logprob_diff"] > 1e-4
    assert out["torch_restored"] is True
