"""The recipe schema: one YAML file describes a whole GRPO run.

Every model forbids unknown keys, so a typo in a recipe is an error naming the
field rather than a silently ignored setting.

A description's "verl `key`" is what the launcher sets from the field, in verl 0.6.1's names, which the
launch moves where each stack line's verl reads them (npu_rl.launcher.releases.MOVED_KEYS); a release before
the key ("verl 0.9.0 `key`") limits it to the lines of that release. tests/recipes/test_verl_keys.py holds
the descriptions to the launch's overrides.
"""

from __future__ import annotations

import re
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .. import versions
from ..sandbox.request import Caps

Platform = Literal["npu-a2", "npu-a3", "cpu"]
Logger = Literal["console", "tensorboard", "swanlab", "file", "wandb"]


def _numeric(annotation: Any) -> bool:
    """int, float, or an optional of them."""
    if annotation in (int, float):
        return True
    args = [a for a in get_args(annotation) if a is not type(None)]
    return bool(args) and all(a in (int, float) for a in args)


class Strict(BaseModel):
    """Unknown keys, ``true`` for a number, inf and nan are errors (recipes and report thresholds)."""

    # inf/nan reach verl as valid floats and turn into NaN losses steps later.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        # pydantic's lax mode reads `true` as 1: `rollout_n: true` would be one rollout, silently.
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                if isinstance(data.get(name), bool) and _numeric(field.annotation):
                    raise ValueError(f"{name} must be a number, not {str(data[name]).lower()}")
        return data


class ModelSpec(Strict):
    """The policy model: its weights, tokenizer and how verl loads it."""

    path: str = Field(
        description="Local directory with the HF weights (relative to the workspace) "
        "-> verl `actor_rollout_ref.model.path`"
    )
    hub_id: str | None = Field(None, description="Hub repo id used by `npu-rl model fetch`; npu-rl only")
    tokenizer_config: str | None = Field(
        None,
        description="tokenizer_config.json applied over the model's own (chat template with the system prompt); "
        "relative to configs/ or absolute; npu-rl only (applied by `npu-rl model fetch` / prepare / eval)",
    )
    enable_gradient_checkpointing: bool = Field(
        True,
        description="Activation checkpointing -> verl `actor_rollout_ref.model.enable_gradient_checkpointing` "
        "(fsdp); megatron: switches actor.recompute on",
    )
    use_remove_padding: bool = Field(
        False, description="Pack sequences without padding tokens -> verl `actor_rollout_ref.model.use_remove_padding`"
    )
    attn_implementation: str | None = Field(
        None,
        description="Forced into the HF config (e.g. 'eager' on CPU, where sdpa/flash kernels are absent) "
        "-> verl `+actor_rollout_ref.model.override_config.attn_implementation`",
    )
    trust_remote_code: bool = Field(
        False, description="Run the model repo's own Python code -> verl `actor_rollout_ref.model.trust_remote_code`"
    )
    dtype: Literal["bfloat16", "float32"] | None = Field(
        None,
        description="What the actor, its reference and the rollout compute in (fsdp strategies); None keeps "
        "verl's bfloat16. float32 on a CPU without bfloat16 arithmetic, where torch emulates it "
        "-> verl `actor_rollout_ref.{actor,ref}.fsdp_config.dtype`, `actor_rollout_ref.rollout.dtype`",
    )


class DataSpec(Strict):
    """The prompts: the prepared parquet files verl reads and the raw data `npu-rl prepare` makes them from."""

    train_files: list[str] = Field(
        min_length=1, description="Training parquet files (relative to the workspace) -> verl `data.train_files`"
    )
    val_files: list[str] = Field(
        min_length=1, description="Validation parquet files (relative to the workspace) -> verl `data.val_files`"
    )
    max_prompt_length: int = Field(512, gt=0, description="Longest prompt, in tokens -> verl `data.max_prompt_length`")
    max_response_length: int = Field(
        1024, gt=0, description="Longest generated response, in tokens -> verl `data.max_response_length`"
    )
    filter_overlong_prompts: bool = Field(
        True, description="Drop prompts over max_prompt_length when loading -> verl `data.filter_overlong_prompts`"
    )
    truncation: Literal["error", "left", "right", "middle"] = Field(
        "error", description="What a prompt over max_prompt_length gets -> verl `data.truncation`"
    )
    prompt_key: str = Field("prompt", description="Parquet column holding the chat prompt -> verl `data.prompt_key`")
    val_batch_size: int | None = Field(
        None,
        gt=0,
        description="Validation batch, in prompts; None: verl's default (all at once) -> verl `data.val_batch_size`",
    )
    shuffle: bool = Field(True, description="Shuffle the training prompts each epoch -> verl `data.shuffle`")
    dataloader_num_workers: int | None = Field(
        None,
        ge=0,
        description="Dataloader worker processes; None: verl's default (8) -> verl `data.dataloader_num_workers`",
    )
    # The raw data's shape: MATH-lighteval parquet (`npu-rl data math`) or DeepScaleR-Preview's
    # deepscaler.json (`npu-rl data deepscaler`, what cann-recipes-train's DeepSeek-R1 run trains on).
    # The agent recipes': DAPO-Math-17k with AIME 2025 to validate (ReTool; `npu-rl data dapo-math` and
    # `npu-rl data aime`), and PrimeIntellect's verifiable coding problems (`npu-rl data code-problems`); their
    # SFT stages': ReTool-SFT (`npu-rl data retool-sft`) and Open-AgentRL-SFT-3K (`npu-rl data agent-sft`).
    format: Literal["math-lighteval", "deepscaler", "dapo-math", "code-problems", "retool-sft", "agent-sft"] = Field(
        "math-lighteval", description="Shape of the raw data `npu-rl prepare` converts; npu-rl only"
    )
    # Where the raw data is read from (offline is normal); the hub dataset is the fallback.
    source_dir: str | None = Field(
        None,
        description="Raw data directory (relative to the workspace; 'sample': the bundled sample) "
        "for `npu-rl prepare` and eval; npu-rl only",
    )
    hub_dataset: str = Field(
        "DigitalLearningGmbH/MATH-lighteval",
        description="Hub dataset `npu-rl prepare` falls back to without source_dir; npu-rl only",
    )
    val_source_dir: str | None = Field(
        None,
        description="Raw validation data where it is another set than the training data's (dapo-math: AIME "
        "2025), relative to the workspace; npu-rl only",
    )


