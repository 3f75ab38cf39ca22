"""`extends:` in a recipe: another recipe with a few keys laid over it (the same run on another stack line)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from npu_rl.recipe import load_recipe


def test_the_line_recipe_is_the_seeds_one_with_three_keys_changed():
    seeds = load_recipe("qwen2_5_1_5b_math_a2_1card").model_dump()
    line = load_recipe("qwen2_5_1_5b_math_a2_1card_verl09").model_dump()
    changed = {k for k in seeds if seeds[k] != line[k]}
    assert changed == {"name", "description", "stack", "logging", "env"}, changed
    assert line["stack"] == "cann9.1-verl0.9" and line["algorithm"] == seeds["algorithm"]
    # A key set to null is taken out: vLLM 0.23 has neither variable.
    assert set(seeds["env"]) - set(line["env"]) == {"VLLM_USE_V1", "VLLM_ATTENTION_BACKEND"}
    assert {k: v for k, v in seeds["logging"].items() if k != "experiment"} == {
        k: v for k, v in line["logging"].items() if k != "experiment"
    }


def _write(path, data):
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_recipe_extending_itself_back_is_refused_in_one_line(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    _write(a, {"extends": str(b), "name": "a"})
    _write(b, {"extends": str(a), "name": "b"})
    out = subprocess.run(
        [sys.executable, "-m", "npu_rl", "train", "--recipe", str(a), "--dry-run"], capture_output=True, text=True
    )
    assert out.returncode == 2 and out.stderr.startswith("npu-rl: error: "), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "extends it back" in out.stderr


def test_an_unknown_parent_is_named(tmp_path):
    a = _write(tmp_path / "a.yaml", {"extends": "no_such_recipe", "name": "a"})
    out = subprocess.run(
        [sys.executable, "-m", "npu_rl", "train", "--recipe", str(a), "--dry-run"], capture_output=True, text=True
    )
    assert out.returncode == 2 and "unknown recipe 'no_such_recipe'" in out.stderr, out.stderr


def test_a_parent_path_is_read_beside_the_recipe_that_names_it(tmp_path, monkeypatch):
    sub = tmp_path / "mine"
    sub.mkdir()
    seeds = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "configs/recipes/tiny_math_cpu.yaml").read_text(encoding="utf-8")
    )
    _write(sub / "base.yaml", seeds)
    child = _write(sub / "child.yaml", {"extends": "base.yaml", "name": "child", "algorithm": {"lr": 1e-4}})
    monkeypatch.chdir(tmp_path)  # not where the files are
    recipe = load_recipe(child)
    assert recipe.name == "child" and recipe.algorithm.lr == 1e-4
    assert recipe.algorithm.rollout_n == seeds["algorithm"]["rollout_n"]
