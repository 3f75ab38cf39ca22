"""The installed symbolic fallback is the pinned one (configs/versions.yaml)."""

from __future__ import annotations

from importlib.metadata import requires, version

from npu_rl import versions


def test_math_verify_and_antlr_runtime_match_the_pins():
    assert version("math-verify") == versions.get("reward.math_verify")
    assert version("antlr4-python3-runtime") == versions.get("reward.antlr4_python3_runtime")


def test_the_fallbacks_latex_parser_is_the_one_math_verify_pins():
    # npu_rl.reward.symbolic imports latex2sympy2_extended directly; its pin is math-verify's.
    wanted = [r for r in requires("math-verify") if r.startswith("latex2sympy2_extended==")]
    assert wanted == [f"latex2sympy2_extended=={version('latex2sympy2_extended')}"]
