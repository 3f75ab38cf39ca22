"""The launch of an SFT recipe: verl 0.9's SFT trainer under torchrun, the way upstream's SFT scripts run it.

cann-recipes-train's agent SFT stages run ``torchrun --nnodes --nproc_per_node -m verl.trainer.fsdp_sft_trainer``
(agent_rl/qwen3_tool_agent/run_qwen3_4b_sft_npu.sh:50-52); verl 0.9 replaced that trainer with
``verl.trainer.sft_trainer`` (config ``sft_trainer_engine``), whose processes are torchrun's, not Ray's. So the
launch has no Ray cluster and no runtime_env: the environment of its argv reaches every rank, since torchrun's
ranks are its children. The keys below are verl v0.9.0's (trainer/config/sft_trainer_engine.yaml, with
``model@model: hf_model``, ``engine@engine: fsdp``, ``optim@optim: fsdp``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import run_files
from ..patches.guard import SFT_TRAINER
from ..recipe.schema import Recipe
from .hydra import hydra_value
from .overrides import trainer_fields

ENTRY_MODULE = SFT_TRAINER
CONFIG_NAME = "sft_trainer_engine"  # the entry's @hydra.main default (sft_trainer.py:460)
TORCHRUN = "torch.distributed.run"


def patches_for(recipe: Recipe) -> list[str]:
    """The patches an SFT run needs: its resume at an epoch's end (npu_rl.patches.sft_resume), the platform's
    and the metrics file. None of the GRPO patches has a hook in the SFT trainer (no rollout, reward or Ray
    worker group)."""
    names = ["sft_resume"]
    if recipe.resources.platform == "cpu":
        names.append("cpu")
    if "file" in recipe.logging.backends:
        names.append("file_logger")
    return names


def torchrun_args(recipe: Recipe) -> list[str]:
    """One node (the schema refuses more), a rank per device, a rendezvous of its own on this host."""
    return ["--standalone", "--nnodes=1", f"--nproc_per_node={recipe.resources.devices_per_node}"]


def sft_overrides(recipe: Recipe, resume_from: Path | None = None, restart: bool = False) -> list[str]:
    """verl 0.9 SFT trainer overrides of ``recipe`` (whose ``sft`` is set); ``resume_from`` names the checkpoint
    to resume, ``restart`` starts afresh although checkpoint directories exist."""
    sft = recipe.sft
    assert sft is not None, "an SFT recipe"
    a, m, d = recipe.algorithm, recipe.model, recipe.data
    ws = run_files.resolve
    kv: list[tuple[str, Any]] = [
        ("data.train_files", [str(ws(f)) for f in d.train_files]),
        # null, not []: the trainer builds a validation set from any list it is given (sft_trainer.py:160-166).
        ("data.val_files", [str(ws(f)) for f in d.val_files] or None),
        ("data.train_batch_size", a.train_batch_size),
        ("data.micro_batch_size_per_gpu", sft.micro_batch_size_per_device),
        ("data.max_length", sft.max_length),
        ("data.truncation", sft.truncation),
        ("data.messages_key", sft.messages_key),
        ("data.tools_key", sft.tools_key),
        ("data.enable_thinking_default", sft.enable_thinking),
        ("data.use_dynamic_bsz", sft.use_dynamic_bsz),
        ("model.path", str(run_files.model_dir(recipe))),
        ("model.trust_remote_code", m.trust_remote_code),
        ("model.use_remove_padding", m.use_remove_padding),
        ("model.enable_gradient_checkpointing", m.enable_gradient_checkpointing),
        ("engine.strategy", recipe.actor.strategy),
        ("engine.ulysses_sequence_parallel_size", sft.ulysses_sequence_parallel_size),
        ("engine.param_offload", recipe.actor.param_offload),
        ("engine.optimizer_offload", recipe.actor.optimizer_offload),
        ("optim.lr", a.lr),
        ("optim.lr_scheduler_type", sft.lr_scheduler),
        ("optim.lr_warmup_steps_ratio", sft.warmup_ratio),
        ("optim.betas", list(sft.betas)),
        ("optim.weight_decay", sft.weight_decay),
        ("optim.clip_grad", sft.clip_grad),
        *trainer_fields(recipe, resume_from, restart),
        ("trainer.seed", a.seed),
        # npu-rl removes old checkpoints once a run ends (run_files.rotate_checkpoints): verl's own rotation
        # deletes before it saves, so a stop during a save would leave none complete.
        ("trainer.max_ckpt_to_keep", None),
    ]
    if a.total_training_steps is not None:
        kv.append(("trainer.total_training_steps", a.total_training_steps))
    if sft.max_token_len_per_device is not None:
        kv.append(("data.max_token_len_per_gpu", sft.max_token_len_per_device))
    if d.dataloader_num_workers is not None:
        kv.append(("data.num_workers", d.dataloader_num_workers))
    if m.dtype is not None:
        # The engine's master weights (fsdp.yaml model_dtype) and, as the GRPO recipes' dtype does, the compute
        # dtype: verl 0.9's FSDP engine autocasts to bf16 unless its mixed precision says otherwise.
        short = {"float32": "fp32", "bfloat16": "bf16"}[m.dtype]
        kv += [("engine.model_dtype", short), ("+engine.mixed_precision.param_dtype", short)]
    out = [f"{k}={hydra_value(v)}" for k, v in kv]
    if m.attn_implementation:
        out.append(f"+model.override_config.attn_implementation={m.attn_implementation}")
    if recipe.resources.platform == "cpu":
        # torch.compile costs minutes on 2 CPU cores and gains nothing there (as the GRPO launch's).
        out.append("engine.use_torch_compile=False")
    out += [f"{k}={hydra_value(v)}" for k, v in recipe.verl_overrides.items()]
    return out
