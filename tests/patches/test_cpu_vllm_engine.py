"""What the cpu patch changes in verl 0.6.1's vLLM rollout config before vLLM 0.9.1's CPU engine is built,
on verl's own RolloutConfig: the prefix cache goes where IPEX decodes (its kernel needs sequences that share
no KV block: tests/containers/ipex_decode_probe.py runs it), and stays where it does not."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from verl.workers.config.rollout import RolloutConfig  # noqa: E402

from npu_rl.patches import cpu_platform  # noqa: E402


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
