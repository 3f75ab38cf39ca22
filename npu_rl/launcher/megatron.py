"""Recipe -> verl 0.6.1 hydra overrides for the megatron strategy (ppo_megatron_trainer.yaml).

Only keys that stock verl 0.6.1 reads are emitted; ``+`` marks keys added under
``override_transformer_config`` (a free dict verl passes into Megatron-core's
TransformerConfig and MindSpeed reads its own switches from). Anything the recipe asks
for that cannot be expressed fails here with a one-line error instead of being dropped.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..errors import UserError
from ..patches.guard import VERL_0_6_1
from ..recipe.schema import Recipe
from ..reshard.planner import BUCKET_ENV
from ..run_files import resolve
from .hydra import hydra_value
from .releases import verl_release

ACTOR = "actor_rollout_ref.actor.megatron"
REF = "actor_rollout_ref.ref.megatron"
ROLLOUT = "actor_rollout_ref.rollout"
TF = f"{ACTOR}.override_transformer_config"


def stage_split(layers: list[int]) -> tuple[int, int] | None:
    """(first, last) stage sizes for Megatron-core's uneven pipeline, None when the split is even.

    Megatron-core only sizes the first and last stages separately; every middle stage must
    hold the same number of layers.
    """
    if len(set(layers)) == 1:
        return None
    middle = layers[1:-1]
    if len(set(middle)) > 1:
        first, last, pp = layers[0], layers[-1], len(layers)
        total = sum(layers)
        per = -(-(total - 2) // (pp - 2)) if pp > 2 else 0
        hint = ""
        if pp > 2:
            rest = total - per * (pp - 2)
            hint = f" (e.g. {rest - rest // 2},{','.join([str(per)] * (pp - 2))},{rest // 2})"
        raise UserError(
            f"actor.layers_per_stage {','.join(map(str, layers))}: verl 0.6.1 / Megatron-core size only the "
            f"first ({first}) and last ({last}) stages separately, so the middle stages must be equal{hint}"
        )
    return layers[0], layers[-1]


def megatron_overrides(recipe: Recipe) -> list[str]:
    """Hydra overrides for ``python -m verl.trainer.main_ppo --config-name ppo_megatron_trainer``."""
    act = recipe.actor
    if act.strategy != "megatron":
        raise UserError(f"megatron_overrides called for actor.strategy {act.strategy!r}")
    out: list[str] = []
    for prefix in (ACTOR, REF):
        out += [
            f"{prefix}.tensor_model_parallel_size={act.tensor_model_parallel_size}",
            f"{prefix}.pipeline_model_parallel_size={act.pipeline_model_parallel_size}",
            f"{prefix}.expert_model_parallel_size={act.expert_model_parallel_size}",
        ]
    if act.expert_tensor_parallel_size is not None:
        out.append(f"{ACTOR}.expert_tensor_parallel_size={act.expert_tensor_parallel_size}")
    out += [
        f"{ACTOR}.param_offload={hydra_value(act.param_offload)}",
        f"{ACTOR}.grad_offload={hydra_value(act.param_offload)}",
        f"{ACTOR}.optimizer_offload={hydra_value(act.optimizer_offload)}",
        f"{REF}.param_offload={hydra_value(act.ref_param_offload)}",
    ]
    if act.layers_per_stage is not None:
        split = stage_split(act.layers_per_stage)
        if split is not None:
            # The ref's override_transformer_config interpolates the actor's, so one place suffices.
            out += [
                f"+{TF}.num_layers_in_first_pipeline_stage={split[0]}",
                f"+{TF}.num_layers_in_last_pipeline_stage={split[1]}",
            ]
    if recipe.resources.platform != "cpu":
        # MindSpeed's flash attention is mandatory on NPU (MindSpeed's verl guide).
        out.append(f"+{TF}.use_flash_attn=True")
    # Rollout EP/DP is not verl's rollout.data_parallel_size / expert_parallel_size here: in verl
    # 0.6.1's synchronous rollout nothing passes them to vLLM, and the megatron worker would fold
    # TP * DP ranks into one rollout group that generates the whole batch on every rank
    # (megatron_workers.py _build_rollout). They reach the engine through engine_kwargs and
    # VLLM_DP_SIZE instead (npu_rl.launcher.overrides.rollout_engine_overrides, npu_rl.patches.vllm_dp).
    rc = act.recompute
    if rc is not None and recipe.model.enable_gradient_checkpointing:
        # Keys of verl's override_transformer_config (engine/megatron.yaml), default null = no recompute.
        out += [
            f"{TF}.recompute_granularity={rc.granularity}",
            f"{TF}.recompute_method={hydra_value(rc.method)}",
            f"{TF}.recompute_num_layers={hydra_value(rc.num_layers)}",
        ]
    if act.swap_optimizer:
        # verl 0.6.1 hands override_transformer_config to MindSpeed's repatch() in every megatron
        # worker (megatron_workers.py ActorRolloutRefWorker.__init__), which reads MindSpeed's feature
        # switches from it; Megatron-core's TransformerConfig then drops the unknown key
        # (verl models/mcore/config_converter.py check_and_construct_configs).
        out.append(f"+{TF}.swap_optimizer=True")
    conv = recipe.prepare.weight_conversion
    if conv is not None:
        for prefix in (ACTOR, REF):
            out += [
                f"{prefix}.use_dist_checkpointing=True",
                f"{prefix}.dist_checkpointing_path={resolve(conv.mcore_path)}",
            ]
    if recipe.reshard.enabled and verl_release(recipe) == VERL_0_6_1:
        # On verl 0.6.1 the reshard patch hooks the per_tensor_generator path, which mbridge bypasses. verl 0.9's
        # megatron engine always exports through its bridge (v0.9.0 workers/engine/megatron/transformer_impl.py:191
        # asserts use_mbridge), and there the patch replaces that export itself.
        out.append(f"{ACTOR}.use_mbridge=False")
    return out


def megatron_patches(recipe: Recipe) -> list[str]:
    """npu_rl patches (NPU_RL_PATCHES names) a megatron recipe needs: the reshard switch."""
    return ["reshard"] if recipe.reshard.enabled else []


def megatron_env(recipe: Recipe) -> dict[str, str]:
    """Environment the reshard patch reads in every worker (empty when it is off)."""
    if not recipe.reshard.enabled:
        return {}
    return {BUCKET_ENV: str(recipe.reshard.bucket_mb)}


# npu-rl's own FP8 -> BF16 cast (npu_rl.model.fp8_cast): torch on the CPU, so it runs on an Ascend host.
FP8_CAST = ["python", "-m", "npu_rl", "model", "fp8-cast"]
# verl's HF -> Megatron dist-checkpoint converter, relative to the directory that holds the verl
# package: the checkout in the image (/opt/verl, docker/Dockerfile) or site-packages for the wheel,
# which ships scripts/ as a top-level package (verl 0.6.1 RECORD).
VERL_CONVERTER = Path("scripts/converter_hf_to_mcore.py")
# Filled per node when a distributed conversion starts (npu_rl.launcher.prepare).
NODE_RANK, MASTER_ADDR = "{node_rank}", "{master_addr}"
CONVERTER_PORT = 29531


def verl_converter() -> Path:
    """converter_hf_to_mcore.py of the verl this interpreter imports (without importing it)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.origin:
        raise UserError(
            "prepare.weight_conversion: verl is not installed here, so its converter_hf_to_mcore.py "
            "cannot be found (run in the training image, or set prepare.weight_conversion.converter_script)"
        )
    return Path(spec.origin).parent.parent / VERL_CONVERTER


