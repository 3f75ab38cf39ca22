"""Every verl key a recipe field's description names (what `npu-rl recipe explain` shows) is one the launch sets,
under the name each stack line's verl reads: the descriptions and the launcher's overrides cannot drift apart.

A description names keys as ``verl `key```, in verl 0.6.1's names, which the launch moves for later releases
(npu_rl.launcher.releases), or as ``verl 0.9.0 `key```, a key of that release's lines alone; several keys follow
one ``verl`` separated by ", " or " and ", and ``{a,b}`` stands for both spellings.
"""

from __future__ import annotations

import re
from typing import Any, get_args

import pytest
from pydantic import BaseModel, Field

from npu_rl import versions
from npu_rl.launcher.releases import for_release
from npu_rl.launcher.spec import build_launch, hydra_args
from npu_rl.paths import recipes_dir
from npu_rl.recipe import load_recipe
from npu_rl.recipe.explain import entries
from npu_rl.recipe.schema import Recipe

KEYS = re.compile(r"\bverl(?: (?P<release>\d+\.\d+\.\d+))? (?P<keys>`[^`]+`(?:(?:, | and )`[^`]+`)*)")
# Fields no shipped recipe sets, whose keys the launch sets only when they are set.
UNSET_BY_RECIPES: dict[str, Any] = {"data.val_batch_size": 4}
UNSET_BY_SFT_RECIPES: dict[str, Any] = {"sft.max_token_len_per_device": 8192}


def _expand(key: str) -> list[str]:
    m = re.search(r"\{([^}]*)\}", key)
    if m is None:
        return [key]
    return [k for alt in m[1].split(",") for k in _expand(key[: m.start()] + alt + key[m.end() :])]


def described(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str | None, str]]:
    """(field, the release the key is limited to or None, verl key) of every key the descriptions name."""
    out = []
    for name, field in model.model_fields.items():
        for m in KEYS.finditer(field.description or ""):
            out += [(prefix + name, m["release"], k) for ks in re.findall(r"`([^`]+)`", m["keys"]) for k in _expand(ks)]
        for sub in (a for a in (field.annotation, *get_args(field.annotation)) if isinstance(a, type)):
            if issubclass(sub, BaseModel):
                out += described(sub, f"{prefix}{name}.")
    return out


def unemitted(model: type[BaseModel], emitted: set[str], release: str) -> list[str]:
    """``field: key`` of each described key of ``release`` that no emitted override sets (the key itself, or one
    under it: `env`'s runtime_env.env_vars)."""
    missing = []
    for field, only, key in described(model):
        if only not in (None, release):
            continue
        want = key if only else for_release(key, release)
        if not any(e == want or e.startswith(want + ".") for e in emitted):
            missing.append(f"{field}: {want}")
    return missing


def emitted_keys(line: str) -> set[str]:
    """The keys of the launch overrides of every shipped recipe on ``line`` (each recipe moved onto it)."""
    rollouts = versions.get("verl.rollouts", versions.load(stack=line))
    keys = set()
    for path in sorted(recipes_dir().glob("*.yaml")):
        own = load_recipe(path.stem)
        if (own.rollout.multi_turn.enabled or own.sft is not None) and versions.line_verl(line) == "0.6.1":
            continue  # verl 0.9's tool agent loop and SFT trainer only: the schema refuses them on the seeds' line
        sets: dict[str, Any] = {"stack": line}
        if load_recipe(path.stem).rollout.name not in rollouts:
            sets["rollout.name"] = "vllm"
        for extra in ({}, UNSET_BY_RECIPES if own.sft is None else UNSET_BY_SFT_RECIPES):
            _, overrides = hydra_args(build_launch(load_recipe(path.stem, {**sets, **extra})).argv)
            keys |= {o.partition("=")[0] for o in overrides}
    return keys


@pytest.mark.parametrize("line", versions.line_names())
def test_every_described_verl_key_is_set_by_the_launch(line, tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    assert unemitted(Recipe, emitted_keys(line), versions.line_verl(line)) == []


def test_the_descriptions_name_their_keys_in_the_parsed_form():
    keys = described(Recipe)
    assert len(keys) > 80
    assert ("model.dtype", None, "actor_rollout_ref.ref.fsdp_config.dtype") in keys
    assert ("actor.param_offload", None, "actor_rollout_ref.actor.megatron.grad_offload") in keys
    assert ("rollout.expert_parallel", "0.9.0", "actor_rollout_ref.rollout.expert_parallel_size") in keys
    # A field that says "-> verl" names its key where the parse finds it.
    fields = {f for f, _, _ in keys}
    unparsed = [e.name for e in entries() if "-> verl" in e.description and e.name not in fields]
    assert unparsed == []


class _Spec(BaseModel):
    epochs: int = Field(1, description="-> verl `trainer.total_epochs`")
    typo: int = Field(1, description="-> verl `trainer.total_epoch`")
    reward: str = Field("f", description="-> verl `custom_reward_function.name`")
    newer: bool = Field(False, description="-> verl 0.9.0 `algorithm.rollout_correction.bypass_mode`")


def test_a_key_the_launch_does_not_set_on_a_line_fails_the_check():
    seeds_line = {"trainer.total_epochs", "custom_reward_function.name"}
    assert unemitted(_Spec, seeds_line, "0.6.1") == ["typo: trainer.total_epoch"]
    # verl 0.9 reads the reward under reward.*: the seeds' name emitted there is a key no one reads.
    assert unemitted(_Spec, seeds_line, "0.9.0") == [
        "typo: trainer.total_epoch",
        "reward: reward.custom_reward_function.name",
        "newer: algorithm.rollout_correction.bypass_mode",
    ]
