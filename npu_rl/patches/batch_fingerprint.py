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

from .guard import METRIC_UTILS, RAY_TRAINER, VERL_0_6_1, Patch

PATCH_NAME = "batch_fingerprint"
METRIC = "batch/fingerprint"
FINGERPRINTS = {
    f"{RAY_TRAINER}:RayPPOTrainer.fit": "3661c861fcee4890",
    f"{METRIC_UTILS}:compute_data_metrics": "683347d0d391b74b",
}
PATCH = Patch(PATCH_NAME, {VERL_0_6_1: FINGERPRINTS})


def batch_fingerprint(prompts) -> int:
    """Order-independent hash of the rows of a 2-d integer tensor (the left-padded prompt ids)."""
    rows = sorted(hashlib.sha256(row.tobytes()).digest() for row in prompts.cpu().numpy())
    return int.from_bytes(hashlib.sha256(b"".join(rows)).digest()[:6], "big")


@PATCH.wrap(RAY_TRAINER, "compute_data_metrics", also=(METRIC_UTILS,))
def patch_ray_trainer(original):
    def compute_data_metrics(batch, *args, **kwargs):
        metrics = original(batch, *args, **kwargs)
        # Every verl 0.6.1 rollout returns "prompts"; the full sequences identify the batch as well.
        prompts = batch.batch["prompts"] if "prompts" in batch.batch.keys() else batch.batch["input_ids"]
        metrics[METRIC] = batch_fingerprint(prompts)
        return metrics

    return compute_data_metrics
