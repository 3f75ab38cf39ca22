"""A fingerprint of each step's training batch in the step's metrics (``batch/fingerprint``).

A resumed run must train on the batches the uninterrupted run would have: verl
restores the dataloader's position from ``data.pt`` in the checkpoint
(``RayPPOTrainer._load_checkpoint``), and nothing shows whether it did. The
fingerprint hashes the prompt token ids of every sample of the step (verl's
``uid`` is a fresh uuid4 per run, so it cannot be compared), sorted, so that
``balance_batch``'s reordering across ranks does not change it. It is a 48-bit
integer, exact in the metrics file (JSON) and as a float64; TensorBoard keeps float32, so compare
it from the metrics file.

verl computes the step's data metrics with ``compute_data_metrics(batch=...)``,
imported by name into ``ray_trainer`` and called once per step in ``fit``; the
patch wraps that name.
"""

from __future__ import annotations

import hashlib

from .guard import METRIC_UTILS, RAY_TRAINER, TRAINER_BASE, VERL_0_6_1, VERL_0_9_0, Patch

PATCH_NAME = "batch_fingerprint"
METRIC = "batch/fingerprint"
FINGERPRINTS = {
    f"{RAY_TRAINER}:RayPPOTrainer.fit": "3661c861fcee4890",
    f"{METRIC_UTILS}:compute_data_metrics": "683347d0d391b74b",
}
# verl 0.9's trainer imports the name too (trainer/ppo/v1/trainer_base.py:55) and calls it once per step in
# _compute_metrics, on the step's batch read back from TransferQueue with its prompts padded.
FINGERPRINTS_0_9_0 = {
    f"{TRAINER_BASE}:PPOTrainer._compute_metrics": "831b29389ca2d095",
    f"{METRIC_UTILS}:compute_data_metrics": "7962e777d5e61eb0",
}
PATCH = Patch(PATCH_NAME, {VERL_0_6_1: FINGERPRINTS, VERL_0_9_0: FINGERPRINTS_0_9_0})


def batch_fingerprint(prompts) -> int:
    """Order-independent hash of the rows of a 2-d integer tensor (the left-padded prompt ids)."""
    rows = sorted(hashlib.sha256(row.tobytes()).digest() for row in prompts.cpu().numpy())
    return int.from_bytes(hashlib.sha256(b"".join(rows)).digest()[:6], "big")


def _with_fingerprint(original):
    def compute_data_metrics(batch, *args, **kwargs):
        metrics = original(batch, *args, **kwargs)
        # Every verl 0.6.1 rollout returns "prompts"; the full sequences identify the batch as well.
        prompts = batch.batch["prompts"] if "prompts" in batch.batch.keys() else batch.batch["input_ids"]
        metrics[METRIC] = batch_fingerprint(prompts)
        return metrics

    return compute_data_metrics


patch_ray_trainer, patch_trainer_base = PATCH.wrap_each(
    _with_fingerprint,
    also=(METRIC_UTILS,),
    patch_ray_trainer=(RAY_TRAINER, "compute_data_metrics", VERL_0_6_1),
    patch_trainer_base=(TRAINER_BASE, "compute_data_metrics", VERL_0_9_0),
)
