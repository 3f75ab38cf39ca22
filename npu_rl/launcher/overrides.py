"""Turn a recipe into the exact ``python -m verl.trainer.main_ppo`` overrides and env."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from .. import run_files
from ..agent import tool_config
from ..agent.outage import FILE_ENV as OUTAGE_ENV
from ..errors import UserError
from ..patches.consistency import ENV as CONSISTENCY_ENV
from ..patches.guard import VERL_0_6_1
from ..patches.old_log_prob import hydra_overrides as old_log_prob_overrides
from ..patches.verl_platforms import CPU as VERL_CPU_PLATFORM
from ..patches.verl_platforms import NPU as VERL_NPU_PLATFORM
from ..platform import cpu_isa
from ..recipe.schema import Recipe
from ..sandbox import client as sandbox_client
from .hydra import hydra_value
from .megatron import megatron_env, megatron_overrides, megatron_patches
from .releases import (
    BYPASS_OLD_LOG_PROB,
    SERVER_ON_CPU,
    for_release,
    rollout_server_on_cpu,
    skips_by_bypass,
    verl_overrides_key,
    verl_release,
)


def reward_function_path(recipe: Recipe) -> str:
    """verl loads the reward by file path; resolve an npu_rl module to its installed file."""
    fn = recipe.reward.function
    if fn.endswith(".py"):
        return str(run_files.resolve(fn))
    try:
        spec = importlib.util.find_spec(fn)
    except (ImportError, ValueError):  # "a.b" where a is no package, an empty or malformed name
        spec = None
    if spec is None or spec.origin is None:
        raise UserError(f"reward.function: module {fn!r} not found")
    return spec.origin


def build_overrides(recipe: Recipe, resume_from: Path | None = None, restart: bool = False) -> list[str]:
    """verl hydra overrides of ``recipe``; ``resume_from`` names the checkpoint to resume (instead of
    verl's latest-marker choice), ``restart`` starts afresh although checkpoint directories exist."""
    release = verl_release(recipe)
    kv = _fields(recipe) + trainer_fields(recipe, resume_from, restart) + _fields_when_set(recipe)
    if recipe.actor.strategy != "megatron":
        kv += _fsdp_fields(recipe)
    if recipe.resources.platform == "cpu":
        kv = rollout_server_on_cpu(release, kv)
    out = [f"{k}={hydra_value(v)}" for k, v in kv]
    out += _appended_fields(recipe)
    out += _old_log_prob_skip(recipe)
    if recipe.actor.strategy == "megatron":
        out += megatron_overrides(recipe)
    out += rollout_engine_overrides(recipe)
    out += _platform_overrides(recipe)
    out = [for_release(o, release) for o in out]
    out += multi_turn_overrides(recipe)
    out += [f"{verl_overrides_key(k, recipe)}={hydra_value(v)}" for k, v in recipe.verl_overrides.items()]
    return out


def trainer_fields(recipe: Recipe, resume_from: Path | None, restart: bool) -> list[tuple[str, Any]]:
    """The ``trainer.`` keys both of verl's trainers read alike (main_ppo's and the SFT trainer's): epochs, the
    run's names and loggers, its layout, its saving and validation, its resume and where its checkpoints go.
    ``resume_from`` names the checkpoint to resume (instead of verl's latest-marker choice), ``restart`` starts
    afresh although checkpoint directories exist."""
    ckpt, log, res = recipe.checkpoint, recipe.logging, recipe.resources
    resume_mode = "disable" if restart else "resume_path" if resume_from else ckpt.resume
    kv: list[tuple[str, Any]] = [
        ("trainer.total_epochs", recipe.algorithm.total_epochs),
        ("trainer.logger", list(log.backends)),
        ("trainer.project_name", log.project),
        ("trainer.experiment_name", log.experiment),
        ("trainer.nnodes", res.nnodes),
        ("trainer.n_gpus_per_node", res.devices_per_node),
        ("trainer.device", res.device),
        ("trainer.save_freq", ckpt.save_freq),
        ("trainer.test_freq", ckpt.test_freq),
        ("trainer.resume_mode", resume_mode),
        ("trainer.default_local_dir", str(run_files.checkpoint_root(recipe))),
    ]
    if resume_from is not None and not restart:
        kv.append(("trainer.resume_from_path", str(resume_from)))
    return kv


def _fields(recipe: Recipe) -> list[tuple[str, Any]]:
    """The keys every GRPO launch sets beside trainer_fields: the recipe's fields and where its data is."""
    a, m, d, act, ro = recipe.algorithm, recipe.model, recipe.data, recipe.actor, recipe.rollout
    ckpt, log = recipe.checkpoint, recipe.logging
    ws = run_files.resolve
    return [
        ("algorithm.adv_estimator", a.adv_estimator),
        ("algorithm.use_kl_in_reward", a.use_kl_in_reward),
        ("data.train_files", [str(ws(f)) for f in d.train_files]),
        ("data.val_files", [str(ws(f)) for f in d.val_files]),
        ("data.train_batch_size", a.train_batch_size),
        ("data.max_prompt_length", d.max_prompt_length),
        ("data.max_response_length", d.max_response_length),
        ("data.filter_overlong_prompts", d.filter_overlong_prompts),
        ("data.truncation", d.truncation),
        ("data.prompt_key", d.prompt_key),
        ("data.shuffle", d.shuffle),
        ("data.seed", a.seed),
        ("actor_rollout_ref.model.path", str(run_files.model_dir(recipe))),
        ("actor_rollout_ref.model.use_remove_padding", m.use_remove_padding),
        ("actor_rollout_ref.model.trust_remote_code", m.trust_remote_code),
        ("actor_rollout_ref.actor.strategy", act.strategy),
        ("actor_rollout_ref.actor.optim.lr", a.lr),
        ("actor_rollout_ref.actor.optim.lr_warmup_steps", a.lr_warmup_steps),
        ("actor_rollout_ref.actor.ppo_mini_batch_size", a.ppo_mini_batch_size),
        ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", a.ppo_micro_batch_size_per_device),
        ("actor_rollout_ref.actor.ppo_epochs", a.ppo_epochs),
        ("actor_rollout_ref.actor.use_kl_loss", a.use_kl_loss),
        ("actor_rollout_ref.actor.kl_loss_coef", a.kl_loss_coef),
        ("actor_rollout_ref.actor.kl_loss_type", a.kl_loss_type),
        ("actor_rollout_ref.actor.entropy_coeff", a.entropy_coeff),
        ("actor_rollout_ref.rollout.name", ro.name),
        ("actor_rollout_ref.rollout.n", a.rollout_n),
        ("actor_rollout_ref.rollout.tensor_model_parallel_size", ro.tensor_model_parallel_size),
        ("actor_rollout_ref.rollout.gpu_memory_utilization", ro.gpu_memory_utilization),
        ("actor_rollout_ref.rollout.enable_chunked_prefill", ro.enable_chunked_prefill),
        ("actor_rollout_ref.rollout.enforce_eager", ro.enforce_eager),
        ("actor_rollout_ref.rollout.free_cache_engine", ro.free_cache_engine),
        ("actor_rollout_ref.rollout.temperature", ro.temperature),
        ("actor_rollout_ref.rollout.do_sample", ro.do_sample),
        ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", act.log_prob_micro_batch_size_per_device),
        (
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
            act.ref_log_prob_micro_batch_size_per_device or act.log_prob_micro_batch_size_per_device,
        ),
        ("trainer.critic_warmup", a.critic_warmup),
        ("trainer.log_val_generations", log.val_generations_to_log),
        ("trainer.val_before_train", ckpt.val_before_train),
        ("trainer.max_actor_ckpt_to_keep", ckpt.max_to_keep),
        ("custom_reward_function.path", reward_function_path(recipe)),
        ("custom_reward_function.name", recipe.reward.name),
        ("reward_model.reward_manager", recipe.reward.manager),
    ]


def _fields_when_set(recipe: Recipe) -> list[tuple[str, Any]]:
    """Keys set only where the recipe sets their field, so recipes without them keep verl's defaults (and their
    argv)."""
    a, d, ro = recipe.algorithm, recipe.data, recipe.rollout
    kv: list[tuple[str, Any]] = []
    if a.total_training_steps is not None:
        kv.append(("trainer.total_training_steps", a.total_training_steps))
    if d.val_batch_size is not None:
        kv.append(("data.val_batch_size", d.val_batch_size))
    if d.dataloader_num_workers is not None:
        kv.append(("data.dataloader_num_workers", d.dataloader_num_workers))
    if ro.max_num_batched_tokens is not None:
        kv.append(("actor_rollout_ref.rollout.max_num_batched_tokens", ro.max_num_batched_tokens))
    if recipe.consistency_gated or skips_by_bypass(recipe):
        # The rollout returns its log-probs of the sampled tokens, for the consistency gate to compare (and,
        # on verl 0.9 with the skip, for the update to use as old_log_probs).
        kv.append(("actor_rollout_ref.rollout.calculate_log_probs", True))
    for key in ("top_k", "top_p", "max_num_seqs", "enable_prefix_caching"):
        if getattr(ro, key) is not None:
            kv.append((f"actor_rollout_ref.rollout.{key}", getattr(ro, key)))
    if a.balance_batch is not None:
        kv.append(("trainer.balance_batch", a.balance_batch))
    return kv


def _fsdp_fields(recipe: Recipe) -> list[tuple[str, Any]]:
    """The fsdp strategies' keys (megatron's are megatron_overrides')."""
    m, act = recipe.model, recipe.actor
    kv: list[tuple[str, Any]] = [
        ("actor_rollout_ref.model.enable_gradient_checkpointing", m.enable_gradient_checkpointing),
        ("actor_rollout_ref.actor.fsdp_config.param_offload", act.param_offload),
        ("actor_rollout_ref.actor.fsdp_config.optimizer_offload", act.optimizer_offload),
        ("actor_rollout_ref.ref.fsdp_config.param_offload", act.ref_param_offload),
    ]
    if m.dtype is not None:
        # FSDP's param_dtype for the actor and the ref when no mixed_precision is given (verl 0.6.1
        # workers/fsdp_workers.py:461-471; default trainer/config/engine/fsdp.yaml:56) and the rollout's
        # (trainer/config/rollout/rollout.yaml:29), which the CPU rollout generates in.
        kv += [
            (f"actor_rollout_ref.{role}.dtype", m.dtype) for role in ("actor.fsdp_config", "ref.fsdp_config", "rollout")
        ]
    return kv


def _appended_fields(recipe: Recipe) -> list[str]:
    """Recipe fields whose keys verl's schema lacks, hence hydra's "+" (append) prefix."""
    w = recipe.reward.weights
    out = [
        f"+custom_reward_function.reward_kwargs.weights.accuracy={hydra_value(w.accuracy)}",
        f"+custom_reward_function.reward_kwargs.weights.format={hydra_value(w.format)}",
        f"+custom_reward_function.reward_kwargs.weights.cot={hydra_value(w.cot)}",
        f"+custom_reward_function.reward_kwargs.timeout_s={hydra_value(recipe.reward.timeout_s)}",
    ]
    if recipe.model.attn_implementation:
        out.append(f"+actor_rollout_ref.model.override_config.attn_implementation={recipe.model.attn_implementation}")
    return out


def _old_log_prob_skip(recipe: Recipe) -> list[str]:
    """``optimizations.recompute_old_log_prob: false``: verl's bypass mode from verl 0.9 on, npu-rl's patch
    before."""
    if skips_by_bypass(recipe):
        return BYPASS_OLD_LOG_PROB
    if not recipe.optimizations.recompute_old_log_prob:
        # verl's actor dataclasses lack the key; the patch's subclasses carry it.
        return old_log_prob_overrides(recipe.actor.strategy)
    return []


MULTI_TURN = "actor_rollout_ref.rollout.multi_turn"
AGENT = "actor_rollout_ref.rollout.agent"
TOOL_AGENT_LOOP = "tool_agent"  # verl v0.9.0 experimental/agent_loop/tool_agent_loop.py:99


def multi_turn_overrides(recipe: Recipe) -> list[str]:
    """verl 0.9's keys of a multi-turn recipe (trainer/config/rollout/rollout.yaml:173-257); the schema refuses
    one on verl 0.6.1. A row without an ``agent_name`` of its own runs the tool agent loop (agent_loop.py:624-626
    reads the row's first); npu-rl's conversions name it in every row too."""
    mt = recipe.rollout.multi_turn
    if not mt.enabled:
        return []
    kv: list[tuple[str, Any]] = [
        (f"{MULTI_TURN}.enable", True),
        (f"{MULTI_TURN}.format", mt.format),
        (f"{MULTI_TURN}.max_parallel_calls", mt.max_parallel_calls),
        (f"{MULTI_TURN}.max_tool_response_length", mt.max_tool_response_length),
        (f"{MULTI_TURN}.tool_response_truncate_side", mt.tool_response_truncate_side),
        (f"{MULTI_TURN}.tool_config_path", str(tool_config.path(recipe))),
        (f"{AGENT}.default_agent_loop", TOOL_AGENT_LOOP),
        ("data.return_raw_chat", True),
    ]
    if recipe.resources.platform != "cpu":  # a CPU host runs one (SERVER_ON_CPU)
        kv.append((f"{AGENT}.num_workers", mt.agent_workers))
    for key in ("max_assistant_turns", "max_user_turns"):
        if getattr(mt, key) is not None:
            kv.append((f"{MULTI_TURN}.{key}", getattr(mt, key)))
    return [f"{k}={hydra_value(v)}" for k, v in kv]


ENGINE_KWARGS = "actor_rollout_ref.rollout.engine_kwargs.vllm"


def additional_config(recipe: Recipe) -> dict[str, Any] | None:
    """vllm-ascend's ``additional_config`` engine argument: upstream's torchair graph and Ascend
    scheduler settings (cann-recipes-train llm_rl/deepseek/verl_patches/workers/vllm_rollout/
    vllm_rollout_spmd.py; keys read by vllm-ascend v0.9.1 vllm_ascend/ascend_config.py)."""
    ro = recipe.rollout
    if not (ro.graph_mode or ro.ascend_scheduler):
        return None
    config: dict[str, Any] = {}
    if ro.graph_mode:
        # One captured batch size, the engine's max_num_seqs (verl 0.6.1's default 1024, as upstream's).
        config["torchair_graph_config"] = {
            "enabled": True,
            "use_cached_graph": False,
            "graph_batch_sizes_init": False,
            "graph_batch_sizes": [ro.max_num_seqs or 1024],
            "enable_multistream_mla": True,
            "enable_multistream_moe": True,
            "enable_view_optimize": False,
            "enable_kv_nz": False,
        }
    if ro.ascend_scheduler:
        config["ascend_scheduler_config"] = {"enabled": True, "enable_chunked_prefill": False}
    config["refresh"] = True  # re-read the config in each engine, not a stale process-wide one
    return config


def rollout_engine_overrides(recipe: Recipe) -> list[str]:
    """vLLM engine arguments verl 0.6.1 passes through ``rollout.engine_kwargs.vllm`` to ``LLM(...)``
    (vllm_rollout_spmd.py vLLMRollout.__init__). The DP size travels as VLLM_DP_SIZE (see run_env and
    npu_rl.patches.vllm_dp); verl's own rollout data/expert parallel sizes stay 1."""
    out = []
    ro = recipe.rollout
    if ro.expert_parallel and verl_release(recipe) != VERL_0_6_1:
        # verl 0.9 hands vLLM its data and expert parallel sizes itself (vllm_async_server.py:337-355: DP
        # args, enable_expert_parallel from expert_parallel_size), EP being TP x DP (workers/config/rollout.py:
        # 292-294): the vllm_dp patch is retired there.
        dp = ro.data_parallel_size or 1  # set whenever expert_parallel is (the schema refuses it unset)
        out += [
            f"actor_rollout_ref.rollout.data_parallel_size={dp}",
            f"actor_rollout_ref.rollout.expert_parallel_size={ro.tensor_model_parallel_size * dp}",
        ]
    elif ro.expert_parallel:
        out.append(f"+{ENGINE_KWARGS}.enable_expert_parallel=True")
    extra = additional_config(recipe)
    if extra is not None:
        out.append(f"+{ENGINE_KWARGS}.additional_config={hydra_value(extra)}")
    return out


def _platform_overrides(recipe: Recipe) -> list[str]:
    if recipe.resources.platform != "cpu":
        return []
    out = [
        # torch.compile of the log-prob kernels costs minutes on 2 CPU cores and gains nothing there.
        "actor_rollout_ref.actor.use_torch_compile=False",
        "actor_rollout_ref.ref.use_torch_compile=False",
    ]
    if verl_release(recipe) != VERL_0_6_1:
        out += SERVER_ON_CPU
    return out


def patches_for(recipe: Recipe) -> list[str]:
    # Every run: a resumed run's batches can be compared with the run it continues; the reward's parts
    # show what a reward rise is made of (every recipe scores with npu_rl.reward.math); old checkpoints go
    # only once the new one is complete, whatever sets the limit (verl deletes them before it saves).
    names = ["batch_fingerprint", "reward_parts", "checkpoint_rotation"]
    if recipe.resources.platform == "cpu":
        names.append("cpu")
    if "file" in recipe.logging.backends:
        names.append("file_logger")
    if "swanlab" in recipe.logging.backends and verl_release(recipe) == VERL_0_6_1:
        # Retired from verl 0.9 on: TaskRunnerV1.run finishes the tracker in its finally block (verl v0.9.0
        # trainer/main_ppo.py:158-162, utils/tracking.py:195-217 Tracking.finish).
        names.append("swanlab_finish")
    if not recipe.optimizations.recompute_old_log_prob and not skips_by_bypass(recipe):
        names.append("old_log_prob")  # retired on verl 0.9: its bypass mode (BYPASS_OLD_LOG_PROB)
    if recipe.consistency_gated:
        names.append("consistency")  # after old_log_prob: it wraps the worker group the skip has set up
    if recipe.rollout.expert_parallel and verl_release(recipe) == VERL_0_6_1:
        names.append("vllm_dp")  # retired on verl 0.9 (rollout_engine_overrides)
    if recipe.actor.strategy == "megatron":
        names += megatron_patches(recipe)
    return names


def outage_file(recipe: Recipe) -> Path:
    """Where the code tool records that the sandbox is down (npu_rl.agent.outage)."""
    return tool_config.run_dir(recipe) / "sandbox_outage.json"


def run_env(recipe: Recipe, start_step: int | None) -> dict[str, str]:
    """The variables of a run (recipe env, log locations, platform settings) without the patch selection."""
    env = dict(recipe.env)
    env["TENSORBOARD_DIR"] = str(run_files.tensorboard_dir(recipe))
    env["VERL_FILE_LOGGER_PATH"] = str(run_files.metrics_file(recipe, start_step or 0))
    if "swanlab" in recipe.logging.backends:
        env.setdefault("SWANLAB_MODE", "local")
        env.setdefault("SWANLAB_LOG_DIR", str(run_files.swanlab_dir(recipe)))
    if recipe.resources.platform == "cpu":
        # Many small CPU processes share 2 cores; oversubscribed OpenMP threads thrash.
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("MKL_NUM_THREADS", "1")
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        # `npu-rl ray head|worker` export RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1 for NPU nodes;
        # with it set, verl's Worker reads its local rank from Ray's accelerator ids, which CPU workers have
        # none of (verl 0.6.1 Worker._setup_env_cuda_visible_devices, verl.utils.ray_utils). Empty is unset
        # for both verl and Ray.
        env["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"] = ""
        if recipe.rollout.name == "hf":
            # The line's instruction-set pins, where neither the recipe nor the caller's environment chose one:
            # on the rollout they were measured with (torch's own sampling). vLLM's CPU backends choose their
            # own kernels (IPEX, vLLM's), and vLLM 0.23's ran past the 2-node test's first-step allowance under
            # the AVX2 pins.
            for key, value in cpu_isa.missing(recipe.stack_line).items():
                env.setdefault(key, value)
        if verl_release(recipe) != VERL_0_6_1:
            # verl 0.9 takes its platform from here, else detects one and falls back to nvidia (verl v0.9.0
            # plugin/platform/platform_manager.py:92-117); the cpu patch registers this one.
            env["VERL_PLATFORM"] = VERL_CPU_PLATFORM
    if recipe.resources.platform != "cpu" and verl_release(recipe) != VERL_0_6_1:
        # Named, not detected: verl 0.9 falls back to nvidia where torch_npu fails to import and then moves
        # trainer.device to cuda (utils/device.py:150-165). An Atlas host detects the same platform; a
        # rehearsal without torch_npu gets the rehearse patch's stand-in of it.
        env["VERL_PLATFORM"] = VERL_NPU_PLATFORM
    if recipe.consistency_gated:
        c = recipe.consistency
        env[CONSISTENCY_ENV] = json.dumps(
            {"every": c.every, "max_probs_diff_mean": c.max_probs_diff_mean, "min_probs_corr": c.min_probs_corr}
        )
    if recipe.rollout.expert_parallel and verl_release(recipe) == VERL_0_6_1:
        # vLLM 0.9.1's ParallelConfig falls back to VLLM_DP_* when its engine argument is left at 1
        # (npu_rl.patches.vllm_dp); that patch derives each rank's VLLM_DP_RANK / master from this.
        env["VLLM_DP_SIZE"] = str(recipe.rollout.data_parallel_size)
    if recipe.actor.strategy == "megatron":
        env.update(megatron_env(recipe))
    if recipe.sandbox.enabled:
        env[sandbox_client.URL_ENV] = recipe.sandbox.run_code_url
    if recipe.tools.code_interpreter.enabled:
        env[OUTAGE_ENV] = str(outage_file(recipe))
    return env


__all__ = ["build_overrides", "patches_for", "run_env", "trainer_fields"]