class AlgorithmSpec(Strict):
    """The RL algorithm: advantage estimator, batch sizes, optimizer and loss terms."""

    adv_estimator: Literal["grpo", "gae", "rloo", "reinforce_plus_plus", "remax", "opo", "grpo_passk"] = Field(
        "grpo", description="Advantage estimator -> verl `algorithm.adv_estimator`"
    )
    train_batch_size: int = Field(gt=0, description="Prompts per training step -> verl `data.train_batch_size`")
    rollout_n: int = Field(
        8, gt=0, description="Responses sampled per prompt (the GRPO group) -> verl `actor_rollout_ref.rollout.n`"
    )
    lr: float = Field(1e-6, gt=0, description="Actor learning rate -> verl `actor_rollout_ref.actor.optim.lr`")
    lr_warmup_steps: int = Field(
        0, ge=0, description="Learning-rate warm-up, in steps -> verl `actor_rollout_ref.actor.optim.lr_warmup_steps`"
    )
    ppo_mini_batch_size: int = Field(
        gt=0,
        description="Prompts per optimizer update (train_batch_size / this = "
        "updates per epoch) -> verl `actor_rollout_ref.actor.ppo_mini_batch_size`",
    )
    ppo_micro_batch_size_per_device: int = Field(
        gt=0,
        description="Sequences per forward/backward on one device (gradient accumulation) "
        "-> verl `actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu`",
    )
    ppo_epochs: int = Field(
        1, gt=0, description="Passes over each step's batch -> verl `actor_rollout_ref.actor.ppo_epochs`"
    )
    use_kl_loss: bool = Field(
        True, description="KL to the reference model as a loss term -> verl `actor_rollout_ref.actor.use_kl_loss`"
    )
    kl_loss_coef: float = Field(
        0.001, ge=0, description="Weight of the KL loss -> verl `actor_rollout_ref.actor.kl_loss_coef`"
    )
    kl_loss_type: Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full"] = Field(
        "low_var_kl", description="KL estimator of the KL loss -> verl `actor_rollout_ref.actor.kl_loss_type`"
    )
    entropy_coeff: float = Field(
        0.0, description="Weight of the entropy bonus -> verl `actor_rollout_ref.actor.entropy_coeff`"
    )
    use_kl_in_reward: bool = Field(
        False, description="KL penalty inside the reward instead -> verl `algorithm.use_kl_in_reward`"
    )
    critic_warmup: int = Field(
        0, ge=0, description="Steps training only the critic (gae) -> verl `trainer.critic_warmup`"
    )
    total_epochs: int = Field(1, gt=0, description="Passes over the training prompts -> verl `trainer.total_epochs`")
    total_training_steps: int | None = Field(
        None,
        gt=0,
        description="Stop after this many steps; None: total_epochs decides -> verl `trainer.total_training_steps`",
    )
    # trainer.balance_batch (reorders the batch over DP ranks by length); None leaves verl's default (True).
    balance_batch: bool | None = Field(
        None,
        description="Reorder the batch over data-parallel ranks by length; None: verl's default (True) "
        "-> verl `trainer.balance_batch`",
    )
    seed: int = Field(1, description="Seed of the training prompts' shuffle -> verl `data.seed`")


class RecomputeSpec(Strict):
    """Megatron activation recompute (Megatron-core TransformerConfig recompute_*; verl 0.6.1's default is none)."""

    granularity: Literal["full", "selective"] = Field(
        "full",
        description="What is recomputed -> verl "
        "`actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity`",
    )
    method: Literal["uniform", "block"] | None = Field(
        "block",
        description="How recomputed layers are chosen -> verl "
        "`actor_rollout_ref.actor.megatron.override_transformer_config.recompute_method`",
    )
    num_layers: int | None = Field(
        None,
        gt=0,
        description="Layers recomputed (per stage for block, per chunk for uniform) -> verl "
        "`actor_rollout_ref.actor.megatron.override_transformer_config.recompute_num_layers`",
    )


class ActorSpec(Strict):
    """The trained actor and its reference model: training backend, offload and Megatron layout."""

    strategy: Literal["fsdp", "fsdp2", "megatron"] = Field(
        "fsdp",
        description="Training backend -> verl `actor_rollout_ref.actor.strategy` (megatron: config "
        "ppo_megatron_trainer)",
    )
    param_offload: bool = Field(
        False,
        description="Keep the actor's parameters on the host between phases -> verl "
        "`actor_rollout_ref.actor.fsdp_config.param_offload` (megatron: verl "
        "`actor_rollout_ref.actor.megatron.param_offload` and `actor_rollout_ref.actor.megatron.grad_offload`)",
    )
    optimizer_offload: bool = Field(
        False,
        description="Keep the optimizer state on the host between phases -> verl "
        "`actor_rollout_ref.actor.fsdp_config.optimizer_offload` (megatron: verl "
        "`actor_rollout_ref.actor.megatron.optimizer_offload`)",
    )
    ref_param_offload: bool = Field(
        True,
        description="Keep the reference model's parameters on the host -> verl "
        "`actor_rollout_ref.ref.fsdp_config.param_offload` (megatron: verl "
        "`actor_rollout_ref.ref.megatron.param_offload`)",
    )
    log_prob_micro_batch_size_per_device: int = Field(
        8,
        gt=0,
        description="Sequences per device in a log-prob forward -> verl "
        "`actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu`",
    )
    # The ref's own micro-batch for its log-prob pass; None: the actor's value.
    ref_log_prob_micro_batch_size_per_device: int | None = Field(
        None,
        gt=0,
        description="Sequences per device in the reference's log-prob forward; None: the actor's "
        "-> verl `actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu`",
    )
    # megatron only: recompute (required when model.enable_gradient_checkpointing) and MindSpeed's
    # swap optimizer (optimizer state swapped to host between steps, read by MindSpeed's repatch).
    recompute: RecomputeSpec | None = Field(
        None, description="Megatron activation recompute (megatron with model.enable_gradient_checkpointing)"
    )
    swap_optimizer: bool = Field(
        False,
        description="MindSpeed's swap optimizer (megatron) -> verl "
        "`+actor_rollout_ref.actor.megatron.override_transformer_config.swap_optimizer`",
    )
    # Megatron layout (strategy megatron only).
    tensor_model_parallel_size: int = Field(
        1,
        gt=0,
        description="Megatron tensor-parallel size -> verl "
        "`actor_rollout_ref.{actor,ref}.megatron.tensor_model_parallel_size`",
    )
    pipeline_model_parallel_size: int = Field(
        1,
        gt=0,
        description="Megatron pipeline-parallel size -> verl "
        "`actor_rollout_ref.{actor,ref}.megatron.pipeline_model_parallel_size`",
    )
    expert_model_parallel_size: int = Field(
        1,
        gt=0,
        description="Megatron expert-parallel size (MoE) -> verl "
        "`actor_rollout_ref.{actor,ref}.megatron.expert_model_parallel_size`",
    )
    expert_tensor_parallel_size: int | None = Field(
        None,
        gt=0,
        description="Megatron tensor-parallel size inside each expert (MoE; null: the tensor-parallel size, "
        "Megatron-core's default) -> verl `actor_rollout_ref.actor.megatron.expert_tensor_parallel_size`",
    )
    layers_per_stage: list[int] | None = Field(
        None,
        description="Layers of each pipeline stage, uneven first/last -> verl `+actor_rollout_ref.actor.megatron."
        "override_transformer_config.num_layers_in_{first,last}_pipeline_stage`",
    )


# What `npu-rl sandbox serve` serves by default (the rendered sandbox pods pass only the recipe's memory).
SANDBOX_CAPS = Caps()


