"""The seeds' line's CPU numerics pinned to one instruction set (npu_rl.platform.cpu_isa) in the two
processes the demo's numbers come from: the training launch and the tiny model's warm start."""

from __future__ import annotations

import platform

import pytest

from npu_rl.cli import main
from npu_rl.launcher.hydra import quoted
from npu_rl.launcher.spec import RUNTIME_ENV_PREFIX, build_launch
from npu_rl.platform import cpu_isa
from npu_rl.recipe.loader import load_recipe
from npu_rl.versions import default_line, line_names

PINS = cpu_isa.pins(None)
x86_only = pytest.mark.skipif(not PINS, reason="the instruction-set variables name x86-64's (this is not one)")


@pytest.fixture
def unpinned(monkeypatch):
    for key in PINS:
        monkeypatch.delenv(key, raising=False)


def test_only_the_seeds_line_pins_and_only_on_x86_64(monkeypatch):
    if platform.machine() == "x86_64":
        assert PINS == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    for line in line_names():
        if line != default_line():
            assert cpu_isa.pins(line) == {}, line
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert cpu_isa.pins(None) == {}


@x86_only
def test_the_training_launch_carries_the_pins_to_the_driver_and_every_worker(unpinned):
    spec = build_launch(load_recipe("tiny_math_cpu"))
    for key, value in PINS.items():
        assert spec.env[key] == value
        # Workers on raylets started before the driver read them from the job's runtime_env.
        assert f"{RUNTIME_ENV_PREFIX}{key}={quoted(value)}" in spec.argv


@x86_only
def test_a_variable_the_caller_set_is_kept(monkeypatch, unpinned):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    spec = build_launch(load_recipe("tiny_math_cpu"))
    assert "ATEN_CPU_CAPABILITY" not in spec.env
    assert spec.env["ONEDNN_MAX_CPU_ISA"] == PINS["ONEDNN_MAX_CPU_ISA"]


@x86_only
def test_a_vllm_rollout_chooses_its_own_kernels(unpinned):
    spec = build_launch(load_recipe("tiny_math_cpu", {"rollout.name": "vllm"}))
    assert not set(PINS) & set(spec.env)


@x86_only
def test_the_warm_start_runs_on_the_pinned_kernels(tmp_path, capfd, unpinned):
    """Called in a process whose torch is loaded already (this one), the warm start runs in a new process
    under the pins: without that, an AVX-512 machine warms the model up on AVX-512 kernels."""
    assert main(["model", "tiny", "--out", str(tmp_path / "m"), "--warm-start-steps", "2", "--seed", "3"]) == 0
    out = capfd.readouterr().out
    assert f"on torch's {PINS['ATEN_CPU_CAPABILITY'].upper()} kernels" in out
    assert (tmp_path / "m" / "config.json").is_file()


@x86_only
def test_the_warm_start_keeps_the_callers_choice(tmp_path, capfd, monkeypatch, unpinned):
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    assert main(["model", "tiny", "--out", str(tmp_path / "m"), "--warm-start-steps", "1"]) == 0
    assert "on torch's DEFAULT kernels" in capfd.readouterr().out


def test_a_rerun_gets_the_same_arguments():
    """What the rerun process is given parses back to what this one parsed, flags and repeats included."""
    from npu_rl.cli import build_parser
    from npu_rl.commands.options import replayed

    parser = build_parser()
    for argv in (
        ["eval", "--recipe", "tiny_math_cpu", "--set", "a.b=1", "--set", "c=x y", "--limit", "3", "--dry-run"],
        ["eval", "--recipe", "tiny_math_cpu", "--backend", "local"],
        ["model", "tiny", "--out", "/tmp/x", "--heads", "2", "--warm-start-steps", "5", "--sign-error", "0.25"],
    ):
        args = parser.parse_args(argv)
        words = argv[:2] if argv[0] == "model" else argv[:1]
        assert vars(parser.parse_args([*words, *replayed(args)])) == vars(args)
