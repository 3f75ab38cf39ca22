"""The batch fingerprint in every step's metrics: one value per set of prompts, whatever their order."""

from __future__ import annotations

import types

import torch
from verl import DataProto

from npu_rl.patches import batch_fingerprint as bf


def _metrics(**tensors):
    mod = types.SimpleNamespace(compute_data_metrics=lambda batch, use_critic=False: {"critic/score/mean": 0.5})
    bf.patch_ray_trainer(mod, check=False)  # a stand-in module: verl's call is compute_data_metrics(batch=...)
    return mod.compute_data_metrics(batch=DataProto.from_dict(tensors), use_critic=False)


def test_the_fingerprint_names_the_prompts_not_their_order():
    a = _metrics(prompts=torch.tensor([[1, 2], [3, 4]]))
    shuffled = _metrics(prompts=torch.tensor([[3, 4], [1, 2]]))  # balance_batch reorders across ranks
    other = _metrics(prompts=torch.tensor([[1, 2], [3, 5]]))
    assert a["critic/score/mean"] == 0.5  # verl's own metrics stay
    assert a[bf.METRIC] == shuffled[bf.METRIC] != other[bf.METRIC]
    assert 0 < a[bf.METRIC] < 2**48 and float(a[bf.METRIC]) == a[bf.METRIC]


def test_a_rollout_without_prompts_is_fingerprinted_by_its_sequences():
    m = _metrics(input_ids=torch.tensor([[1, 2, 5], [3, 4, 6]]))
    assert m[bf.METRIC] == bf.batch_fingerprint(torch.tensor([[3, 4, 6], [1, 2, 5]]))
