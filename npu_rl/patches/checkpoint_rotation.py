"""A run keeps ``max_actor_ckpt_to_keep`` complete checkpoints even when it stops during a save.

verl 0.6.1 rotates checkpoints in each worker's checkpoint manager *before* it writes the new one
(``verl/utils/checkpoint/fsdp_checkpoint_manager.py:204-214``, rank 0; ``megatron_checkpoint_manager.py:379-388``):
with ``max_actor_ckpt_to_keep: 2`` the save of step 3 deletes step 1 first, so a SIGTERM, a lost node or a
crash during that save leaves one complete checkpoint, and with ``1`` none at all.

Here the workers' managers save without rotating, and ``RayPPOTrainer._save_checkpoint`` (the TaskRunner, which
sees the directory every rank writes to) removes whole older ``global_step_N`` directories (verl left their
``data.pt``) once it has written ``data.pt`` and ``latest_checkpointed_iteration.txt``, the last file of a save
(``verl/trainer/ppo/ray_trainer.py:777-835``), at the price of one checkpoint more on disk during a save. Every
run installs it, so a limit set through ``verl_overrides`` rotates the same way. Megatron's ``async_save``
returns before its shards are written, so a recipe with it is refused (npu_rl.recipe.schema). Step directories
go by the actor's limit (GRPO trains no critic). Importing this module does not import verl, torch or ray.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .guard import RAY_TRAINER, TRAINER_BASE, VERL_0_6_1, VERL_0_9_0, Patch

PATCH_NAME = "checkpoint_rotation"
FSDP_MANAGER = "verl.utils.checkpoint.fsdp_checkpoint_manager"
MEGATRON_MANAGER = "verl.utils.checkpoint.megatron_checkpoint_manager"
FINGERPRINTS = {
    # Rotate before they save.
    f"{FSDP_MANAGER}:FSDPCheckpointManager.save_checkpoint": "ced175b94f0e389b",
    f"{MEGATRON_MANAGER}:MegatronCheckpointManager.save_checkpoint": "2767c4bc4c6ed9ab",
    # Saves through the workers, then data.pt, then the marker; reads the limit from the config.
    f"{RAY_TRAINER}:RayPPOTrainer._save_checkpoint": "98ed0726156386c6",
}
# verl 0.9.0 still rotates in the managers before they save (fsdp_checkpoint_manager.py:272,
# megatron_checkpoint_manager.py:1169, reached through engine_workers.py:715) and has no checkpoint callback;
# its trainer's _save_checkpoint writes data.pt, then the marker (trainer/ppo/v1/trainer_base.py:885-957).
FINGERPRINTS_0_9_0 = {
    f"{FSDP_MANAGER}:FSDPCheckpointManager.save_checkpoint": "1c43220dffda6305",
    f"{MEGATRON_MANAGER}:MegatronCheckpointManager.save_checkpoint": "1c396d0903230d60",
    f"{TRAINER_BASE}:PPOTrainer._save_checkpoint": "47979e8f61a83a22",
}
PATCH = Patch(PATCH_NAME, {VERL_0_6_1: FINGERPRINTS, VERL_0_9_0: FINGERPRINTS_0_9_0})


def _save_without_rotating(original):
    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        return original(self, local_path, hdfs_path, global_step, max_ckpt_to_keep=None)

    return save_checkpoint


_patch_fsdp, _patch_megatron = PATCH.wrap_each(
    _save_without_rotating,
    _patch_fsdp=(FSDP_MANAGER, "FSDPCheckpointManager.save_checkpoint"),
    _patch_megatron=(MEGATRON_MANAGER, "MegatronCheckpointManager.save_checkpoint"),
)


def keep_limit(trainer_config: Any) -> int | None:
    """verl's own reading of the limit (ray_trainer.py:794-802): the deprecated flag means 1."""
    if trainer_config.get("remove_previous_ckpt_in_save", False):
        return 1
    keep = trainer_config.get("max_actor_ckpt_to_keep", None)
    return keep if isinstance(keep, int) and keep > 0 else None


def rotate_after_save(root: Path, newest: int, keep: int) -> list[int]:
    """Keep the newest ``keep`` complete checkpoints up to ``newest`` (just completed); remove the other
    step directories older than ``newest``.

    Complete here means verl wrote its ``data.pt``, which it does after every worker's save returned
    (the launcher's fuller check, ``run_files.checkpoint_problem``, needs the recipe): a save that died
    before it neither counts toward the limit nor stays. Directories newer than ``newest`` are a damaged
    save this run has not reached again; the launcher's resume logic owns them."""
    from ..run_files import DATALOADER_STATE, remove_steps, step_numbers, step_path  # lazy: recipe schema

    upto = [s for s in step_numbers(root) if s <= newest]
    kept = [s for s in upto if (step_path(root, s) / DATALOADER_STATE).is_file()][-keep:]
    return remove_steps(root, [s for s in upto if s not in kept and s < newest])


def _rotate_after_save(original):
    def _save_checkpoint(self):
        original(self)  # returns once the marker names this step: the step is complete
        keep = keep_limit(self.config.trainer)
        if keep is None:
            return
        removed = rotate_after_save(Path(self.config.trainer.default_local_dir), self.global_steps, keep)
        if removed:
            print(
                f"npu-rl: global_step_{self.global_steps} is complete; removed "
                f"{', '.join(f'global_step_{s}' for s in removed)} (max_actor_ckpt_to_keep {keep})",
                flush=True,
            )

    return _save_checkpoint


_patch_trainer, _patch_trainer_base = PATCH.wrap_each(
    _rotate_after_save,
    _patch_trainer=(RAY_TRAINER, "RayPPOTrainer._save_checkpoint", VERL_0_6_1),
    _patch_trainer_base=(TRAINER_BASE, "PPOTrainer._save_checkpoint", VERL_0_9_0),
)
