"""The batches a run of the tiny recipe trains on, step by step, as verl's own data pipeline orders them.

A resumed run must train each step on the batch a run that never stopped would have: verl restores its
loader's position from the checkpoint's ``data.pt`` and its sampler's generator with it. The reference is
that pipeline, built in this process from the launch's own composed config by verl 0.6.1's functions, in the
order ``TaskRunner.run`` (trainer/main_ppo.py:283-319) and ``RayPPOTrainer._create_dataloader``
(trainer/ppo/ray_trainer.py:378-387) build it: the tokenizer, ``create_rl_dataset``, ``create_rl_sampler``
(the seeded ``RandomSampler``), a ``StatefulDataLoader`` of ``gen_batch_size`` rows, ``drop_last``. A step's
batch is its prompts, each repeated ``rollout.n`` times (``DataProto.repeat(interleave=True)``), fingerprinted
as the ``batch_fingerprint`` patch does in the run. A run from scratch is compared with it too, so a wrong
reference fails the test rather than passing every restart.
"""

from __future__ import annotations

import torch

from npu_rl.launcher.spec import build_launch
from npu_rl.launcher.verl_config import check_argv
from npu_rl.patches.batch_fingerprint import batch_fingerprint


def sampled_fingerprints(pods, steps: int) -> dict[int, int]:
    """``{step: fingerprint}`` of the first ``steps`` steps of ``pods``' job, from scratch."""
    from torchdata.stateful_dataloader import StatefulDataLoader  # lazy: verl's stack
    from verl.trainer.main_ppo import create_rl_dataset, create_rl_sampler  # lazy: verl's stack
    from verl.utils import hf_tokenizer  # lazy: verl's stack
    from verl.utils.dataset.rl_dataset import collate_fn  # lazy: verl's stack

    cfg = pods.in_ws(lambda: check_argv(build_launch(pods.recipe).argv))
    data = cfg.data
    tokenizer = hf_tokenizer(cfg.actor_rollout_ref.model.path, trust_remote_code=data.get("trust_remote_code", False))
    dataset = create_rl_dataset(
        data.train_files, data, tokenizer, None, is_train=True, max_samples=data.get("train_max_samples", -1)
    )
    loader = StatefulDataLoader(
        dataset=dataset,
        batch_size=data.get("gen_batch_size", data.train_batch_size),
        num_workers=0,  # the order is the sampler's, whatever the workers
        drop_last=True,
        collate_fn=collate_fn,
        sampler=create_rl_sampler(data, dataset),
    )
    repeat = cfg.actor_rollout_ref.rollout.n
    found: dict[int, int] = {}
    for step, batch in enumerate(loader, start=1):
        found[step] = batch_fingerprint(torch.repeat_interleave(batch["input_ids"], repeat, dim=0))
        if step == steps:
            break
    return found
