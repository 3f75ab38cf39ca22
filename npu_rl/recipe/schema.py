"""The recipe schema: one YAML file describes a whole GRPO run.

Every model forbids unknown keys, so a typo in a recipe is an error naming the
field rather than a silently ignored setting.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
    path: str = Field(description="Local directory with the HF weights (relative to the workspace)")
    hub_id: str | None = Field(None, description="Hub repo id used by `npu-rl model fetch`")
    tokenizer_config: str | None = Field(
        None,
        description="tokenizer_config.json applied over the model's own (chat template with the system prompt); "
        "relative to configs/ or absolute",
    )
    enable_gradient_checkpointing: bool = True
    use_remove_padding: bool = False
    attn_implementation: str | None = Field(
        None, description="Forced into the HF config (e.g. 'eager' on CPU, where sdpa/flash kernels are absent)"
    )
    trust_remote_code: bool = False
    dtype: Literal["bfloat16", "float32"] | None = Field(
        None,
        description="What the actor, its reference and the rollout compute in (fsdp strategies); None keeps "
        "verl's bfloat16. float32 on a CPU without bfloat16 arithmetic, where torch emulates it",
    )


class DataSpec(Strict):
    train_files: list[str] = Field(min_length=1)
    val_files: list[str] = Field(min_length=1)
    max_prompt_length: int = Field(512, gt=0)
    max_response_length: int = Field(1024, gt=0)
    filter_overlong_prompts: bool = True
    truncation: Literal["error", "left", "right", "middle"] = "error"
    prompt_key: str = "prompt"
    val_batch_size: int | None = Field(None, gt=0)
    shuffle: bool = True
    dataloader_num_workers: int | None = Field(None, ge=0)
    # The raw data's shape: MATH-lighteval parquet (`npu-rl data math`) or DeepScaleR-Preview's
    # deepscaler.json (`npu-rl data deepscaler`, what cann-recipes-train's DeepSeek-R1 run trains on).
    format: Literal["math-lighteval", "deepscaler"] = "math-lighteval"
    # Where the raw data is read from (offline is normal); the hub dataset is the fallback.
    source_dir: str | None = None
    hub_dataset: str = "DigitalLearningGmbH/MATH-lighteval"


class AlgorithmSpec(Strict):
    adv_estimator: Literal["grpo", "gae", "rloo", "reinforce_plus_plus", "remax", "opo", "grpo_passk"] = "grpo"
    train_batch_size: int = Field(gt=0)
    rollout_n: int = Field(8, gt=0)
    lr: float = Field(1e-6, gt=0)
    lr_warmup_steps: int = Field(0, ge=0)
    ppo_mini_batch_size: int = Field(gt=0)
    ppo_micro_batch_size_per_device: int = Field(gt=0)
    ppo_epochs: int = Field(1, gt=0)
    use_kl_loss: bool = True
    kl_loss_coef: float = Field(0.001, ge=0)
    kl_loss_type: Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full"] = "low_var_kl"
    entropy_coeff: float = 0.0
    use_kl_in_reward: bool = False
    critic_warmup: int = Field(0, ge=0)
    total_epochs: int = Field(1, gt=0)
    total_training_steps: int | None = Field(None, gt=0)
    # trainer.balance_batch (reorders the batch over DP ranks by length); None leaves verl's default (True).
    balance_batch: bool | None = None
    seed: int = 1


class RecomputeSpec(Strict):
    """Megatron activation recompute (Megatron-core TransformerConfig recompute_*; verl 0.6.1's default is none)."""

    granularity: Literal["full", "selective"] = "full"
    method: Literal["uniform", "block"] | None = "block"
    num_layers: int | None = Field(None, gt=0)


class ActorSpec(Strict):
    strategy: Literal["fsdp", "fsdp2", "megatron"] = "fsdp"
    param_offload: bool = False
    optimizer_offload: bool = False
    ref_param_offload: bool = True
    log_prob_micro_batch_size_per_device: int = Field(8, gt=0)
    # The ref's own micro-batch for its log-prob pass; None: the actor's value.
    ref_log_prob_micro_batch_size_per_device: int | None = Field(None, gt=0)
    # megatron only: recompute (required when model.enable_gradient_checkpointing) and MindSpeed's
    # swap optimizer (optimizer state swapped to host between steps, read by MindSpeed's repatch).
    recompute: RecomputeSpec | None = None
    swap_optimizer: bool = False
    # Megatron layout (strategy megatron only).
    tensor_model_parallel_size: int = Field(1, gt=0)
    pipeline_model_parallel_size: int = Field(1, gt=0)
    expert_model_parallel_size: int = Field(1, gt=0)
    layers_per_stage: list[int] | None = None


class RolloutSpec(Strict):
    name: Literal["vllm", "sglang", "hf"] = "vllm"
    tensor_model_parallel_size: int = Field(1, gt=0)
    expert_parallel: bool = False
    gpu_memory_utilization: float = Field(0.8, gt=0, le=1)
    enable_chunked_prefill: bool = False
    enforce_eager: bool = False
    free_cache_engine: bool = True
    temperature: float = Field(1.0, ge=0)
    do_sample: bool = True
    max_num_batched_tokens: int | None = Field(None, gt=0)
    # Sampling beyond temperature; None leaves verl's default (top_k -1, top_p 1.0).
    top_k: int | None = Field(None, ge=-1)
    top_p: float | None = Field(None, gt=0, le=1)
    max_num_seqs: int | None = Field(None, gt=0)
    enable_prefix_caching: bool | None = None
    # vLLM's data-parallel size for expert_parallel (VLLM_DP_SIZE): experts spread over TP x DP ranks.
    data_parallel_size: int | None = Field(None, gt=0)
    # vllm-ascend additional_config: torchair graph mode and the Ascend scheduler (NPU only).
    graph_mode: bool = False
    ascend_scheduler: bool = False


class ResourcesSpec(Strict):
    platform: Platform
    nnodes: int = Field(1, gt=0)
    devices_per_node: int = Field(gt=0)
    # Atlas A3 cluster type, which decides the node label MindCluster schedules on (npu_rl.render.k8s):
    # an A3 box server, an Atlas 900 A3 SuperPoD or an Atlas 9000 A3 SuperPoD. None: the platform's default.
    cluster: Literal["box", "superpod-900", "superpod-9000"] | None = None

    @model_validator(mode="after")
    def _cluster_is_a3(self) -> "ResourcesSpec":
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
    accuracy: float = Field(0.7, ge=0)
    format: float = Field(0.2, ge=0)
    cot: float = Field(0.1, ge=0)


class RewardSpec(Strict):
    # A module path inside npu_rl (resolved to its installed file) or a .py file path.
    function: str = Field("npu_rl.reward.math", min_length=1)
    name: str = Field("compute_score", min_length=1)
    manager: Literal["naive", "batch", "prime", "dapo"] = "naive"
    weights: RewardWeights = RewardWeights()
    timeout_s: float = Field(1.0, gt=0)


class LoggingSpec(Strict):
    project: str
    experiment: str
    backends: list[Logger] = ["console", "tensorboard"]
    dir: str = "logs"
    val_generations_to_log: int = Field(0, ge=0)


class CheckpointSpec(Strict):
    dir: str = "checkpoints"
    save_freq: int = Field(20, ge=-1)
    test_freq: int = Field(5, ge=-1)
    resume: Literal["auto", "disable"] = "auto"
    # Complete checkpoints kept (verl's trainer.max_actor_ckpt_to_keep); old ones go once the new one is
    # complete, so a stop during a save keeps them all (npu_rl.patches.checkpoint_rotation). None: keep every one.
    max_to_keep: int | None = Field(None, gt=0)
    val_before_train: bool = False


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

    enabled: bool = True
    stall_factor: float = Field(10.0, ge=1)
    floor_s: float = Field(600.0, gt=0)
    first_step_s: float = Field(3600.0, gt=0)
    checkpoint_s: float = Field(0.0, ge=0)
    # Each process's py-spy dump may take this long; a stopped or dead process must not hold the dump.
    dump_timeout_s: float = Field(20.0, gt=0)


class ConsistencySpec(Strict):
    """The train/rollout consistency gate (npu_rl.patches.consistency): at a run's first step, and every
    ``every`` steps, run the old_log_prob pass the recipe skips and compare the trainer's token
    probabilities with the rollout's own; verl's ``training/rollout_probs_diff_mean`` above
    ``max_probs_diff_mean`` stops the run before the optimizer step (exit INCONSISTENT). Only with
    ``optimizations.recompute_old_log_prob: false`` (``Recipe.consistency_gated``)."""

    enabled: bool = False
    every: int = Field(0, ge=0)  # 0: the first step only
    max_probs_diff_mean: float = Field(0.05, gt=0, le=1)


class OptimizationsSpec(Strict):
    # False: skip verl's old_log_prob forward and reuse the update's own detached
    # log-probs (exact only on-policy with one optimizer update per step).
    recompute_old_log_prob: bool = True


class ReshardSpec(Strict):
    """Train-to-rollout weight sync through npu_rl.reshard's alltoallv plan (megatron, NPU only)."""

    enabled: bool = False
    # Per-rank staging (send + receive) cap of one alltoallv round; bounds the sync's extra memory.
    bucket_mb: int = Field(64, gt=0)


class WeightConversionSpec(Strict):
    """Prepare job: HF checkpoint -> (bf16) -> Megatron dist checkpoint, run once before training."""

    hf_path: str = Field(description="HF checkpoint as published (DeepSeek-R1 ships FP8 weights)")
    bf16_path: str | None = Field(None, description="Where the FP8->BF16 cast writes; None when already bf16")
    mcore_path: str = Field(description="Megatron dist checkpoint the actor and ref load")
    # The FP8 -> BF16 cast is npu-rl's own (`npu-rl model fp8-cast`, CPU only). The HF -> Megatron
    # converter is verl's scripts/converter_hf_to_mcore.py; None: the one next to the installed verl
    # (/opt/verl/scripts in the image; the PyPI wheel installs it as site-packages/scripts).
    converter_script: str | None = Field(
        None, description="verl's converter_hf_to_mcore.py, when not the one of the installed verl")
    # verl's converter runs under torchrun for DeepSeek-V3 / Qwen MoE, one pipeline stage of the
    # conversion per process (scripts/converter_hf_to_mcore.py _init_args example and
    # support_distributed_convert). Every process loads the whole HF model into host memory, hence one
    # per node by default; the dist checkpoint it writes is independent of the training layout.
    distributed: bool = Field(True, description="Run the converter on every node of the job (multi-node recipes)")
    nproc_per_node: int = Field(1, ge=1, description="Converter processes per node (each holds the HF model in RAM)")


class PrepareSpec(Strict):
    weight_conversion: WeightConversionSpec | None = None


class Recipe(Strict):
    name: str
    description: str = ""
    model: ModelSpec
    data: DataSpec
    algorithm: AlgorithmSpec
    actor: ActorSpec = ActorSpec()
    rollout: RolloutSpec = RolloutSpec()
    resources: ResourcesSpec
    reward: RewardSpec = RewardSpec()
    logging: LoggingSpec
    checkpoint: CheckpointSpec = CheckpointSpec()
    watchdog: WatchdogSpec = WatchdogSpec()
    optimizations: OptimizationsSpec = OptimizationsSpec()
    consistency: ConsistencySpec = ConsistencySpec()
    reshard: ReshardSpec = ReshardSpec()
    prepare: PrepareSpec = PrepareSpec()
    env: dict[str, str] = Field(default_factory=dict, description="Environment exported to every process")
    verl_overrides: dict[str, Any] = Field(
        default_factory=dict, description="Extra hydra overrides for verl, dotted keys -> values (escape hatch)"
    )
    unverified: list[str] = Field(
        default_factory=list, description="Fields whose values the source articles do not give (documented guesses)"
    )

    @model_validator(mode="after")
    def _watchdog_heartbeat(self) -> "Recipe":
        # The launcher times the steps by verl's console lines ("step:N - ..."); without them every run
        # would look hung at watchdog.first_step_s.
        if self.watchdog.enabled and "console" not in self.logging.backends:
            raise ValueError("watchdog.enabled needs 'console' in logging.backends (the watchdog times verl's "
                             "console step lines); add it or set watchdog.enabled: false")
        return self

    @model_validator(mode="after")
    def _rotation_needs_synchronous_saves(self) -> "Recipe":
        # Old checkpoints go once the trainer's save returns (npu_rl.patches.checkpoint_rotation); Megatron's
        # async_save returns before its shards are written, so the only complete one could go first.
        o = self.verl_overrides
        rotates = self.checkpoint.max_to_keep is not None or o.get("trainer.max_actor_ckpt_to_keep") is not None \
            or str(o.get("trainer.remove_previous_ckpt_in_save", False)).lower() == "true"
        if rotates and str(o.get("actor_rollout_ref.actor.checkpoint.async_save", False)).lower() == "true":
            raise ValueError("checkpoint.max_to_keep needs synchronous saves: actor_rollout_ref.actor.checkpoint."
                             "async_save returns before the checkpoint is written, so the rotation could remove "
                             "the only complete one; drop async_save or max_to_keep")
        return self

    @property
    def consistency_gated(self) -> bool:
        """The gate runs where the pass is skipped; with the pass on every step, verl compares the rollout's
        log-probs itself wherever the rollout returns them (training/rollout_probs_diff_*)."""
        return self.consistency.enabled and not self.optimizations.recompute_old_log_prob

    @model_validator(mode="after")
    def _divisibility(self) -> "Recipe":
        a, r = self.algorithm, self.resources
        world = r.world_size
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
        if not self.optimizations.recompute_old_log_prob:
            if a.ppo_epochs != 1 or a.ppo_mini_batch_size != a.train_batch_size:
                raise ValueError(
                    "optimizations.recompute_old_log_prob=false is exact only with one optimizer update per step, "
                    f"but algorithm.ppo_epochs={a.ppo_epochs} and algorithm.ppo_mini_batch_size="
                    f"{a.ppo_mini_batch_size} != algorithm.train_batch_size={a.train_batch_size}"
                )
        if self.reshard.enabled and (self.actor.strategy != "megatron" or self.resources.platform == "cpu"):
            raise ValueError("reshard.enabled needs actor.strategy megatron on an NPU platform")
        ro = self.rollout
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
        if self.actor.strategy == "megatron" and self.model.dtype is not None:
            raise ValueError("model.dtype is for the fsdp strategies (verl's fsdp_config.dtype); megatron keeps bfloat16")
        if self.actor.strategy != "megatron" and (self.actor.recompute is not None or self.actor.swap_optimizer):
            raise ValueError("actor.recompute / actor.swap_optimizer are megatron settings (actor.strategy megatron)")
        if (self.actor.strategy == "megatron" and self.model.enable_gradient_checkpointing
                and self.actor.recompute is None):
            raise ValueError(
                "model.enable_gradient_checkpointing with actor.strategy megatron needs actor.recompute "
                "(verl 0.6.1 megatron ignores the flag; recompute is Megatron-core's recompute_* settings)"
            )
        if self.resources.platform == "cpu" and self.rollout.name != "hf":
            raise ValueError(f"resources.platform cpu needs rollout.name hf (got {self.rollout.name!r})")
        return self
