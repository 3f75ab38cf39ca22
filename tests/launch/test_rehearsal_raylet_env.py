"""The rehearsal's raylet starts with the environment a pod's `npu-rl ray head|worker` has: none of the
run's variables. So a rehearsal that passes (tests/launch/test_rehearsal.py, every recipe) shows that
the launch's runtime_env alone carries the patches and the recipe's variables to every Ray worker."""

from __future__ import annotations

import pytest

from npu_rl.launcher import rehearsal
from npu_rl.launcher.spec import build_launch
from npu_rl.recipe import load_recipe


class Started(Exception):
    pass


@pytest.mark.parametrize("name", ["tiny_math_cpu", "deepseek_r1_671b_a3"])
def test_the_rehearsal_raylet_gets_none_of_the_runs_variables(name, monkeypatch, tmp_path):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("NPU_RL_PATCHES", "cpu")  # as if the caller's shell had a run's selection
    seen = {}

    class Head:
        def __init__(self, *, env, inherit=True, **_):
            seen.update(env=env, inherit=inherit)
            raise Started

    monkeypatch.setattr(rehearsal, "LocalRayHead", Head)
    monkeypatch.setattr(rehearsal, "check_launch", lambda *a, **k: None)
    recipe = load_recipe(name)
    with pytest.raises(Started):
        rehearsal.run_rehearsal(recipe)
    spec = build_launch(recipe, rehearse=True)
    assert seen["inherit"] is False
    assert not set(spec.env) & set(seen["env"]), sorted(set(spec.env) & set(seen["env"]))
    assert "NPU_RL_PATCHES" not in seen["env"]
    # The rest of the caller's environment, as a pod's processes have it.
    assert "PATH" in seen["env"] and seen["env"]["NPU_RL_WORKSPACE"] == str(tmp_path)