def converter_script(recipe: Recipe) -> Path:
    conv = recipe.prepare.weight_conversion
    if conv is None:
        raise UserError(f"recipe {recipe.name}: no prepare.weight_conversion, so no converter to run")
    return resolve(conv.converter_script) if conv.converter_script else verl_converter()


def converter_nodes(recipe: Recipe) -> int:
    """How many nodes the HF -> Megatron conversion runs on (1: one local process group)."""
    conv = recipe.prepare.weight_conversion
    return recipe.resources.nnodes if conv is not None and conv.distributed else 1


def prepare_commands(recipe: Recipe) -> list[list[str]]:
    """The weight-conversion prepare job, as argv lists run in order inside the training image:
    npu-rl's FP8 -> BF16 cast (when ``bf16_path`` is set), then verl's HF -> Megatron dist
    checkpoint converter, under torchrun across the job's nodes when it is distributed (the
    ``{node_rank}`` / ``{master_addr}`` fields are filled per node when it starts)."""
    conv = recipe.prepare.weight_conversion
    if conv is None:
        return []
    cmds = []
    hf = resolve(conv.hf_path)
    if conv.bf16_path:
        cmds.append([*FP8_CAST, "--input-fp8-hf-path", str(hf), "--output-bf16-hf-path", str(resolve(conv.bf16_path))])
        hf = resolve(conv.bf16_path)
    launch = ["python"]
    nodes = converter_nodes(recipe)
    if nodes > 1 or conv.nproc_per_node > 1:
        # verl's documented distributed conversion (scripts/converter_hf_to_mcore.py _init_args):
        # torchrun with one rank per pipeline stage of the conversion; `python -m torch.distributed.run`
        # is torchrun on this interpreter.
        launch = [
            "python",
            "-m",
            "torch.distributed.run",
            "--nnodes",
            str(nodes),
            "--nproc_per_node",
            str(conv.nproc_per_node),
            "--node_rank",
            NODE_RANK,
            "--master_addr",
            MASTER_ADDR,
            "--master_port",
            str(CONVERTER_PORT),
        ]
    argv = [
        *launch,
        str(converter_script(recipe)),
        "--hf_model_path",
        str(hf),
        "--output_path",
        str(resolve(conv.mcore_path)),
        "--use_cpu_initialization",
    ]
    cmds.append(argv)
    return cmds
