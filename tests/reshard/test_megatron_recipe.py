"""The DeepSeek-R1 A3 recipe: validates, and its megatron overrides compose onto stock verl 0.6.1's
ppo_megatron_trainer.yaml (hydra rejects unknown keys and '+' on existing ones)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import verl
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from npu_rl.cli import main
from npu_rl.errors import UserError
from npu_rl.exit_codes import Exit
from npu_rl.launcher.megatron import (
    megatron_env,
    megatron_overrides,
    megatron_patches,
    prepare_commands,
    stage_split,
)
from npu_rl.launcher.spec import build_launch, hydra_args
from npu_rl.launcher.verl_config import compose_verl_config
from npu_rl.patches.vllm_dp import expert_parallel_size
from npu_rl.recipe.loader import load_recipe
from npu_rl.reshard import ModelShapes, build_report, model_params, plan_reshard
from npu_rl.reshard.layout import InferLayout, TrainLayout

VERL_CONFIG = Path(verl.__file__).parent / "trainer" / "config"
RECIPE = "deepseek_r1_671b_a3"


def _compose(overrides: list[str]):
    with initialize_config_dir(config_dir=str(VERL_CONFIG), version_base=None):
        return compose(config_name="ppo_megatron_trainer", overrides=overrides)


def _reshard_layouts(recipe) -> tuple[TrainLayout, InferLayout]:
    """The layouts the reshard patch plans with in the recipe's run (npu_rl.patches.reshard.build_request): the
    Megatron sizes verl's composed actor config gives Megatron-core, and the rollout EP the patch reads from the
    rollout config and the launch's environment (expert_parallel_size: TP x VLLM_DP_SIZE with the engine's
    expert parallelism)."""
    spec = build_launch(recipe)
    name, overrides = hydra_args(spec.argv)
    cfg = compose_verl_config(overrides, name)
    meg, rollout = cfg.actor_rollout_ref.actor.megatron, cfg.actor_rollout_ref.rollout
    world = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    train = TrainLayout(
        world,
        tp=meg.tensor_model_parallel_size,
        pp=meg.pipeline_model_parallel_size,
        ep=meg.expert_model_parallel_size,
        etp=meg.expert_tensor_parallel_size or 0,
    )
    infer = InferLayout(world, tp=rollout.tensor_model_parallel_size, ep=expert_parallel_size(rollout, spec.env))
    return train, infer


def test_recipe_validates_at_its_documented_scale():
    r = load_recipe(RECIPE)
    assert r.resources.world_size == 256 and r.resources.platform == "npu-a3"
    assert (
        r.actor.tensor_model_parallel_size,
        r.actor.pipeline_model_parallel_size,
        r.actor.expert_model_parallel_size,
    ) == (4, 8, 8)
    assert sum(r.actor.layers_per_stage) == ModelShapes().num_layers
    assert (r.algorithm.train_batch_size, r.algorithm.rollout_n) == (512, 16)
    assert (r.data.max_prompt_length, r.data.max_response_length) == (1024, 3072)
    assert r.optimizations.recompute_old_log_prob is False
    for key in ("HCCL_BUFFSIZE", "HCCL_OP_EXPANSION_MODE", "PYTORCH_NPU_ALLOC_CONF", "TASK_QUEUE_ENABLE"):
        assert key in r.env
    # Read by nothing in vllm-ascend 0.9.1 (graph mode reaches vLLM as additional_config instead).
    assert "VLLM_ENABLE_GRAPH_MODE" not in r.env and "VLLM_ENABLE_MC2" not in r.env
    for dotted in r.unverified:  # every 'unverified' entry names a real recipe field
        node = r.model_dump()
        for part in dotted.split("."):
            assert part in node, dotted
            node = node[part]


def test_megatron_overrides_compose_onto_stock_verl():
    r = load_recipe(RECIPE)
    from npu_rl.launcher.overrides import rollout_engine_overrides

    cfg = _compose(megatron_overrides(r) + rollout_engine_overrides(r))
    meg = cfg.actor_rollout_ref.actor.megatron
    assert (meg.tensor_model_parallel_size, meg.pipeline_model_parallel_size, meg.expert_model_parallel_size) == (
        4,
        8,
        8,
    )
    assert cfg.actor_rollout_ref.ref.megatron.pipeline_model_parallel_size == 8
    tf = OmegaConf.to_container(cfg.actor_rollout_ref.ref.megatron.override_transformer_config, resolve=True)
    # The ref inherits the actor's transformer overrides, so the layer split reaches both models.
    assert (tf["num_layers_in_first_pipeline_stage"], tf["num_layers_in_last_pipeline_stage"]) == (7, 6)
    rollout = cfg.actor_rollout_ref.rollout
    # verl's own rollout DP/EP stay 1 (its mesh would otherwise fold TP*DP ranks into one group); EP and
    # DP reach vLLM through engine_kwargs and VLLM_DP_SIZE (npu_rl.patches.vllm_dp).
    assert rollout.expert_parallel_size == 1 and rollout.data_parallel_size == 1
    assert rollout.engine_kwargs.vllm.enable_expert_parallel is True
    assert rollout.engine_kwargs.vllm.additional_config.torchair_graph_config.enabled is True
    assert (tf["recompute_granularity"], tf["recompute_method"], tf["recompute_num_layers"]) == ("full", "block", 8)
    assert meg.use_dist_checkpointing and meg.dist_checkpointing_path.endswith("models/DeepSeek-R1-mcore")
    assert meg.use_mbridge is False


def test_an_override_verl_does_not_know_is_rejected_by_the_check():
    with pytest.raises(Exception, match="reshard_bucket"):
        _compose(megatron_overrides(load_recipe(RECIPE)) + ["actor_rollout_ref.actor.megatron.reshard_bucket=1"])


def test_documented_split_is_refused_with_the_reason_and_an_expressible_one():
    with pytest.raises(UserError, match="middle stages must be equal") as err:
        stage_split([7, 7, 8, 8, 8, 8, 8, 7])
    hint = [int(x) for x in str(err.value).split("(e.g. ")[1].rstrip(")").split(",")]
    assert sum(hint) == 61 and len(hint) == 8 and len(set(hint[1:-1])) == 1
    assert stage_split([8] * 4) is None
    assert stage_split([3, 8, 8, 2]) == (3, 2)


def test_reshard_switch_and_prepare_job():
    r = load_recipe(RECIPE)
    assert megatron_patches(r) == ["reshard"] and megatron_env(r) == {"NPU_RL_RESHARD_BUCKET_MB": "64"}
    off = load_recipe(RECIPE, {"reshard.enabled": False})
    assert megatron_patches(off) == [] and megatron_env(off) == {}
    cmds = prepare_commands(r)
    assert cmds[0][:5] == ["python", "-m", "npu_rl", "model", "fp8-cast"]
    assert cmds[1][cmds[1].index("--hf_model_path") - 1].endswith("converter_hf_to_mcore.py")
    # the converter reads what the FP8 cast wrote
    assert cmds[0][-1] == cmds[1][cmds[1].index("--hf_model_path") + 1]


def test_reshard_on_cpu_or_fsdp_is_a_recipe_error():
    with pytest.raises(UserError, match="reshard.enabled needs actor.strategy megatron"):
        load_recipe(RECIPE, {"actor.strategy": "fsdp", "actor.layers_per_stage": None})


def test_recipe_layouts_plan_at_the_minimum(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    # The recipe's own layouts on a 2-layer slice of DeepSeek-V3 shapes (the full model is the benchmark's job).
    r = load_recipe(
        RECIPE,
        {
            "actor.layers_per_stage": None,
            "actor.pipeline_model_parallel_size": 1,
            "actor.tensor_model_parallel_size": 4,
        },
    )
    train, infer = _reshard_layouts(r)
    assert (train.tp, train.pp, train.ep, infer.tp, infer.ep) == (4, 1, 8, 2, 128)
    m = ModelShapes(num_layers=2, first_k_dense=1, vocab=1024)
    plan = plan_reshard(model_params(m), train, infer, num_layers=2, num_experts=m.num_experts)
    rep = build_report(plan, 2)
    assert rep.recv == rep.minimum and rep.total < sum(rep.allgather)


def test_megatron_layout_passes_verls_own_validation():
    from verl.utils.config import validate_config

    r = load_recipe(RECIPE)
    a = r.algorithm
    base = [  # the batch/world keys validate_config checks the parallel layout against
        f"trainer.nnodes={r.resources.nnodes}",
        f"trainer.n_gpus_per_node={r.resources.devices_per_node}",
        f"data.train_batch_size={a.train_batch_size}",
        f"actor_rollout_ref.rollout.n={a.rollout_n}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={a.ppo_mini_batch_size}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={a.ppo_micro_batch_size_per_device}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={r.rollout.tensor_model_parallel_size}",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
        "algorithm.adv_estimator=grpo",
    ]
    validate_config(config=_compose(base + megatron_overrides(r)), use_reference_policy=True, use_critic=False)
    # The same overrides on 16 x 12 devices: TP4 * PP8 no longer divides the world, and verl says so.
    with pytest.raises((AssertionError, ValueError)):
        cfg = _compose(base + megatron_overrides(r) + ["trainer.n_gpus_per_node=12"])
        validate_config(config=cfg, use_reference_policy=True, use_critic=False)


def test_megatron_on_cpu_is_refused_before_anything_starts(capsys):
    code = main(["train", "--recipe", "tiny_math_cpu", "--set", "actor.strategy=megatron", "--set", "model.dtype=null"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == Exit.BAD_INPUT
    assert len(err) == 1 and err[0].startswith("npu-rl: error:") and "actor.strategy megatron needs NPUs" in err[0]


# verl 0.6.1's Megatron worker __init__ on a CPU process, as far as it goes: gloo (what the CPU patch gives
# verl's get_nccl_backend), megatron-core's model-parallel groups, then verl's set_random_seed.
_MEGATRON_WORKER_START = """
import os, torch
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"], RANK="0", WORLD_SIZE="1")
torch.distributed.init_process_group(backend="gloo")
from megatron.core import parallel_state as mpu
mpu.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
print("model-parallel groups up", flush=True)
from verl.workers.megatron_workers import set_random_seed
set_random_seed(seed=1)
print("seeded", flush=True)
"""


def test_verl_megatron_worker_stops_on_cpu_where_the_refusal_says():
    """The refusal above holds while this does: if a later verl or megatron-core seeds on CPU, this fails and
    the refusal can move to the next stop."""
    from npu_rl.cluster.rayports import choose_ports

    (port,) = choose_ports(1, (12000, 19999))
    run = subprocess.run(
        [sys.executable, "-c", _MEGATRON_WORKER_START],
        env={**os.environ, "PORT": str(port)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "model-parallel groups up" in run.stdout, run.stderr[-3000:]
    assert run.returncode != 0 and "seeded" not in run.stdout
    assert "megatron/core/tensor_parallel/random.py" in run.stderr and "torch.cuda.get_rng_state()" in run.stderr
    assert run.stderr.strip().splitlines()[-1].endswith("AssertionError: Torch not compiled with CUDA enabled")


def test_the_qwen3_235b_recipe_plans_its_whole_experts_at_the_minimum(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    # Upstream's layout at its scale (128 ranks, TP4 PP4 EP32 with whole experts, rollout TP4 x DP32 = EP128)
    # on a 4-layer slice of Qwen3-235B-A22B: before ETP was planned, the patch refused this recipe at its first
    # weight sync ("reshard assumes expert TP == TP").
    r = load_recipe("qwen3_235b_a22b_grpo_a3", {"actor.layers_per_stage": [1, 1, 1, 1]})
    train, infer = _reshard_layouts(r)
    assert (train.tp, train.pp, train.ep, train.etp, infer.tp, infer.ep) == (4, 4, 32, 1, 4, 128)
    assert "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=1" in megatron_overrides(r)
    m = ModelShapes.qwen3_235b(num_layers=4, vocab=1024)
    plan = plan_reshard(model_params(m), train, infer, num_layers=4, num_experts=m.num_experts)
    rep = build_report(plan, 4)
    assert rep.recv == rep.minimum and rep.total < sum(rep.allgather)