class MultiTurnSpec(Strict):
    """Rollouts over several turns, in which the policy calls tools (verl 0.9's tool agent loop)."""

    enabled: bool = Field(
        False,
        description="Every prompt runs verl's tool agent loop (tool_agent) with the recipe's `tools` -> verl 0.9.0 "
        "`actor_rollout_ref.rollout.multi_turn.enable` and `actor_rollout_ref.rollout.agent.default_agent_loop`",
    )
    format: Literal["hermes"] = Field(
        "hermes", description="How tool calls are written -> verl 0.9.0 `actor_rollout_ref.rollout.multi_turn.format`"
    )
    max_assistant_turns: int | None = Field(
        None,
        gt=0,
        description="Turns of the policy at most -> verl 0.9.0 "
        "`actor_rollout_ref.rollout.multi_turn.max_assistant_turns`",
    )
    max_user_turns: int | None = Field(
        None,
        gt=0,
        description="Tool answers at most -> verl 0.9.0 `actor_rollout_ref.rollout.multi_turn.max_user_turns`",
    )
    max_parallel_calls: int = Field(
        1,
        gt=0,
        description="Tool calls run from one turn -> verl 0.9.0 "
        "`actor_rollout_ref.rollout.multi_turn.max_parallel_calls`",
    )
    max_tool_response_length: int = Field(
        256,
        gt=0,
        description="Characters of a tool's answer the policy sees -> verl 0.9.0 "
        "`actor_rollout_ref.rollout.multi_turn.max_tool_response_length`",
    )
    tool_response_truncate_side: Literal["left", "middle", "right"] = Field(
        "middle",
        description="Which part of a longer answer is cut -> verl 0.9.0 "
        "`actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side`",
    )
    agent_workers: int = Field(
        8,
        gt=0,
        description="Agent loop workers (Ray actors) -> verl 0.9.0 `actor_rollout_ref.rollout.agent.num_workers`",
    )


class CodeToolSpec(Strict):
    """The code interpreter the policy calls (npu_rl.agent.code_tool): its code runs in the recipe's sandbox."""

    enabled: bool = Field(False, description="Offer the policy the `code_interpreter` tool; npu-rl only")
    run_timeout_s: float = Field(10.0, gt=0, description="One call's run time at most, seconds; npu-rl only")
    memory_mb: int = Field(-1, description="One call's memory, MiB (-1: the sandbox's default); npu-rl only")
    down_s: float = Field(
        120.0,
        gt=0,
        description="Every call failing this long stops the run (exit SANDBOX_DOWN, resumable); npu-rl only",
    )


class ToolsSpec(Strict):
    """The tools of a multi-turn rollout; their configuration file is written at launch (verl 0.9.0's
    `actor_rollout_ref.rollout.multi_turn.tool_config_path`)."""

    code_interpreter: CodeToolSpec = Field(CodeToolSpec(), description="Run Python in the sandbox")


class RolloutSpec(Strict):
    """The generation engine that samples the responses."""

    name: Literal["vllm", "sglang", "hf"] = Field(
        "vllm", description="Rollout engine (hf on CPU) -> verl `actor_rollout_ref.rollout.name`"
    )
    tensor_model_parallel_size: int = Field(
        1,
        gt=0,
        description="Engine tensor-parallel size -> verl `actor_rollout_ref.rollout.tensor_model_parallel_size`",
    )
    expert_parallel: bool = Field(
        False,
        description="vLLM expert parallelism for MoE -> verl 0.6.1 "
        "`+actor_rollout_ref.rollout.engine_kwargs.vllm.enable_expert_parallel`, verl 0.9.0 "
        "`actor_rollout_ref.rollout.expert_parallel_size` (rollout TP x data_parallel_size)",
    )
    gpu_memory_utilization: float = Field(
        0.8,
        gt=0,
        le=1,
        description="Fraction of device memory the engine may take (weights + KV cache) "
        "-> verl `actor_rollout_ref.rollout.gpu_memory_utilization`",
    )
    enable_chunked_prefill: bool = Field(
        False, description="Chunked prefill -> verl `actor_rollout_ref.rollout.enable_chunked_prefill`"
    )
    enforce_eager: bool = Field(
        False, description="No graph capture, eager kernels -> verl `actor_rollout_ref.rollout.enforce_eager`"
    )
    free_cache_engine: bool = Field(
        True,
        description="Release the KV cache after each rollout -> verl `actor_rollout_ref.rollout.free_cache_engine`",
    )
    temperature: float = Field(
        1.0, ge=0, description="Sampling temperature -> verl `actor_rollout_ref.rollout.temperature`"
    )
    do_sample: bool = Field(True, description="Sample (False: greedy) -> verl `actor_rollout_ref.rollout.do_sample`")
    max_num_batched_tokens: int | None = Field(
        None,
        gt=0,
        description="Tokens per engine forward; None: verl's default -> verl "
        "`actor_rollout_ref.rollout.max_num_batched_tokens`",
    )
    # Sampling beyond temperature; None leaves verl's default (top_k -1, top_p 1.0).
    top_k: int | None = Field(
        None,
        ge=-1,
        description="Top-k sampling (-1: off); None: verl's default -> verl `actor_rollout_ref.rollout.top_k`",
    )
    top_p: float | None = Field(
        None, gt=0, le=1, description="Nucleus sampling; None: verl's default -> verl `actor_rollout_ref.rollout.top_p`"
    )
    max_num_seqs: int | None = Field(
        None,
        gt=0,
        description="Sequences the engine runs at once (also graph_mode's captured batch); None: verl's "
        "default -> verl `actor_rollout_ref.rollout.max_num_seqs`",
    )
    enable_prefix_caching: bool | None = Field(
        None,
        description="Reuse the KV cache of shared prompt prefixes; None: verl's default -> verl "
        "`actor_rollout_ref.rollout.enable_prefix_caching`",
    )
    # vLLM's data-parallel size for expert_parallel (VLLM_DP_SIZE): experts spread over TP x DP ranks.
    data_parallel_size: int | None = Field(
        None,
        gt=0,
        description="vLLM data-parallel size with expert_parallel -> env `VLLM_DP_SIZE` (npu_rl.patches.vllm_dp) "
        "on verl 0.6.1, verl 0.9.0 `actor_rollout_ref.rollout.data_parallel_size`",
    )
    # vllm-ascend additional_config: torchair graph mode and the Ascend scheduler (NPU only).
    graph_mode: bool = Field(
        False,
        description="vllm-ascend torchair graph mode -> verl "
        "`+actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config` (torchair_graph_config)",
    )
    ascend_scheduler: bool = Field(
        False,
        description="vllm-ascend's Ascend scheduler -> verl "
        "`+actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config` (ascend_scheduler_config)",
    )
    multi_turn: MultiTurnSpec = Field(MultiTurnSpec(), description="Multi-turn rollouts with tool calls (verl 0.9)")


