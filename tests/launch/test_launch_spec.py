"""One launch per run: the argv `--dry-run` prints is the one the preflight composes and the run executes."""

from __future__ import annotations

import io
import shlex
import subprocess
import sys

import pytest
from recipe_names import HERE as RECIPES  # composed with .venv's verl

from npu_rl.errors import UserError
from npu_rl.launcher.spec import RUNTIME_ENV_PREFIX, build_launch, hydra_args
from npu_rl.launcher.verl_config import check_argv, compose_verl_config
from npu_rl.recipe import load_recipe


def _dry_run_argv(name: str, env: dict) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "npu_rl", "train", "--recipe", name, "--dry-run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    command = [
        line for line in out.stdout.replace("\\\n", " ").splitlines() if line and not line.startswith(("export ", "#"))
    ]
    assert len(command) == 1, out.stdout
    return shlex.split(command[0])


@pytest.mark.parametrize("name", RECIPES)
def test_the_printed_argv_is_the_launch_and_composes_with_verl(name, tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    argv = _dry_run_argv(name, {**os.environ})
    spec = build_launch(load_recipe(name))
    assert argv == list(spec.argv)
    cfg = check_argv(argv)  # exactly what `npu-rl train` composes before Ray starts
    # Every Ray worker gets the run's variables through the runtime_env that verl's run_ppo passes to ray.init.
    assert dict(cfg.ray_kwargs.ray_init.runtime_env.env_vars) == dict(spec.env)
    assert set(spec.env["NPU_RL_PATCHES"].split(",")) == set(spec.patches)


def test_the_megatron_recipe_names_its_config_and_needs_it(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    spec = build_launch(load_recipe("deepseek_r1_671b_a3"))
    assert spec.argv[3:5] == ("--config-name", "ppo_megatron_trainer")
    name, overrides = hydra_args(spec.argv)
    assert name == "ppo_megatron_trainer"
    # Without it hydra would compose the megatron keys against ppo_trainer.yaml, as it did before.
    with pytest.raises(UserError, match="ppo_trainer.yaml rejects.*megatron"):
        compose_verl_config(overrides, "ppo_trainer")


def test_env_values_stay_strings_in_the_runtime_env(tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    spec = build_launch(load_recipe("deepseek_r1_671b_a3"))
    assert f"{RUNTIME_ENV_PREFIX}HCCL_BUFFSIZE='300'" in spec.argv  # Ray refuses non-string env_vars
    cfg = check_argv(spec.argv)
    assert all(isinstance(v, str) for v in cfg.ray_kwargs.ray_init.runtime_env.env_vars.values())


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["py", "-m", "verl.trainer.main_ppo", "a=1"], ("ppo_trainer", ["a=1"])),
        (["py", "-m", "verl.trainer.main_ppo", "--config-name", "x", "a=1"], ("x", ["a=1"])),
        (["py", "-m", "verl.trainer.main_ppo", "--config-name=x", "a=1", "+b=2"], ("x", ["a=1", "+b=2"])),
    ],
)
def test_hydra_args_reads_the_argv_as_hydra_does(argv, expected):
    assert hydra_args(argv) == (expected[0], expected[1])


def test_training_without_a_worker_report_is_stopped(tmp_path, monkeypatch):
    """The launcher's guard when the patches never reached verl's TaskRunner (so nobody attested)."""
    import dataclasses
    import time

    from npu_rl.launcher.train import _run
    from npu_rl.launcher.watchdog import StepClock
    from npu_rl.recipe.schema import WatchdogSpec

    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    spec = dataclasses.replace(
        build_launch(load_recipe("tiny_math_cpu")),
        attest_file=tmp_path / "workers.json",
        argv=(
            sys.executable,
            "-c",
            "import time; print('(TaskRunner pid=1) step:1 - actor/pg_loss:0.1', flush=True); time.sleep(60)",
        ),
    )
    t0 = time.monotonic()
    code, error = _run(spec, {}, io.StringIO(), StepClock(WatchdogSpec()))
    assert time.monotonic() - t0 < 30 and code == 1
    assert error.startswith("training started but no Ray worker reported its patches")
    (tmp_path / "workers.json").write_text('{"error": null}')
    spec = dataclasses.replace(spec, argv=(sys.executable, "-c", "print('(TaskRunner pid=1) step:1 - x')"))
    assert _run(spec, {}, io.StringIO(), StepClock(WatchdogSpec())) == (0, None)


def test_a_driver_that_stops_logging_steps_is_dumped_and_stopped(tmp_path, monkeypatch):
    """The watchdog on the launcher's own path: step lines, then silence; stacks, one line, Exit.HUNG."""
    import dataclasses
    import json
    import time

    from npu_rl.exit_codes import Exit
    from npu_rl.launcher.train import _run
    from npu_rl.launcher.watchdog import StepClock
    from npu_rl.recipe.schema import WatchdogSpec

    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    (tmp_path / "workers.json").write_text('{"error": null}')
    driver = (
        "import time\n"
        "for k in (1, 2, 3):\n"
        "    print(f'(TaskRunner pid=1) step:{k} - x', flush=True); time.sleep(0.3)\n"
        "def collective_that_never_returns():\n"
        "    time.sleep(600)\n"
        "collective_that_never_returns()\n"
    )
    spec = dataclasses.replace(
        build_launch(load_recipe("tiny_math_cpu")),
        attest_file=tmp_path / "workers.json",
        log_dir=tmp_path / "logs",
        argv=(sys.executable, "-c", driver),
    )
    spec.log_dir.mkdir()
    t0 = time.monotonic()
    code, error = _run(spec, {}, io.StringIO(), StepClock(WatchdogSpec(floor_s=3, dump_timeout_s=10)))
    assert code == Exit.HUNG and time.monotonic() - t0 < 60
    assert error.startswith("run hung: step 4 did not complete in ") and "allowance 3s" in error, error
    (dump,) = spec.log_dir.glob("hang-*")
    assert str(dump) in error
    summary = json.loads((dump / "summary.json").read_text())
    assert "collective_that_never_returns" in summary["driver"][0]["stack"]
