"""`make test`'s one end-to-end run, through the path a user runs: the `npu-rl` command, on a terminal (a
pseudo-terminal), trains the tiny recipe for a few steps on its own local Ray head (launcher, patches, reward,
supervisor, consistency gate), then `npu-rl merge` and `npu-rl eval` read what it wrote. The terminal shows one
live progress line and the events; the raw stream is whole in console.log; every process the training started
is gone when it returns. The runs without a terminal (one plain line per step) are every other run's: the CPU
pipeline's, the demo's, the containers'. The longer runs (stops and resumes, clusters and their faults, the
demo's learning) are in `make test-all`."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import terminal
from console_steps import raw_steps

from npu_rl import run_files
from npu_rl.cli import main
from npu_rl.eval.table import CSV_NAME, ResultTable
from npu_rl.patches.consistency import METRIC
from npu_rl.recipe import load_recipe
from npu_rl.report.scalars import load_run

pytestmark = [pytest.mark.smoke, pytest.mark.timeout(900)]

STEPS = 2
SETS = {
    "logging.experiment": "smoke",
    "algorithm.total_training_steps": STEPS,
    "checkpoint.save_freq": STEPS,
    "checkpoint.test_freq": 100,
}
ARGS = ["--recipe", "tiny_math_cpu", *[a for k, v in SETS.items() for a in ("--set", f"{k}={v}")]]
EVAL_LIMIT = 4


def _npu_rl() -> str:
    """The console script pip installed beside this interpreter: what a user types."""
    exe = Path(sys.executable).with_name("npu-rl")
    assert exe.is_file(), f"{exe}: npu-rl is not installed in this environment (make venv)"
    return str(exe)


def _train(env: dict[str, str]) -> tuple[int, bytes, set[int]]:
    """`npu-rl train` as a process on a pseudo-terminal; returns its exit code, what it wrote to the terminal and
    every process it started, seen while it ran."""
    seen: set[int] = set()
    out = b""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [_npu_rl(), "train", *ARGS], env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
    )
    os.close(slave)
    try:
        me = psutil.Process(proc.pid)
        deadline = time.monotonic() + 600
        while True:
            assert time.monotonic() < deadline, out.decode(errors="replace")[-3000:]
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the terminal's other side closed: the process ended
                    chunk = b""
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
            try:
                seen.update(c.pid for c in me.children(recursive=True))
            except psutil.NoSuchProcess:
                pass
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
        os.close(master)
    return proc.returncode, out, seen


def _left(pids: set[int], started: float) -> list[str]:
    """The processes among ``pids`` still running (a pid reused by a newer process does not count)."""
    left = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if p.create_time() <= started + 600 and p.status() != psutil.STATUS_ZOMBIE:
                left.append(" ".join(p.cmdline()[:4]))
        except psutil.NoSuchProcess:
            pass
    return left


def test_train_then_merge_then_eval(tmp_path, monkeypatch, capfd, tiny_model):
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    recipe = load_recipe("tiny_math_cpu", SETS)
    tiny_model(run_files.model_dir(recipe), steps=100)
    assert main(["data", "math", "--from", "sample", "--out", str(tmp_path / "data" / "math-sample")]) == 0

    env = {**os.environ, "NPU_RL_WORKSPACE": str(tmp_path), "RAY_ADDRESS": "", "COLUMNS": "200", "TERM": "xterm"}
    env.pop("NPU_RL_VERBOSE", None)
    started = time.time()
    code, raw_out, tree = _train(env)
    screen = terminal.screen(raw_out)
    text = "\n".join(screen)
    assert code == 0, text[-4000:]

    # The supervisor stopped what the run started: the local Ray head (GCS, raylet, ...), verl's driver,
    # the TaskRunner and the FSDP workers.
    assert len(tree) >= 5, tree  # ray start, GCS, raylet, driver, TaskRunner and workers at least
    end = time.monotonic() + 15
    while _left(tree, started) and time.monotonic() < end:
        time.sleep(0.5)
    assert _left(tree, started) == []

    # On a terminal: the live line redrawn in place (carriage returns), its last state the last step with an ETA;
    # the events that matter; no raw stream.
    console_log = run_files.console_log(recipe)
    # (A carriage return not before a line feed: the terminal turns every line feed into both.)
    assert re.search(rb"\r(?!\n)", raw_out) and not any(f"step 1/{STEPS} " in line for line in screen), text
    assert re.search(rf"step {STEPS}/{STEPS} .* ETA 0:00:00 \| .*reward .* elapsed", text), text
    assert f"verl's and Ray's output: {console_log}" in screen[0]
    assert any(line.startswith(f"npu-rl: finished at global_step_{STEPS} in ") for line in screen), text
    assert "npu-rl: consistency gate at step 1: " in text and f"npu-rl: checkpoint global_step_{STEPS} saved" in text
    assert "Traceback" not in text and "step:1 - " not in text and "[ray]" not in text and len(screen) < 20, text
    # The raw stream is whole in the attempt's console.log: Ray's own lines, verl's step lines, the warnings.
    raw = console_log.read_text(errors="replace")
    assert raw_steps(raw) == list(range(1, STEPS + 1)) and "[ray] " in raw and "Apex" in raw
    # Each step logged once in the metrics file, in order.
    metrics = [json.loads(line) for line in run_files.metrics_file(recipe, 0).read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    # The reward function the launch named scored the rollouts: its parts reached the logs.
    scalars = load_run(run_files.log_root(recipe))
    for tag in ("actor/pg_loss", "critic/score/mean", "reward/acc", "reward/boxed"):
        assert list(scalars[tag].steps) == list(range(1, STEPS + 1)), tag
    # The recipe's consistency gate ran at step 1 and passed, and only there.
    gate = json.loads((run_files.log_root(recipe) / "consistency.json").read_text())
    assert [s["step"] for s in gate["steps"]] == [1] and gate["steps"][0]["ok"] and gate["error"] is None
    assert 0 <= metrics[0]["data"][METRIC] <= recipe.consistency.max_probs_diff_mean
    assert METRIC not in metrics[1]["data"]
    # The checkpoint is complete: every rank's shards, the dataloader state, the marker.
    assert run_files.saved_steps(recipe) == [STEPS] and run_files.checkpoint_problem(recipe, STEPS) is None

    capfd.readouterr()
    assert main(["merge", *ARGS]) == 0
    merged = run_files.merged_model_dir(recipe, STEPS)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(merged)
    base = AutoModelForCausalLM.from_pretrained(run_files.model_dir(recipe))
    assert model.config.model_type == "qwen2" and set(model.state_dict()) == set(base.state_dict())
    # Trained: the merged weights are the checkpoint's, not the base model's.
    assert any(not model.state_dict()[k].equal(base.state_dict()[k]) for k in base.state_dict())

    out_dir = tmp_path / "eval"
    assert main(["eval", *ARGS, "--limit", str(EVAL_LIMIT), "--out", str(out_dir)]) == 0
    table = ResultTable.read_csv(out_dir / CSV_NAME)
    rows = {(r.step, r.metric) for r in table.rows}
    assert (0, "accuracy") in rows and (STEPS, "accuracy") in rows, table.rows
    assert all(0.0 <= r.score <= 100.0 for r in table.rows if r.metric == "accuracy")
    shutil.rmtree(tmp_path / "checkpoints", ignore_errors=True)  # about 100 MB of shards
