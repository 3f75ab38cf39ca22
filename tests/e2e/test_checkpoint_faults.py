"""Damaged and finished runs, as an operator meets them: resume from the newest complete checkpoint,
never crash-loop on a damaged one, re-running a finished run is a no-op, rotation holds after resumes."""

from __future__ import annotations

import json
import re

import pytest

from npu_rl.cli import main
from npu_rl.launcher import run_files
from npu_rl.recipe import load_recipe

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SETS = {"logging.experiment": "faults", "checkpoint.save_freq": 1, "checkpoint.max_to_keep": 2,
        "checkpoint.test_freq": 100}


def _args(steps: int) -> list[str]:
    sets = {**SETS, "algorithm.total_training_steps": steps}
    return ["--recipe", "tiny_math_cpu", *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")]]


def _metric_steps(recipe, start: int) -> list[int]:
    lines = run_files.metrics_file(recipe, start).read_text().splitlines()
    return [json.loads(line)["step"] for line in lines]


def _steps_logged(out: str) -> set[str]:
    return set(re.findall(r"\bstep:(\d+) - ", out))


def test_damaged_latest_checkpoint_finished_run_and_rotation(tmp_path, monkeypatch, capfd, tiny_model):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    recipe = load_recipe("tiny_math_cpu", SETS)
    tiny_model(run_files.model_dir(recipe), steps=20)
    assert main(["data", "math", "--from", "sample", "--out", str(tmp_path / "data" / "math-sample")]) == 0

    assert main(["train", *_args(2)]) == 0
    assert run_files.saved_steps(recipe) == [1, 2]
    capfd.readouterr()
    assert _metric_steps(recipe, 0) == [1, 2]  # the last step's line is on disk too

    # One optimizer shard of the newest checkpoint lost (a disk fault, a kill during the save).
    (run_files.step_dir(recipe, 2) / "actor" / "optim_world_size_2_rank_1.pt").unlink()
    assert run_files.latest_step(recipe) == 1
    assert main(["merge", *_args(2), "--step", "2"]) == 2
    err = capfd.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("npu-rl: error: --step 2: global_step_2 is incomplete (1 shard(s) missing")

    assert main(["train", *_args(3)]) == 0
    out = capfd.readouterr().out
    assert "skipping damaged global_step_2: 1 shard(s) missing or empty" in out
    assert "resuming faults from global_step_1" in out
    assert _steps_logged(out) == {"2", "3"}  # step 2 trained again, from step 1's state
    assert _metric_steps(recipe, 1) == [2, 3]  # the resumed segment's own metrics file
    # max_to_keep 2 across both segments: step 1 rotated away, the re-saved step 2 is complete again.
    assert run_files.saved_steps(recipe) == [2, 3]
    assert not run_files.step_dir(recipe, 1).exists()

    assert main(["train", *_args(3)]) == 0
    out = capfd.readouterr().out
    assert "already finished: global_step_3 reached total_training_steps 3" in out
    assert _steps_logged(out) == set() and run_files.saved_steps(recipe) == [2, 3]

    # verl writes config and tokenizer into actor/huggingface at save time; without weights it is not merged.
    assert main(["eval", *_args(3), "--step", "3"]) == 2
    err = capfd.readouterr().err.strip().splitlines()[-1]
    assert err == "npu-rl: error: step 3 is not merged yet: run `npu-rl merge --recipe tiny_math_cpu --step 3`"
