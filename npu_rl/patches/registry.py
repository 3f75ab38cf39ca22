"""The patches by name (what ``NPU_RL_PATCHES`` lists), each the module defining its ``PATCH`` (a
``guard.Patch``, whose install() registers post-import hooks). A module of its own: guard reads it, and the
package, which imports guard, re-exports it."""

PATCHES = {
    "cpu": "npu_rl.patches.cpu_platform",
    "old_log_prob": "npu_rl.patches.old_log_prob",
    "consistency": "npu_rl.patches.consistency",
    "reshard": "npu_rl.patches.reshard",
    "vllm_dp": "npu_rl.patches.vllm_dp",
    "file_logger": "npu_rl.patches.file_logger",
    "swanlab_finish": "npu_rl.patches.swanlab_finish",
    "checkpoint_rotation": "npu_rl.patches.checkpoint_rotation",
    "batch_fingerprint": "npu_rl.patches.batch_fingerprint",
    "reward_parts": "npu_rl.patches.reward_parts",
    "attest": "npu_rl.patches.attest",
    "rehearse": "npu_rl.patches.rehearse",
    "sft_resume": "npu_rl.patches.sft_resume",
}
