"""`npu-rl train` failing for real: a reward function that raises, a data file gone after the preflight. Each
run still ends with its one `npu-rl: error:` line naming the cause and console.log, and no traceback on
screen. The run on a terminal (one live line, the events, console.log) is the smoke test's (tests/smoke)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from npu_rl import run_files
from npu_rl.cli import main
from npu_rl.recipe import load_recipe

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

STEPS = 2


def _args(experiment: str, *extra: str) -> list[str]:
    sets = {
        "logging.experiment": experiment,
        "algorithm.total_training_steps": STEPS,
        "checkpoint.save_freq": STEPS,
        "checkpoint.test_freq": 100,
    }
    return ["--recipe", "tiny_math_cpu", *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")], *extra]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tiny_model):
    ws = tmp_path_factory.mktemp("console_ws")
    os.environ["NPU_RL_WORKSPACE"] = str(ws)
    try:
        tiny_model(run_files.model_dir(load_recipe("tiny_math_cpu")), steps=100)
        assert main(["data", "math", "--from", "sample", "--out", str(ws / "data" / "math-sample")]) == 0
    finally:
        del os.environ["NPU_RL_WORKSPACE"]
    return ws


def _npu_rl() -> str:
    return str(Path(sys.executable).with_name("npu-rl"))


def _failing(workspace: Path, argv: list[str], during=None) -> tuple[int, str, str]:
    env = {**os.environ, "NPU_RL_WORKSPACE": str(workspace), "RAY_ADDRESS": ""}
    env.pop("NPU_RL_VERBOSE", None)
    proc = subprocess.Popen(
        [_npu_rl(), "train", *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    if during is not None:
        first = proc.stdout.readline()  # the start line: the preflight has passed
        during()
        out, err = proc.communicate(timeout=600)
        out = first + out
    else:
        out, err = proc.communicate(timeout=600)
    return proc.returncode, out, err


def _one_error_line(out: str, err: str, console_log: Path) -> str:
    errors = [line for line in (out + err).splitlines() if line.startswith("npu-rl: error:")]
    assert len(errors) == 1, out + err
    assert errors[0].endswith(f"(console log: {console_log})"), errors[0]
    assert "Traceback" not in out + err and 'File "' not in out + err, out + err
    return errors[0]


def test_a_reward_that_raises_ends_the_run_with_its_exception_on_one_line(workspace, tmp_path, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(workspace))
    reward = tmp_path / "exploding_reward.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        "    raise ValueError('this reward cannot score ' + str(len(solution_str)) + ' characters')\n"
    )
    code, out, err = _failing(workspace, _args("bad_reward", "--set", f"reward.function={reward}"))
    recipe = load_recipe("tiny_math_cpu", {"logging.experiment": "bad_reward"})
    line = _one_error_line(out, err, run_files.console_log(recipe))
    assert code != 0 and "training exited with code" in line, line
    assert re.search(r"ValueError: this reward cannot score \d+ characters", line), line
    assert "Traceback" in run_files.console_log(recipe).read_text(errors="replace")  # kept, not shown


def test_a_data_file_removed_after_the_preflight_is_named_on_one_line(workspace, monkeypatch):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(workspace))
    recipe = load_recipe("tiny_math_cpu", {"logging.experiment": "lost_data"})
    train_file = run_files.resolve(recipe.data.train_files[0])
    moved = train_file.with_name("moved-away.parquet")

    def remove() -> None:
        train_file.rename(moved)

    try:
        code, out, err = _failing(workspace, _args("lost_data"), during=remove)
    finally:
        moved.rename(train_file)
    line = _one_error_line(out, err, run_files.console_log(recipe))
    assert code != 0 and "training exited with code" in line, line
    assert train_file.name in line or "No such file" in line, line
