"""The reward's parts in every step's metrics: ``reward/acc``, ``reward/format``, ``reward/cot``,
``reward/boxed``, ``reward/unevaluated``.

verl logs a training step's reward only as one score (``critic/score/mean``); the
per-sample parts the reward returns beside it (``npu_rl.reward.math``'s dict) reach
the batch (``RayPPOTrainer.fit`` puts ``reward_extra_infos_dict`` into
``batch.non_tensor_batch``) but no metric, so a run cannot show whether its reward
rose for the answers or for the format, nor how often the policy restates a
computation instead of answering (``unevaluated``). Validation logs them already
(``val-aux/<source>/<part>/mean@N``).

verl computes the step's data metrics with ``compute_data_metrics(batch=...)``,
called once per step in ``fit`` after the reward's parts are in the batch; the
patch wraps that name and adds each part's mean over the step's samples.
"""

from __future__ import annotations

import numpy as np

from .guard import METRIC_UTILS, RAY_TRAINER, VERL_0_6_1, Patch

PATCH_NAME = "reward_parts"
PREFIX = "reward/"
# The numeric parts npu_rl.reward.math returns per sample (tests/patches/test_reward_parts.py checks them).
PARTS = ("acc", "format", "cot", "boxed", "unevaluated")
FINGERPRINTS = {
    f"{RAY_TRAINER}:RayPPOTrainer.fit": "3661c861fcee4890",
    f"{METRIC_UTILS}:compute_data_metrics": "683347d0d391b74b",
}
PATCH = Patch(PATCH_NAME, {VERL_0_6_1: FINGERPRINTS})


def part_means(non_tensor_batch) -> dict[str, float]:
    """``reward/<part>``: the mean of each part the step's samples carry."""
    out = {}
    for part in PARTS:
        values = non_tensor_batch.get(part)
        if values is not None and len(values):
            out[PREFIX + part] = float(np.mean(np.asarray(values, dtype=np.float64)))
    return out


@PATCH.wrap(RAY_TRAINER, "compute_data_metrics", also=(METRIC_UTILS,))
def patch_ray_trainer(original):
    def compute_data_metrics(batch, *args, **kwargs):
        metrics = original(batch, *args, **kwargs)
        metrics.update(part_means(batch.non_tensor_batch))
        return metrics

    return compute_data_metrics
