"""SIGTERM to `npu-rl train` (what `docker stop`, a pod deletion or `timeout` send) mid-training:
every process of the run ends, the metrics logged so far are on disk, and a re-run finishes the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from npu_rl.cli import main
from npu_rl.launcher import run_files
from npu_rl.recipe import load_recipe

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def test_sigterm_mid_training_ends_every_process_of_the_run(tmp_path, monkeypatch, tiny_model):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    sets = {"logging.experiment": "sigterm", "algorithm.total_training_steps": 4, "checkpoint.save_freq": 1}
    recipe = load_recipe("tiny_math_cpu", sets)
    tiny_model(run_files.model_dir(recipe), steps=20)
    assert main(["data", "math", "--from", "sample", "--out", str(tmp_path / "data" / "math-sample")]) == 0
    log = tmp_path / "train.out"
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    proc = subprocess.Popen([sys.executable, "-m", "npu_rl", "train", "--recipe", "tiny_math_cpu", *args],
                            env={**os.environ}, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while "step:1 - " not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        tree = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert len(tree) >= 6  # driver, ray start, GCS, raylet, TaskRunner and FSDP workers at least
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        end = time.monotonic() + 10
        while _alive(tree) and time.monotonic() < end:
            time.sleep(0.2)
        assert _alive(tree) == [], [psutil.Process(p).cmdline()[:3] for p in _alive(tree)]
        assert "SIGTERM: stopping verl" in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = run_files.metrics_file(recipe, 0).read_text().splitlines()
    assert lines and json.loads(lines[0])["step"] == 1  # flushed when the step ended, not lost with the kill
    assert main(["train", "--recipe", "tiny_math_cpu", *args]) == 0
    assert run_files.latest_step(recipe) == 4