class SFTSpec(Strict):
    """Supervised fine-tuning through verl 0.9's SFT trainer (``verl.trainer.sft_trainer`` under torchrun,
    ``MultiTurnSFTDataset``): a recipe with this section trains on chat transcripts, each row's ``messages``
    and, where the policy calls tools, the ``tools`` it was offered. The loss covers the assistant's tokens
    only. ``algorithm`` gives the batch (``train_batch_size``), ``lr``, ``total_epochs``,
    ``total_training_steps`` and ``seed``; its RL settings do not apply."""

    micro_batch_size_per_device: int = Field(
        gt=0, description="Transcripts per forward/backward on one device -> verl 0.9.0 `data.micro_batch_size_per_gpu`"
    )
    max_length: int = Field(gt=0, description="Longest transcript, in tokens -> verl 0.9.0 `data.max_length`")
    truncation: Literal["error", "left", "right"] = Field(
        "error", description="A transcript over max_length: error, or cut -> verl 0.9.0 `data.truncation`"
    )
    messages_key: str = Field("messages", description="Column of the chat messages -> verl 0.9.0 `data.messages_key`")
    tools_key: str = Field(
        "tools", description="Column of the tools each row offers (OpenAI schemas) -> verl 0.9.0 `data.tools_key`"
    )
    enable_thinking: bool | None = Field(
        None,
        description="Chat template's enable_thinking for rows without their own; None: the template's default "
        "-> verl 0.9.0 `data.enable_thinking_default`",
    )
    use_dynamic_bsz: bool = Field(
        True,
        description="Pack micro-batches by tokens (max_token_len_per_device) -> verl 0.9.0 `data.use_dynamic_bsz`",
    )
    max_token_len_per_device: int | None = Field(
        None,
        gt=0,
        description="Tokens per packed micro-batch; None: verl's 8192 -> verl 0.9.0 `data.max_token_len_per_gpu`",
    )
    ulysses_sequence_parallel_size: int = Field(
        1, gt=0, description="Devices sharing one sequence -> verl 0.9.0 `engine.ulysses_sequence_parallel_size`"
    )
    lr_scheduler: Literal["constant", "cosine"] = Field(
        "cosine", description="Learning-rate schedule -> verl 0.9.0 `optim.lr_scheduler_type`"
    )
    warmup_ratio: float = Field(
        0.1, ge=0, lt=1, description="Warm-up, as a share of the steps -> verl 0.9.0 `optim.lr_warmup_steps_ratio`"
    )
    betas: tuple[float, float] = Field((0.9, 0.95), description="AdamW's betas -> verl 0.9.0 `optim.betas`")
    weight_decay: float = Field(0.01, ge=0, description="AdamW's weight decay -> verl 0.9.0 `optim.weight_decay`")
    clip_grad: float = Field(1.0, gt=0, description="Gradient-norm clip -> verl 0.9.0 `optim.clip_grad`")


# The RL settings of `algorithm` (the rest are the SFT trainer's too): an SFT recipe may not set them.
RL_ONLY_ALGORITHM = {
    "adv_estimator",
    "rollout_n",
    "ppo_mini_batch_size",
    "ppo_micro_batch_size_per_device",
    "ppo_epochs",
    "use_kl_loss",
    "kl_loss_coef",
    "kl_loss_type",
    "entropy_coeff",
    "use_kl_in_reward",
    "critic_warmup",
    "lr_warmup_steps",
    "balance_batch",
}


class ResourcesSpec(Strict):
    """The machines of the run."""

    platform: Platform = Field(
        description="Hardware (npu-a2, npu-a3 or cpu) -> verl `trainer.device` (npu or cpu); "
        "also picks patches and k8s manifests"
    )
    nnodes: int = Field(1, gt=0, description="Nodes of the run -> verl `trainer.nnodes`")
    devices_per_node: int = Field(
        gt=0, description="NPUs per node (CPU: worker processes) -> verl `trainer.n_gpus_per_node`"
    )
    # Atlas A3 cluster type, which decides the node label MindCluster schedules on (npu_rl.render.k8s):
    # an A3 box server, an Atlas 900 A3 SuperPoD or an Atlas 9000 A3 SuperPoD. None: the platform's default.
    cluster: Literal["box", "superpod-900", "superpod-9000"] | None = Field(
        None, description="Atlas A3 cluster type, the k8s node label to schedule on (npu-a3); npu-rl only"
    )

    @model_validator(mode="after")
    def _cluster_is_a3(self) -> ResourcesSpec:
        if self.cluster is not None and self.platform != "npu-a3":
            raise ValueError(f"resources.cluster {self.cluster!r} is an Atlas A3 setting (platform npu-a3)")
        return self

    @property
    def world_size(self) -> int:
        return self.nnodes * self.devices_per_node

    @property
    def device(self) -> str:
        return "cpu" if self.platform == "cpu" else "npu"


class RewardWeights(Strict):
    """Weights of the parts of npu_rl.reward.math's score."""

    accuracy: float = Field(
        0.7,
        ge=0,
        description="Weight of a right final answer -> verl `+custom_reward_function.reward_kwargs.weights.accuracy`",
    )
    format: float = Field(
        0.2,
        ge=0,
        description="Weight of the <think>/<answer> tags format "
        "-> verl `+custom_reward_function.reward_kwargs.weights.format`",
    )
    cot: float = Field(
        0.1,
        ge=0,
        description="Weight of numbered reasoning steps in <think> "
        "-> verl `+custom_reward_function.reward_kwargs.weights.cot`",
    )


class RewardSpec(Strict):
    """The reward function that scores each response."""

    # A module path inside npu_rl (resolved to its installed file) or a .py file path.
    function: str = Field(
        "npu_rl.reward.math",
        min_length=1,
        description="Reward module (npu_rl.*) or .py file -> verl `custom_reward_function.path` (resolved to the file)",
    )
    name: str = Field(
        "compute_score", min_length=1, description="Function in that module -> verl `custom_reward_function.name`"
    )
    manager: Literal["naive", "batch", "prime", "dapo"] = Field(
        "naive", description="verl's reward manager -> verl `reward_model.reward_manager`"
    )
    weights: RewardWeights = Field(RewardWeights(), description="Weights of the score's parts (accuracy, format, cot)")
    timeout_s: float = Field(
        1.0,
        gt=0,
        description="Scoring time allowed per response, in seconds "
        "-> verl `+custom_reward_function.reward_kwargs.timeout_s`",
    )


class LoggingSpec(Strict):
    """Where a run's metrics and logs go."""

    project: str = Field(
        description="Project name, a directory level under logging.dir and checkpoint.dir "
        "-> verl `trainer.project_name`"
    )
    experiment: str = Field(
        description="Experiment name, the run's directory under the project -> verl `trainer.experiment_name`"
    )
    backends: list[Logger] = Field(
        ["console", "tensorboard"], description="Metric loggers (the watchdog needs console) -> verl `trainer.logger`"
    )
    dir: str = Field(
        "logs",
        description="Log root (relative to the workspace): <dir>/<project>/<experiment> "
        "-> env `TENSORBOARD_DIR`, `VERL_FILE_LOGGER_PATH`, `SWANLAB_LOG_DIR`",
    )
    val_generations_to_log: int = Field(
        0, ge=0, description="Validation samples logged per validation -> verl `trainer.log_val_generations`"
    )


class CheckpointSpec(Strict):
    """Checkpoints, validation frequency and resuming."""

    dir: str = Field(
        "checkpoints",
        description="Checkpoint root (relative to the workspace): "
        "<dir>/<project>/<experiment> -> verl `trainer.default_local_dir`",
    )
    save_freq: int = Field(20, ge=-1, description="Save every this many steps (-1: never) -> verl `trainer.save_freq`")
    test_freq: int = Field(
        5, ge=-1, description="Validate every this many steps (-1: never) -> verl `trainer.test_freq`"
    )
    resume: Literal["auto", "disable"] = Field(
        "auto",
        description="auto: from the newest complete checkpoint -> verl `trainer.resume_mode` "
        "(resume_path + `trainer.resume_from_path`)",
    )
    # Complete checkpoints kept (verl's trainer.max_actor_ckpt_to_keep); old ones go once the new one is
    # complete, so a stop during a save keeps them all (npu_rl.patches.checkpoint_rotation). None: keep every one.
    max_to_keep: int | None = Field(
        None, gt=0, description="Complete checkpoints kept; None: all -> verl `trainer.max_actor_ckpt_to_keep`"
    )
    val_before_train: bool = Field(
        False, description="Validate before the first step -> verl `trainer.val_before_train`"
    )


