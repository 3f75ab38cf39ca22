"""The installed symbolic fallback is the pinned one (configs/versions.yaml)."""

from __future__ import annotations

from importlib.metadata import version

from npu_rl import versions


def test_math_verify_and_antlr_runtime_match_the_pins():
    assert version("math-verify") == versions.get("reward.math_verify")
    assert version("antlr4-python3-runtime") == versions.get("reward.antlr4_python3_runtime")
