"""An SFT run resumed from a checkpoint saved on an epoch's last step trains the next epoch, not nothing.

verl 0.9's SFT trainer saves its dataloader's state inside the epoch loop (utils/checkpoint/
checkpoint_handler.py ``save_checkpoint``), so a checkpoint of an epoch's last step holds the state of an
iterator that has yielded every batch of the epoch but not yet ended. On resume, ``fit`` starts the epoch
after it (trainer/sft_trainer.py ``fit``: ``start_epoch = global_step // steps_per_epoch``, then
``set_epoch``) and the loaded state skips that new epoch's batches: a whole epoch is lost, and a run whose
checkpoints fall on epoch ends (upstream ReTool's ``save_freq`` 31, its epoch) ends an epoch short of its
last step, with exit 0, without the checkpoint its RL stage starts from.

Where the checkpoint's step ends an epoch, this patch leaves the dataloader fresh: ``fit``'s ``set_epoch``
gives the next epoch its own order, as an uninterrupted run has it. Mid-epoch checkpoints load as verl
loads them.

Importing this module does not import verl or torch.
"""

from __future__ import annotations

import re

from .guard import SFT_TRAINER, VERL_0_9_0, Patch

PATCH_NAME = "sft_resume"
CHECKPOINT_HANDLER = "verl.utils.checkpoint.checkpoint_handler"
FINGERPRINTS = {
    # Loads the saved iterator state whatever step it was saved at.
    f"{CHECKPOINT_HANDLER}:CheckpointHandler._load_dataloader_state": "8d9844e4b84519a3",
    # Starts at epoch global_step // steps_per_epoch, set_epoch-ing each epoch's sampler.
    f"{SFT_TRAINER}:SFTTrainer.fit": "6099f9b0e5998d1a",
}
PATCH = Patch(PATCH_NAME, {VERL_0_9_0: FINGERPRINTS})
_STEP = re.compile(r"global_step_(\d+)")


def ends_an_epoch(checkpoint_path: str, steps_per_epoch: int) -> bool:
    m = _STEP.search(str(checkpoint_path))
    return m is not None and steps_per_epoch > 0 and int(m.group(1)) % steps_per_epoch == 0


@PATCH.wrap(CHECKPOINT_HANDLER, "CheckpointHandler._load_dataloader_state", also=(SFT_TRAINER,))
def _fresh_loader_at_an_epoch_end(original):
    def _load_dataloader_state(self, checkpoint_path: str):
        if ends_an_epoch(checkpoint_path, len(self.train_dataloader)):
            if self.rank == 0:
                print(f"npu-rl: {checkpoint_path} ends an epoch: the next epoch starts afresh", flush=True)
            return None
        return original(self, checkpoint_path)

    return _load_dataloader_state
