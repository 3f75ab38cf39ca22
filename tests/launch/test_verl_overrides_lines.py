"""A recipe's verl_overrides on each stack line: written in verl 0.6.1's names they move where the line's verl reads
them, as the launcher's own keys do; verl 0.9's names on the verl 0.6.1 line are refused, naming the key to write."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from npu_rl.cli import main
from npu_rl.errors import UserError
from npu_rl.exit_codes import Exit
from npu_rl.launcher.overrides import build_overrides
from npu_rl.launcher.spec import build_launch
from npu_rl.launcher.verl_config import check_argv
from npu_rl.paths import project_root
from npu_rl.recipe import load_recipe

SEEDS_RECIPE = "qwen2_5_1_5b_math_a2_1card"  # cann8.2-verl0.6 (verl 0.6.1)
NEW_RECIPE = "qwen2_5_1_5b_math_a2_1card_verl09"  # cann9.1-verl0.9 (verl 0.9.0)
SEEDS_NAMES = {
    "reward_model.reward_manager": "prime",
    "++custom_reward_function.reward_kwargs.weights.cot": 0.5,
    "trainer.log_val_generations": 4,
}


@pytest.fixture(autouse=True)
def _workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))


def test_seeds_names_move_where_verl_0_9_reads_them():
    out = build_overrides(load_recipe(NEW_RECIPE, {"verl_overrides": SEEDS_NAMES}))
    assert out[-3:] == [
        "reward.reward_manager.name=prime",
        "++reward.custom_reward_function.reward_kwargs.weights.cot=0.5",
        "trainer.log_val_generations=4",
    ]
    # Nothing left under the old names, which verl 0.9 composes and never reads.
    assert not [o for o in out if o.lstrip("+").startswith(("reward_model.", "custom_reward_function."))]


def test_seeds_names_stay_on_the_seeds_line():
    out = build_overrides(load_recipe(SEEDS_RECIPE, {"verl_overrides": SEEDS_NAMES}))
    assert out[-3:] == [
        "reward_model.reward_manager=prime",
        "++custom_reward_function.reward_kwargs.weights.cot=0.5",
        "trainer.log_val_generations=4",
    ]


def test_seeds_names_reach_verl_0_6_1s_config():
    cfg = check_argv(build_launch(load_recipe(SEEDS_RECIPE, {"verl_overrides": SEEDS_NAMES})).argv)
    assert cfg.reward_model.reward_manager == "prime"
    assert cfg.custom_reward_function.reward_kwargs.weights.cot == 0.5


COMPOSE_ON_THE_LINE = """
import json, sys
from npu_rl.launcher.spec import build_launch
from npu_rl.launcher.verl_config import check_argv
from npu_rl.recipe import load_recipe
cfg = check_argv(build_launch(load_recipe(sys.argv[1], {"verl_overrides": json.loads(sys.argv[2])})).argv)
print(json.dumps([cfg.reward.reward_manager.name, cfg.reward.custom_reward_function.reward_kwargs.weights.cot]))
"""


def test_seeds_names_reach_verl_0_9s_config(tmp_path):
    # Composed by verl 0.9.0's own hydra config in the line's environment: the values land where it reads them.
    from needs import missing_setup

    line = load_recipe(NEW_RECIPE).stack_line
    python = project_root() / f".venv-{line}" / "bin" / "python"
    if not python.is_file():
        missing_setup(f"the {line} CPU environment", f"make venv STACK={line}")
    out = subprocess.run(
        [str(python), "-c", COMPOSE_ON_THE_LINE, NEW_RECIPE, json.dumps(SEEDS_NAMES)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=project_root(),
        env={**os.environ, "NPU_RL_WORKSPACE": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["prime", 0.5]


def test_verl_0_9_names_pass_on_their_own_line():
    recipe = load_recipe(NEW_RECIPE, {"verl_overrides": {"reward.reward_manager.name": "prime"}})
    assert build_overrides(recipe)[-1] == "reward.reward_manager.name=prime"


@pytest.mark.parametrize(
    "key,write",
    [
        ("reward.reward_manager.name", "reward_model.reward_manager"),
        (
            "+reward.custom_reward_function.reward_kwargs.weights.cot",
            "custom_reward_function.reward_kwargs.weights.cot",
        ),
    ],
)
def test_verl_0_9_names_are_refused_on_the_seeds_line_naming_the_key_to_write(key, write):
    recipe = load_recipe(SEEDS_RECIPE, {"verl_overrides": {key: 1}})
    with pytest.raises(UserError, match=f"write '{write}', which every stack line names"):
        build_overrides(recipe)


def test_the_refusal_is_one_line(capsys):
    code = main(
        ["train", "--recipe", SEEDS_RECIPE, "--set", "verl_overrides={reward.reward_manager.name: prime}", "--dry-run"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == Exit.BAD_INPUT
    assert err == [
        "npu-rl: error: verl_overrides: 'reward.reward_manager.name' is no key of verl 0.6.1 (stack line "
        "cann8.2-verl0.6); write 'reward_model.reward_manager', which every stack line names for its verl"
    ]
