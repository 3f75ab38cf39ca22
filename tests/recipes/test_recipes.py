"""Every shipped recipe validates, renders its verl command, and composes with verl's own config."""

from __future__ import annotations

import subprocess
import sys

import pytest
from recipe_names import ALL as RECIPES
from recipe_names import HERE  # another line's recipes compose through their own verl (tests/test_stack_lines.py)

from npu_rl.errors import UserError
from npu_rl.launcher.hydra import hydra_value
from npu_rl.launcher.overrides import build_overrides
from npu_rl.launcher.spec import build_launch
from npu_rl.launcher.verl_config import check_argv
from npu_rl.recipe import load_recipe


def test_the_qwen_deepseek_and_cpu_recipes_ship():
    assert {"qwen2_5_1_5b_math_a2_4card", "qwen2_5_1_5b_math_a2_1card", "tiny_math_cpu", "deepseek_r1_671b_a3"} <= set(
        RECIPES
    )


@pytest.mark.parametrize("name", HERE)
def test_recipe_composes_with_verl_config(name, tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    cfg = check_argv(build_launch(load_recipe(name)).argv)
    recipe = load_recipe(name)
    assert cfg.trainer.device == recipe.resources.device
    assert cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node == recipe.resources.world_size
    assert cfg.data.train_batch_size == recipe.algorithm.train_batch_size
    # The actor, the ref and the rollout compute in the recipe's model.dtype, verl's bfloat16 where it sets none.
    a = cfg.actor_rollout_ref
    if recipe.actor.strategy == "megatron":
        assert recipe.model.dtype is None
    else:
        assert {a.actor.fsdp_config.dtype, a.ref.fsdp_config.dtype, a.rollout.dtype} == {
            recipe.model.dtype or "bfloat16"
        }


def test_qwen_4card_matches_the_original_run_script(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    ov = dict(o.split("=", 1) for o in build_overrides(load_recipe("qwen2_5_1_5b_math_a2_4card")))
    expected = {
        "algorithm.adv_estimator": "grpo",
        "data.train_batch_size": "256",
        "data.max_prompt_length": "512",
        "data.max_response_length": "1024",
        "data.filter_overlong_prompts": "True",
        "data.truncation": "error",
        "actor_rollout_ref.actor.optim.lr": "1e-06",
        "actor_rollout_ref.actor.optim.lr_warmup_steps": "10",
        "actor_rollout_ref.model.use_remove_padding": "False",
        "actor_rollout_ref.actor.ppo_mini_batch_size": "256",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "8",
        "actor_rollout_ref.actor.use_kl_loss": "True",
        "actor_rollout_ref.actor.kl_loss_coef": "0.001",
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
        "actor_rollout_ref.actor.entropy_coeff": "0.0",
        "actor_rollout_ref.model.enable_gradient_checkpointing": "True",
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.tensor_model_parallel_size": "2",
        "actor_rollout_ref.rollout.gpu_memory_utilization": "0.8",
        "actor_rollout_ref.rollout.n": "8",
        "actor_rollout_ref.rollout.enable_chunked_prefill": "False",
        "actor_rollout_ref.ref.fsdp_config.param_offload": "True",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "8",
        "algorithm.use_kl_in_reward": "False",
        "trainer.critic_warmup": "0",
        "trainer.logger": "[console,tensorboard]",
        "trainer.project_name": "verl_grpo_example_math",
        "trainer.experiment_name": "qwen2_5_1_5b_math",
        "trainer.n_gpus_per_node": "4",
        "trainer.nnodes": "1",
        "trainer.save_freq": "20",
        "trainer.test_freq": "5",
        "trainer.total_epochs": "10",
        "trainer.device": "npu",
    }
    assert {k: ov.get(k) for k in expected} == expected
    env = build_launch(load_recipe("qwen2_5_1_5b_math_a2_4card")).env
    for k, v in {
        "HCCL_CONNECT_TIMEOUT": "360",
        "HCCL_EXEC_TIMEOUT": "360",
        "HCCL_IF_BASE_PORT": "64033",
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "VLLM_ATTENTION_BACKEND": "FLASH_ATTN",
        "HYDRA_FULL_ERROR": "1",
        "VLLM_USE_V1": "1",
        "VLLM_ASCEND_ENABLE_NZ": "0",
    }.items():
        assert env[k] == v
    assert "NPU_RL_PATCHES" not in env or "cpu" not in env["NPU_RL_PATCHES"]


def test_single_card_variant(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    ov = dict(o.split("=", 1) for o in build_overrides(load_recipe("qwen2_5_1_5b_math_a2_1card")))
    assert ov["trainer.n_gpus_per_node"] == "1"
    assert ov["actor_rollout_ref.rollout.tensor_model_parallel_size"] == "1"
    assert ov["actor_rollout_ref.rollout.enforce_eager"] == "True"
    # 280 steps, the result its header names (10 epochs of 29 steps, capped; tests/recipes/test_qwen_recipes.py).
    assert (
        ov["trainer.save_freq"],
        ov["trainer.test_freq"],
        ov["trainer.total_epochs"],
        ov["trainer.total_training_steps"],
    ) == ("70", "10", "10", "280")


def test_reward_is_wired_as_verl_custom_reward(tmp_path, monkeypatch):
    import npu_rl.reward.math as reward

    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    ov = dict(o.split("=", 1) for o in build_overrides(load_recipe("tiny_math_cpu")))
    assert ov["custom_reward_function.path"] == reward.__file__
    assert ov["custom_reward_function.name"] == "compute_score"
    assert ov["+custom_reward_function.reward_kwargs.weights.accuracy"] == "0.7"


def test_cpu_recipe_installs_the_cpu_patch(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    env = build_launch(load_recipe("tiny_math_cpu")).env
    assert "cpu" in env["NPU_RL_PATCHES"].split(",")
    assert env["PYTHONPATH"].split(":")[0].endswith("npu_rl/patches/boot")


def test_the_cpu_recipe_computes_in_float32():
    # The CPU here has no bfloat16 arithmetic (AVX2): torch emulates it, several times slower.
    assert load_recipe("tiny_math_cpu").model.dtype == "float32"


def test_model_dtype_is_refused_for_megatron():
    with pytest.raises(UserError, match="model.dtype is for the fsdp strategies"):
        load_recipe("deepseek_r1_671b_a3", {"model.dtype": "float32"})


@pytest.mark.parametrize(
    "value,text",
    [
        (True, "True"),
        (None, "null"),
        (3, "3"),
        (1e-6, "1e-06"),
        ("a/b.parquet", "a/b.parquet"),
        (["x", "y"], "[x,y]"),
        ("has space", "'has space'"),
        ("it's", "'it\\'s'"),
        ("true", "'true'"),
    ],
)
def test_hydra_value_formatting(value, text):
    assert hydra_value(value) == text


def test_dry_run_prints_the_verl_command(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "npu_rl", "train", "--recipe", "qwen2_5_1_5b_math_a2_4card", "--dry-run"],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "NPU_RL_WORKSPACE": str(tmp_path)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "verl.trainer.main_ppo" in proc.stdout
    assert "export HCCL_IF_BASE_PORT=64033" in proc.stdout
    assert f"actor_rollout_ref.model.path={tmp_path}/models/Qwen2.5-1.5B-Instruct" in proc.stdout


@pytest.mark.parametrize("name", RECIPES)
def test_the_reward_a_recipe_names_is_a_function(name):
    import importlib

    recipe = load_recipe(name)
    assert callable(getattr(importlib.import_module(recipe.reward.function), recipe.reward.name))


@pytest.mark.parametrize("name", [n for n in RECIPES if load_recipe(n).model.tokenizer_config])
def test_the_tokenizer_override_a_recipe_names_has_a_chat_template(name):
    from npu_rl.model.tokenizer_override import load_override, resolve_override

    override = resolve_override(load_recipe(name).model.tokenizer_config)
    assert override is not None and override.is_file()
    assert "chat_template" in load_override(override)