class WatchdogSpec(Strict):
    """When a run counts as hung: no training step completed within the allowance.

    A hung collective (an HCCL notify/socket wait, a device hang) holds every rank until
    ``HCCL_EXEC_TIMEOUT``, often 30 minutes or more, while Ray still sees live nodes. The
    launcher times the steps it sees; after the first, the allowance is ``stall_factor`` times
    the median step so far, never less than ``floor_s`` (validation and checkpoint saves fall
    between step lines and must fit in it). Before the first step the allowance is
    ``first_step_s``: model load, the first rollout and, on NPU, graph compilation. verl validates
    (``checkpoint.test_freq``) and saves (``checkpoint.save_freq``) inside a step, before its line:
    such a step gets ``checkpoint_s`` more.
    """

    enabled: bool = Field(True, description="Stop a hung run with its stacks (exit HUNG); npu-rl only")
    stall_factor: float = Field(
        10.0, ge=1, description="Allowance after the first step, in median step times; npu-rl only"
    )
    floor_s: float = Field(600.0, gt=0, description="Least allowance between two steps, in seconds; npu-rl only")
    first_step_s: float = Field(3600.0, gt=0, description="Allowance before the first step, in seconds; npu-rl only")
    checkpoint_s: float = Field(
        0.0, ge=0, description="Extra allowance for a step that validates or saves, in seconds; npu-rl only"
    )
    # Each process's py-spy dump may take this long; a stopped or dead process must not hold the dump.
    dump_timeout_s: float = Field(
        20.0, gt=0, description="Time allowed for each process's stack dump, in seconds; npu-rl only"
    )


class ConsistencySpec(Strict):
    """The train/rollout consistency gate (npu_rl.patches.consistency): at a run's first step, and every
    ``every`` steps, run the old_log_prob pass the recipe skips and compare the trainer's token
    probabilities with the rollout's own; verl's ``training/rollout_probs_diff_mean`` above
    ``max_probs_diff_mean``, or its ``training/rollout_actor_probs_pearson_corr`` below ``min_probs_corr``, stops
    the run before the optimizer step (exit INCONSISTENT). On the seeds' line (verl 0.6.1) only with
    ``optimizations.recompute_old_log_prob: false``; on verl 0.9 with the pass verl runs every step
    (``Recipe.consistency_gated``)."""

    enabled: bool = Field(
        False, description="Run the gate (patch consistency) -> verl `actor_rollout_ref.rollout.calculate_log_probs`"
    )
    every: int = Field(
        0, ge=0, description="Check every this many steps (0: the first step only) -> env `NPU_RL_CONSISTENCY`"
    )
    max_probs_diff_mean: float = Field(
        0.05,
        gt=0,
        le=1,
        description="Largest mean |train - rollout| token probability before the run stops -> env `NPU_RL_CONSISTENCY`",
    )
    min_probs_corr: float = Field(
        0.8,
        ge=-1,
        le=1,
        description="Smallest Pearson correlation of train and rollout token probabilities before the run stops "
        "(a sync that never lands leaves both near zero: a small mean difference, no correlation) -> env "
        "`NPU_RL_CONSISTENCY`",
    )


class OptimizationsSpec(Strict):
    """Speed-ups that change what verl computes."""

    # False: skip verl's old_log_prob forward and reuse the update's own detached
    # log-probs (exact only on-policy with one optimizer update per step).
    recompute_old_log_prob: bool = Field(
        True,
        description="False: skip verl's old_log_prob pass -> verl 0.6.1 "
        "`+actor_rollout_ref.actor.recompute_old_log_prob` (patch old_log_prob), verl 0.9.0 "
        "`algorithm.rollout_correction.bypass_mode` (verl's bypass mode)",
    )


class ReshardSpec(Strict):
    """Train-to-rollout weight sync through npu_rl.reshard's alltoallv plan (megatron, NPU only)."""

    enabled: bool = Field(
        False,
        description="Sync weights through npu_rl.reshard (patch reshard) -> verl 0.6.1 "
        "`actor_rollout_ref.actor.megatron.use_mbridge` False (verl 0.9.0 exports through mbridge, which the "
        "patch replaces)",
    )
    # Per-rank staging (send + receive) cap of one alltoallv round; bounds the sync's extra memory.
    bucket_mb: int = Field(
        64, gt=0, description="Per-rank staging cap of one alltoallv round, in MiB -> env `NPU_RL_RESHARD_BUCKET_MB`"
    )


class SandboxSpec(Strict):
    """Where the policy's code runs (code rewards, tool calls): npu-rl's sandbox, ``npu-rl sandbox serve``
    (docs/sandbox.md), or a SandboxFusion-compatible service of your own at ``url``. A launch waits for it
    to answer and exports its ``/run_code`` to every process; on Kubernetes the job's manifest runs it as
    pods of their own beside the training pods."""

    enabled: bool = Field(False, description="The run sends the policy's code to a sandbox; npu-rl only")
    url: str | None = Field(
        None,
        pattern=r"^https?://[^\s/]+(/\S*)?/run_code$",
        description="Its /run_code; None: npu-rl's own on this host, http://127.0.0.1:<port>/run_code (the "
        "rendered manifests set the job's sandbox Service) -> env `NPU_RL_SANDBOX_URL`",
    )
    port: int = Field(8080, ge=1, le=65535, description="Its port (SandboxFusion's 8080); npu-rl only")
    replicas: int = Field(1, ge=1, description="Sandbox pods of a Kubernetes job (`npu-rl render k8s`); npu-rl only")
    slots: int = Field(4, ge=1, description="Executions at once in one sandbox (`--slots`), a CPU each; npu-rl only")
    memory_mb: int = Field(
        1024, ge=16, description="Memory of one execution, MiB (`--memory-mb`, the most a request may ask); npu-rl only"
    )
    wait_s: float = Field(
        300.0, gt=0, description="How long a launch waits for the sandbox to answer, then stops; npu-rl only"
    )

    @property
    def run_code_url(self) -> str:
        return self.url or f"http://127.0.0.1:{self.port}/run_code"


class WeightConversionSpec(Strict):
    """Prepare job: HF checkpoint -> (bf16) -> Megatron dist checkpoint, run once before training."""

    hf_path: str = Field(description="HF checkpoint as published (DeepSeek-R1 ships FP8 weights); npu-rl only")
    bf16_path: str | None = Field(
        None, description="Where the FP8->BF16 cast writes; None when already bf16; npu-rl only"
    )
    mcore_path: str = Field(
        description="Megatron dist checkpoint the actor and ref load -> verl "
        "`actor_rollout_ref.{actor,ref}.megatron.dist_checkpointing_path`"
    )
    # The FP8 -> BF16 cast is npu-rl's own (`npu-rl model fp8-cast`, CPU only). The HF -> Megatron
    # converter is verl's scripts/converter_hf_to_mcore.py; None: the one next to the installed verl
    # (/opt/verl/scripts in the image; the PyPI wheel installs it as site-packages/scripts).
    converter_script: str | None = Field(
        None, description="verl's converter_hf_to_mcore.py, when not the one of the installed verl; npu-rl only"
    )
    # verl's converter runs under torchrun for DeepSeek-V3 / Qwen MoE, one pipeline stage of the
    # conversion per process (scripts/converter_hf_to_mcore.py _init_args example and
    # support_distributed_convert). Every process loads the whole HF model into host memory, hence one
    # per node by default; the dist checkpoint it writes is independent of the training layout.
    distributed: bool = Field(
        True, description="Run the converter on every node of the job (multi-node recipes); npu-rl only"
    )
    nproc_per_node: int = Field(
        1, ge=1, description="Converter processes per node (each holds the HF model in RAM); npu-rl only"
    )


