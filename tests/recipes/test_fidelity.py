"""docs/recipe-fidelity.md is the comparison with cann-recipes-train; the dry-run must match its
``ours`` column (the real CLI path: ``npu_rl.cli.main(["train", "--recipe", X, "--dry-run"])``)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from npu_rl import cli
from npu_rl.launcher.spec import RUNTIME_ENV_PREFIX
from npu_rl.recipe.loader import load_recipe

DOC = Path(__file__).resolve().parents[2] / "docs" / "recipe-fidelity.md"
RECIPES = [
    "deepseek_r1_671b_a3",
    "qwen2_5_1_5b_math_a2_4card",
    # The seeds' run on the cann9.1-verl0.9 stack line (its launch is built for the line's verl wherever
    # the dry-run runs).
    "qwen2_5_1_5b_math_a2_1card_verl09",
    "qwen3_32b_grpo_a3",
    "qwen3_235b_a22b_grpo_a3",
    "qwen3_4b_retool_dapo_a3",
    "qwen3_1_7b_code_toolcall_a2",
    # Their SFT stages, through verl 0.9's SFT trainer under torchrun.
    "qwen3_4b_retool_sft_a3",
    "qwen3_1_7b_code_toolcall_sft_a2",
]
ENTRIES = ("verl.trainer.main_ppo", "verl.trainer.sft_trainer")


def table(recipe: str) -> list[dict[str, str]]:
    """The rows of the recipe's section: kind, setting, upstream, ours, why."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split(f"\n## {recipe}\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| kind") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        rows.append(dict(zip(("kind", "setting", "upstream", "ours", "why"), cells)))
    return rows


def dry_run(recipe: str, capsys) -> tuple[dict[str, str], dict[str, str]]:
    """(hydra overrides key -> value without '+', exported env) as the dry-run prints them."""
    assert cli.main(["train", "--recipe", recipe, "--dry-run"]) in (0, None)
    out = capsys.readouterr().out
    env, command = {}, []
    for line in out.splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export ") :].partition("=")
            env[key] = shlex.split(value)[0] if value else ""
        elif not line.startswith("#"):
            command.append(line)
    argv = shlex.split(" ".join(command).replace("\\ ", " "))
    hydra = {}
    entry = next(a for a in argv if a in ENTRIES)
    for arg in argv[argv.index(entry) + 1 :]:
        if "=" in arg and not arg.startswith(RUNTIME_ENV_PREFIX):
            key, _, value = arg.partition("=")
            hydra[key.lstrip("+")] = value
    return hydra, env


def _checked(rows, kind):
    for row in rows:
        if row["kind"] != kind or "/" in row["setting"] and kind == "env":
            continue
        ours = row["ours"]
        if ours == "—":
            yield row["setting"], None
        elif ours.startswith("`") and ours.endswith("`"):
            yield row["setting"], ours[1:-1]


@pytest.mark.parametrize("recipe", RECIPES)
def test_dry_run_matches_the_fidelity_table(recipe, capsys):
    rows = table(recipe)
    assert len([r for r in rows if r["kind"] in ("hydra", "env")]) > 30, f"no table for {recipe} in {DOC}"
    hydra, env = dry_run(recipe, capsys)
    drift = []
    for kind, actual in (("hydra", hydra), ("env", env)):
        for key, want in _checked(rows, kind):
            have = actual.get(key)
            if have != want:
                drift.append(
                    f"{kind} {key}: table says {want if want is not None else 'unset'}, dry-run has "
                    f"{have if have is not None else 'unset'}"
                )
    assert not drift, "dry-run drifted from docs/recipe-fidelity.md:\n" + "\n".join(drift)


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_variable_is_in_the_table(recipe):
    documented = {name.strip() for row in table(recipe) if row["kind"] == "env" for name in row["setting"].split("/")}
    missing = sorted(set(load_recipe(recipe).env) - documented)
    assert not missing, f"{recipe} sets {missing}, which docs/recipe-fidelity.md does not compare with upstream"


def test_deepseek_done_when_items(capsys):
    assert cli.main(["train", "--recipe", "deepseek_r1_671b_a3", "--dry-run"]) in (0, None)
    out = capsys.readouterr().out
    assert "verl config ppo_megatron_trainer" in out
    assert re.search(r"--config-name[\s\\]+ppo_megatron_trainer", out)
    hydra, env = dry_run("deepseek_r1_671b_a3", capsys)
    tf = "actor_rollout_ref.actor.megatron.override_transformer_config"
    assert (
        hydra[f"{tf}.recompute_granularity"],
        hydra[f"{tf}.recompute_method"],
        hydra[f"{tf}.recompute_num_layers"],
    ) == ("full", "block", "8")
    r = "actor_rollout_ref.rollout"
    assert (hydra[f"{r}.temperature"], hydra[f"{r}.top_k"], hydra[f"{r}.top_p"]) == ("0.9", "50", "0.9")
    assert env["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    assert not {"VLLM_ENABLE_MC2", "VLLM_ENABLE_GRAPH_MODE"} & set(env)
