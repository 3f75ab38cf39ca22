"""recompute_old_log_prob=false: delivered to verl's actor config, refused where it is not exact."""

from __future__ import annotations

import pytest
import yaml

from npu_rl.cli import main
from npu_rl.errors import UserError
from npu_rl.launcher.overrides import build_overrides, patches_for
from npu_rl.launcher.spec import build_launch, config_name
from npu_rl.launcher.verl_config import check_argv, compose_verl_config, validate_with_verl
from npu_rl.recipe import load_recipe
from npu_rl.recipe.loader import resolve_recipe_path

RECIPES = ["tiny_math_cpu", "qwen2_5_1_5b_math_a2_1card", "qwen2_5_1_5b_math_a2_4card", "deepseek_r1_671b_a3"]


@pytest.fixture(autouse=True)
def _workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))


@pytest.mark.parametrize("name", RECIPES)
def test_switch_is_on_and_verl_builds_the_actor_config(name):
    from verl.utils.config import omega_conf_to_dataclass

    recipe = load_recipe(name)
    assert recipe.optimizations.recompute_old_log_prob is False
    assert "old_log_prob" in patches_for(recipe)
    cfg = check_argv(build_launch(recipe).argv)  # fsdp and megatron (deepseek) configs alike
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert actor.recompute_old_log_prob is False
    assert actor.strategy == recipe.actor.strategy


def test_switch_off_keeps_verl_stock_actor_config():
    recipe = load_recipe("tiny_math_cpu", {"optimizations.recompute_old_log_prob": True})
    assert "old_log_prob" not in patches_for(recipe)
    assert not [o for o in build_overrides(recipe) if "recompute_old_log_prob" in o or "_target_" in o]
    cfg = check_argv(build_launch(recipe).argv)
    assert type(cfg.actor_rollout_ref.actor._target_) is str
    assert cfg.actor_rollout_ref.actor._target_ == "verl.workers.config.FSDPActorConfig"


def test_bare_key_fails_the_check_as_verl_would():
    # The key alone is what verl's dataclass rejects in every worker; the check must see that too.
    recipe = load_recipe("tiny_math_cpu", {"optimizations.recompute_old_log_prob": True})
    cfg = compose_verl_config(
        build_overrides(recipe) + ["+actor_rollout_ref.actor.recompute_old_log_prob=False"], config_name(recipe)
    )
    with pytest.raises(UserError, match="cannot build the recipe's actor config.*recompute_old_log_prob"):
        validate_with_verl(cfg)


def _multi_update_yaml(tmp_path):
    data = yaml.safe_load(resolve_recipe_path("tiny_math_cpu").read_text())
    data["algorithm"]["ppo_mini_batch_size"] = 4
    data["optimizations"]["recompute_old_log_prob"] = False
    path = tmp_path / "multi_minibatch.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_multi_minibatch_is_refused_by_recipe_loading(tmp_path):
    with pytest.raises(UserError) as err:
        load_recipe(_multi_update_yaml(tmp_path))
    msg = str(err.value)
    assert "recompute_old_log_prob" in msg and "ppo_mini_batch_size" in msg and "train_batch_size" in msg
    assert "\n" not in msg
    with pytest.raises(UserError, match="ppo_epochs=2"):
        load_recipe("tiny_math_cpu", {"algorithm.ppo_epochs": 2})
    # the same layout is fine when old_log_prob is recomputed
    load_recipe(_multi_update_yaml(tmp_path), {"optimizations.recompute_old_log_prob": True})


def test_multi_minibatch_is_refused_by_train_cli(tmp_path, capsys):
    assert main(["train", "--recipe", str(_multi_update_yaml(tmp_path))]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "recompute_old_log_prob" in err and "ppo_mini_batch_size" in err


@pytest.mark.parametrize(
    "overrides,named",
    [
        ({"algorithm.use_kl_in_reward": True}, "algorithm.use_kl_in_reward"),
        ({"algorithm.critic_warmup": 1}, "trainer.critic_warmup=1"),
        # (the consistency gate's own use of them is allowed: tests/patches/test_consistency.py)
        (
            {"verl_overrides": {"actor_rollout_ref.rollout.calculate_log_probs": True}, "consistency.enabled": False},
            "calculate_log_probs",
        ),
        ({"verl_overrides": {"algorithm.rollout_correction.bypass_mode": True}}, "bypass_mode"),
        ({"verl_overrides": {"actor_rollout_ref.actor.ppo_mini_batch_size": 4}}, "ppo_mini_batch_size=4"),
    ],
)
def test_verl_settings_that_read_old_log_probs_are_refused(overrides, named):
    recipe = load_recipe("tiny_math_cpu", overrides)
    with pytest.raises(UserError, match=named):
        check_argv(build_launch(recipe).argv)
    recipe.optimizations.recompute_old_log_prob = True
    check_argv(build_launch(recipe).argv)