class PrepareSpec(Strict):
    """Jobs run once before training (`npu-rl prepare`)."""

    weight_conversion: WeightConversionSpec | None = Field(
        None, description="HF -> Megatron dist checkpoint conversion (megatron recipes); None: none"
    )


# Variable names that hold secrets (HF_TOKEN, SWANLAB_API_KEY, WANDB_API_KEY, RAY_AUTH_TOKEN, ..._PASSWORD).
# Whole words of the name only: TOKENIZERS_PARALLELISM is no secret.
SECRET_NAME = re.compile(
    r"(^|_)(TOKEN|API_KEY|SECRET|SECRET_KEY|PASSWORD|PASSWD|CREDENTIALS?|ACCESS_KEY)(_|$)", re.IGNORECASE
)


class Recipe(Strict):
    """One GRPO run, from the model and data to the cluster it runs on."""

    name: str = Field(description="Recipe name (the file's stem by convention); names k8s jobs; npu-rl only")
    description: str = Field("", description="One line on what the recipe trains; npu-rl only")
    stack: str | None = Field(
        None,
        description="The stack line the recipe runs on, configs/stacks/<stack>.yaml (CANN, torch_npu, vLLM, "
        "verl, ...); its image or environment runs it and no other. None: configs/versions.yaml's "
        "stacks.default; npu-rl only",
    )
    model: ModelSpec = Field(description="The policy model")
    data: DataSpec = Field(description="Training and validation prompts")
    algorithm: AlgorithmSpec = Field(description="GRPO algorithm, batch sizes and optimizer")
    actor: ActorSpec = Field(ActorSpec(), description="Actor and reference: backend, offload, Megatron layout")
    rollout: RolloutSpec = Field(RolloutSpec(), description="Generation engine")
    resources: ResourcesSpec = Field(description="Platform, nodes and devices")
    reward: RewardSpec = Field(RewardSpec(), description="Reward function")
    logging: LoggingSpec = Field(description="Project, experiment and metric loggers")
    checkpoint: CheckpointSpec = Field(CheckpointSpec(), description="Checkpoints, validation and resume")
    watchdog: WatchdogSpec = Field(WatchdogSpec(), description="Hung-run detection by step times; npu-rl only")
    optimizations: OptimizationsSpec = Field(OptimizationsSpec(), description="Speed-ups that change verl's passes")
    consistency: ConsistencySpec = Field(ConsistencySpec(), description="Train/rollout probability gate; npu-rl only")
    reshard: ReshardSpec = Field(ReshardSpec(), description="Megatron -> rollout weight sync by alltoallv (NPU)")
    prepare: PrepareSpec = Field(PrepareSpec(), description="Jobs run once before training (`npu-rl prepare`)")
    sandbox: SandboxSpec = Field(SandboxSpec(), description="Where the policy's code runs (code rewards, tools)")
    tools: ToolsSpec = Field(ToolsSpec(), description="Tools of multi-turn rollouts (rollout.multi_turn)")
    sft: SFTSpec | None = Field(
        None, description="Supervised fine-tuning instead of GRPO (verl 0.9's SFT trainer); None: GRPO"
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment exported to every process "
        "(the driver and, through verl `+ray_kwargs.ray_init.runtime_env.env_vars`, every "
        "Ray worker); never a secret (a token, key or password: pass those in the environment)",
    )
    verl_overrides: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra hydra overrides for verl, dotted keys -> values, applied last so they win (escape hatch); "
        "keys in verl 0.6.1's names move where the stack line's verl reads them, as the fields' keys do",
    )
    unverified: list[str] = Field(
        default_factory=list,
        description="Fields whose values the source articles do not give (documented guesses); npu-rl only",
    )

    @model_validator(mode="after")
    def _known_stack(self) -> Recipe:
        if self.stack is not None and self.stack not in versions.line_names():
            raise ValueError(
                f"stack {self.stack!r} is no stack line (configs/stacks/ has: {', '.join(versions.line_names())})"
            )
        rollouts = versions.get("verl.rollouts", self.pins)
        if self.rollout.name not in rollouts:
            raise ValueError(
                f"rollout.name {self.rollout.name} is no rollout of stack line {self.stack_line} "
                f"(verl {versions.line_verl(self.stack_line)} samples with {', '.join(rollouts)})"
            )
        return self

    @property
    def stack_line(self) -> str:
        """The stack line's name: ``stack``, or the default line."""
        return self.stack or versions.default_line()

    @property
    def pins(self) -> dict[str, Any]:
        """The versions of the recipe's stack line (npu_rl.versions.load)."""
        return versions.load(stack=self.stack_line)

    @model_validator(mode="after")
    def _no_secrets(self) -> Recipe:
        # A recipe travels in plain text: into ConfigMaps, rendered manifests, verl's argv (runtime_env) and
        # its log. Secrets come from the environment (compose: .env; Kubernetes: a Secret), which Ray's
        # daemons and workers inherit.
        held = sorted(k for k in self.env if SECRET_NAME.search(k))
        if held:
            raise ValueError(
                f"env holds {', '.join(held)}, which look like secrets; set them in the environment of "
                "`npu-rl train` (docker compose: compose/.env; Kubernetes: a Secret in the pod's env), "
                "never in a recipe"
            )
        return self

    @model_validator(mode="after")
    def _watchdog_heartbeat(self) -> Recipe:
        # The launcher times the steps by verl's console lines ("step:N - ..."); without them every run
        # would look hung at watchdog.first_step_s.
        if self.watchdog.enabled and "console" not in self.logging.backends:
            raise ValueError(
                "watchdog.enabled needs 'console' in logging.backends (the watchdog times verl's "
                "console step lines); add it or set watchdog.enabled: false"
            )
        return self

    @model_validator(mode="after")
    def _rotation_needs_synchronous_saves(self) -> Recipe:
        # Old checkpoints go once the trainer's save returns (npu_rl.patches.checkpoint_rotation); Megatron's
        # async_save returns before its shards are written, so the only complete one could go first.
        o = self.verl_overrides
        rotates = (
            self.checkpoint.max_to_keep is not None
            or o.get("trainer.max_actor_ckpt_to_keep") is not None
            or str(o.get("trainer.remove_previous_ckpt_in_save", False)).lower() == "true"
        )
        if rotates and str(o.get("actor_rollout_ref.actor.checkpoint.async_save", False)).lower() == "true":
            raise ValueError(
                "checkpoint.max_to_keep needs synchronous saves: actor_rollout_ref.actor.checkpoint."
                "async_save returns before the checkpoint is written, so the rotation could remove "
                "the only complete one; drop async_save or max_to_keep"
            )
        return self

    @property
    def consistency_gated(self) -> bool:
        """verl 0.6.1: the gate runs where the pass is skipped; with the pass on every step, verl compares the
        rollout's log-probs itself wherever the rollout returns them (training/rollout_probs_diff_*), and never
        stops. verl 0.9: the gate reads verl's measures of the pass on its steps, where it runs the pass even
        with the skip on (verl's bypass mode; npu_rl.patches.consistency)."""
        if not self.consistency.enabled:
            return False
        return not self.optimizations.recompute_old_log_prob or versions.line_verl(self.stack_line) != "0.6.1"

    @model_validator(mode="after")
    def _batches_split_evenly(self) -> Recipe:
        a, world = self.algorithm, self.resources.world_size
        if self.sft is not None:
            return self  # _sft_runs_on_its_trainer
        if a.ppo_mini_batch_size > a.train_batch_size:
            raise ValueError(
                f"algorithm.ppo_mini_batch_size ({a.ppo_mini_batch_size}) exceeds algorithm.train_batch_size "
                f"({a.train_batch_size})"
            )
        if a.train_batch_size % a.ppo_mini_batch_size:
            raise ValueError(
                f"algorithm.train_batch_size ({a.train_batch_size}) is not divisible by "
                f"algorithm.ppo_mini_batch_size ({a.ppo_mini_batch_size})"
            )
        if self.actor.strategy != "megatron":
            # verl shards each mini-batch's rollouts (mini * n) over all data-parallel ranks.
            if (a.ppo_mini_batch_size * a.rollout_n) % world:
                raise ValueError(
                    f"algorithm.ppo_mini_batch_size * algorithm.rollout_n ({a.ppo_mini_batch_size} * {a.rollout_n}) "
                    f"is not divisible by resources.nnodes * resources.devices_per_node ({world})"
                )
            if (a.train_batch_size * a.rollout_n) % world:
                raise ValueError(
                    f"algorithm.train_batch_size * algorithm.rollout_n is not divisible by the {world} devices"
                )
        # Each worker normalises the mini-batch to its data-parallel share and splits it into micro-batches
        # (verl 0.6.1 fsdp_workers.py / megatron_workers.py ActorRolloutRefWorker.__init__:
        # ppo_mini_batch_size *= rollout.n; //= data-parallel size); a remainder fails in every worker.
        dp = world
        if self.actor.strategy == "megatron":
            dp = world // max(1, self.actor.tensor_model_parallel_size * self.actor.pipeline_model_parallel_size)
        per_rank = a.ppo_mini_batch_size * a.rollout_n // max(1, dp)
        micro = a.ppo_micro_batch_size_per_device
        if per_rank < 1 or per_rank % micro:
            what = "is larger than" if micro > per_rank else "does not divide"
            raise ValueError(
                f"algorithm.ppo_micro_batch_size_per_device ({micro}) {what} the per-rank mini-batch "
                f"(ppo_mini_batch_size * rollout_n / {dp} data-parallel ranks = {per_rank})"
            )
        return self

    @model_validator(mode="after")
    def _model_parallel_layouts_fit_the_devices(self) -> Recipe:
        world = self.resources.world_size
        if world % self.rollout.tensor_model_parallel_size:
            raise ValueError(
                f"rollout.tensor_model_parallel_size ({self.rollout.tensor_model_parallel_size}) does not divide "
                f"the {world} devices"
            )
        if self.actor.strategy == "megatron":
            act = self.actor
            mp = act.tensor_model_parallel_size * act.pipeline_model_parallel_size
            if world % mp:
                raise ValueError(
                    f"actor TP*PP ({act.tensor_model_parallel_size}*{act.pipeline_model_parallel_size}) does not "
                    f"divide the {world} devices"
                )
            if act.layers_per_stage is not None and len(act.layers_per_stage) != act.pipeline_model_parallel_size:
                raise ValueError(
                    f"actor.layers_per_stage has {len(act.layers_per_stage)} entries but "
                    f"actor.pipeline_model_parallel_size is {act.pipeline_model_parallel_size}"
                )
        return self

    @model_validator(mode="after")
    def _old_log_prob_skip_needs_one_update_per_step(self) -> Recipe:
        a = self.algorithm
        if not self.optimizations.recompute_old_log_prob:
            if a.ppo_epochs != 1 or a.ppo_mini_batch_size != a.train_batch_size:
                raise ValueError(
                    "optimizations.recompute_old_log_prob=false is exact only with one optimizer update per step, "
                    f"but algorithm.ppo_epochs={a.ppo_epochs} and algorithm.ppo_mini_batch_size="
                    f"{a.ppo_mini_batch_size} != algorithm.train_batch_size={a.train_batch_size}"
                )
        return self

    @model_validator(mode="after")
    def _megatron_runs_on_npus(self) -> Recipe:
        if self.reshard.enabled and (self.actor.strategy != "megatron" or self.resources.platform == "cpu"):
            raise ValueError("reshard.enabled needs actor.strategy megatron on an NPU platform")
        if self.actor.strategy == "megatron" and self.resources.platform == "cpu":
            # Past gloo (the CPU patch) and the model-parallel groups, verl 0.6.1's Megatron worker seeds
            # megatron-core's RNG tracker (megatron_workers.py:96 set_random_seed, since torch.cpu counts one
            # device), which keeps CUDA RNG states (megatron-core 0.12.1 tensor_parallel/random.py:194); its
            # parallel layers are allocated on the accelerator too. tests/reshard/test_megatron_recipe.py
            # shows the stop.
            raise ValueError(
                "actor.strategy megatron needs NPUs: megatron-core keeps its RNG states and parallel layers on "
                "the accelerator; on platform cpu use actor.strategy fsdp"
            )
        return self

    @model_validator(mode="after")
    def _vllm_ascend_settings_need_vllm_on_npus(self) -> Recipe:
        ro, world = self.rollout, self.resources.world_size
        if ro.expert_parallel:
            if ro.name != "vllm" or self.resources.platform == "cpu":
                raise ValueError("rollout.expert_parallel needs rollout.name vllm on an NPU platform")
            if ro.data_parallel_size is None:
                raise ValueError("rollout.expert_parallel needs rollout.data_parallel_size (vLLM's DP size)")
            if world % (ro.tensor_model_parallel_size * ro.data_parallel_size):
                raise ValueError(
                    f"rollout.tensor_model_parallel_size * rollout.data_parallel_size "
                    f"({ro.tensor_model_parallel_size} * {ro.data_parallel_size}) does not divide the {world} devices"
                )
        elif ro.data_parallel_size not in (None, 1):
            raise ValueError("rollout.data_parallel_size > 1 needs rollout.expert_parallel (vLLM DP is for MoE EP)")
        if (ro.graph_mode or ro.ascend_scheduler) and (ro.name != "vllm" or self.resources.platform == "cpu"):
            raise ValueError("rollout.graph_mode / rollout.ascend_scheduler are vllm-ascend settings (NPU, vllm)")
        return self

    @model_validator(mode="before")
    @classmethod
    def _sft_fills_the_rl_batch(cls, data: Any) -> Any:
        # An SFT recipe's algorithm gives the batch and the optimizer; its RL settings would be ignored, so
        # they are refused, and the RL batch fields (which every recipe carries) take the SFT batch's values.
        if not isinstance(data, dict) or not isinstance(data.get("sft"), dict):
            return data
        algorithm = data.get("algorithm")
        if not isinstance(algorithm, dict):
            return data
        micro = data["sft"].get("micro_batch_size_per_device")
        filled = {"rollout_n": 1, "ppo_mini_batch_size": algorithm.get("train_batch_size")}
        if micro is not None:
            filled["ppo_micro_batch_size_per_device"] = micro
        # The filled values themselves pass: a dumped recipe (the rendered pods' copy, `npu-rl recipe show`)
        # carries them.
        rl = sorted(k for k in RL_ONLY_ALGORITHM & set(algorithm) if k not in filled or algorithm[k] != filled[k])
        if rl:
            raise ValueError(
                f"algorithm.{rl[0]} is an RL setting and this is an SFT recipe (sft is set): remove it; the SFT "
                "trainer reads algorithm.train_batch_size, lr, total_epochs, total_training_steps and seed"
            )
        return {**data, "algorithm": {**algorithm, **filled}}

    @model_validator(mode="after")
    def _sft_runs_on_its_trainer(self) -> Recipe:
        sft = self.sft
        if sft is None:
            return self
        if versions.line_verl(self.stack_line) == "0.6.1":
            raise ValueError(
                f"sft on stack line {self.stack_line}: npu-rl runs SFT through verl 0.9's SFT trainer "
                "(verl.trainer.sft_trainer); set stack: cann9.1-verl0.9"
            )
        if self.resources.nnodes != 1:
            raise ValueError(
                f"sft with resources.nnodes {self.resources.nnodes}: npu-rl runs SFT on one node under torchrun, "
                "as upstream's SFT scripts do; set resources.nnodes: 1"
            )
        if self.actor.strategy == "megatron":
            raise ValueError("sft trains with FSDP (verl's SFT engine fsdp/fsdp2): set actor.strategy fsdp or fsdp2")
        rl = [
            name
            for name, on in (
                ("rollout.multi_turn.enabled", self.rollout.multi_turn.enabled),
                ("tools.code_interpreter.enabled", self.tools.code_interpreter.enabled),
                ("sandbox.enabled", self.sandbox.enabled),
                ("consistency.enabled", self.consistency.enabled),
                ("reshard.enabled", self.reshard.enabled),
            )
            if on
        ]
        if rl:
            raise ValueError(f"{rl[0]} is for GRPO rollouts and this is an SFT recipe (sft is set): remove it")
        for key in ("save_freq", "test_freq"):
            if getattr(self.checkpoint, key) == 0:
                # The SFT trainer takes the step modulo both (trainer/sft_trainer.py fit): 0 divides by zero.
                raise ValueError(f"checkpoint.{key} 0 in an SFT recipe: verl's SFT trainer needs -1 (never) or a step")
        world, sp = self.resources.world_size, sft.ulysses_sequence_parallel_size
        if sp > 1 and not self.model.use_remove_padding:
            # The FSDP engine refuses it when it starts (workers/engine/fsdp/transformer_impl.py:129-133).
            raise ValueError("sft.ulysses_sequence_parallel_size above 1 needs model.use_remove_padding: true")
        if world % sp:
            raise ValueError(f"sft.ulysses_sequence_parallel_size {sp} does not divide the {world} devices")
        dp = world // sp
        if self.algorithm.train_batch_size % dp:
            raise ValueError(
                f"algorithm.train_batch_size ({self.algorithm.train_batch_size}) is not divisible by the {dp} "
                f"data-parallel ranks ({world} devices / sft.ulysses_sequence_parallel_size {sp})"
            )
        per_rank = self.algorithm.train_batch_size // dp
        if not sft.use_dynamic_bsz and per_rank % sft.micro_batch_size_per_device:
            raise ValueError(
                f"sft.micro_batch_size_per_device ({sft.micro_batch_size_per_device}) does not divide the per-rank "
                f"batch (algorithm.train_batch_size / {dp} data-parallel ranks = {per_rank})"
            )
        return self

    @model_validator(mode="after")
    def _training_settings_match_the_strategy(self) -> Recipe:
        if self.actor.strategy == "megatron" and self.model.dtype is not None:
            raise ValueError(
                "model.dtype is for the fsdp strategies (verl's fsdp_config.dtype); megatron keeps bfloat16"
            )
        if self.actor.strategy != "megatron" and (self.actor.recompute is not None or self.actor.swap_optimizer):
            raise ValueError("actor.recompute / actor.swap_optimizer are megatron settings (actor.strategy megatron)")
        if (
            self.actor.strategy == "megatron"
            and self.model.enable_gradient_checkpointing
            and self.actor.recompute is None
        ):
            raise ValueError(
                "model.enable_gradient_checkpointing with actor.strategy megatron needs actor.recompute "
                "(verl 0.6.1 megatron ignores the flag; recompute is Megatron-core's recompute_* settings)"
            )
        return self

    @model_validator(mode="after")
    def _tools_need_their_loop(self) -> Recipe:
        mt, code = self.rollout.multi_turn, self.tools.code_interpreter
        if mt.enabled and versions.line_verl(self.stack_line) == "0.6.1":
            raise ValueError(
                f"rollout.multi_turn on stack line {self.stack_line}: npu-rl runs tool calls through verl 0.9's "
                "tool agent loop; set stack: cann9.1-verl0.9"
            )
        if mt.enabled and not code.enabled:
            raise ValueError("rollout.multi_turn.enabled needs a tool: set tools.code_interpreter.enabled: true")
        if code.enabled and not mt.enabled:
            raise ValueError("tools.code_interpreter is called in multi-turn rollouts: set rollout.multi_turn.enabled")
        if code.enabled and not self.sandbox.enabled:
            raise ValueError("tools.code_interpreter runs the policy's code in the sandbox: set sandbox.enabled: true")
        if code.enabled and self.sandbox.url is None:
            # npu-rl's own sandbox answers a request past its limits with a 400: every call would fail.
            limit = self.sandbox.memory_mb
            if code.memory_mb != -1 and not 16 <= code.memory_mb <= limit:
                raise ValueError(
                    f"tools.code_interpreter.memory_mb {code.memory_mb} is outside what the sandbox serves "
                    f"(16..sandbox.memory_mb {limit}, or -1 for its default)"
                )
            if code.run_timeout_s > SANDBOX_CAPS.max_run_timeout:
                raise ValueError(
                    f"tools.code_interpreter.run_timeout_s {code.run_timeout_s:g} is over the sandbox's "
                    f"{SANDBOX_CAPS.max_run_timeout:g} s (npu-rl sandbox serve --max-run-timeout)"
                )
        return self

    @model_validator(mode="after")
    def _cpu_samples_with_hf_or_vllm(self) -> Recipe:
        if self.resources.platform == "cpu" and self.rollout.name not in ("hf", "vllm"):
            raise ValueError(
                f"resources.platform cpu samples with rollout.name hf, or vllm in the cpu-vllm image "
                f"(got {self.rollout.name!r})"
            )
        return self

    @model_validator(mode="after")
    def _no_prefix_cache_where_ipex_decodes(self) -> Recipe:
        # IPEX's decode kernel takes sequences sharing a KV block for beams and raises or attends over the
        # wrong lengths on a prefix-cached GRPO batch (tests/containers/ipex_decode_probe.py); the cpu patch
        # turns verl's default off there, and a recipe asking for the cache is refused rather than overridden.
        asked = self.rollout.enable_prefix_caching or any(
            key.lstrip("+~").endswith("rollout.enable_prefix_caching") and str(value).lower() == "true"
            for key, value in self.verl_overrides.items()
        )
        if (
            self.resources.platform == "cpu"
            and self.rollout.name == "vllm"
            and asked
            and versions.get("cpu_vllm.ipex_decode", self.pins)
        ):
            raise ValueError(
                "rollout.enable_prefix_caching true on CPU: vLLM's CPU attention decodes with IPEX on this stack "
                "line, which mistakes a prompt's samples sharing its cached block for beams and decodes them "
                "wrong; leave it unset (the cpu patch turns the cache off)"
            )
        return self
