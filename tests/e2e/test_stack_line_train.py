"""The tiny recipe trained on the cann9.1-verl0.9 stack line, through the `npu-rl` command of that line's
CPU environment (`make venv STACK=cann9.1-verl0.9`): verl 0.9.0's trainer v1 on TransferQueue, vLLM 0.23's CPU
backend as its rollout server, the FSDP engine on the cpu patch's platform plugin, every weight sync through
shared memory. Then a second `npu-rl train` resumes it from its newest checkpoint, with every weight sync
landing with noise (the consistency gate's drill).

What it shows: the run ends by itself (exit 0) with every selected patch active in the trainer, the FSDP
worker, the reward-loop worker and the vLLM server (attest); the gate runs the pass at the first step and
passes, the rollout's log-probs agreeing with the trainer's (the weight sync lands), and the next step skips
the pass (verl's bypass mode, the recipe's recompute_old_log_prob: false); the reward's parts and the batch fingerprint
reach the metrics; checkpoints rotate after a save completes. The resumed run starts at the checkpoint's step,
and the gate stops its broken sync before the update, in one line (exit INCONSISTENT): without the gate the
run would have trained on the noisy policy's samples and exited 0."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from needs import missing_setup

from npu_rl import run_files, versions
from npu_rl.cli import main
from npu_rl.demo import LINE_FIRST_STEP_S, VLLM_MODEL_ARGS
from npu_rl.exit_codes import Exit
from npu_rl.patches.consistency import DRILL_ENV, METRIC, WEIGHTS_DRILL
from npu_rl.recipe import load_recipe

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
LINE = "cann9.1-verl0.9"
SETS = {
    "stack": LINE,
    "rollout.name": "vllm",
    # The recipe's own old_log_prob skip (verl 0.9's bypass mode there) and its gate (each run's first step).
    # One FSDP worker and one vLLM server: two of each, on two nodes, run in tests/cluster/test_multinode_line.py.
    "resources.devices_per_node": 1,
    "logging.experiment": "line09",
    "checkpoint.save_freq": 1,
    "checkpoint.test_freq": 100,
    "checkpoint.max_to_keep": 1,
    "watchdog.first_step_s": LINE_FIRST_STEP_S,
}


def _npu_rl() -> str:
    exe = REPO / f".venv-{LINE}" / "bin" / "npu-rl"
    if not exe.is_file():
        missing_setup(f"the {LINE} CPU environment", f"make venv STACK={LINE}")
    return str(exe)


def _train(ws: Path, steps: int, **more) -> tuple[int, str]:
    sets = {**SETS, "algorithm.total_training_steps": steps, **more}
    args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    env = {**os.environ, "NPU_RL_WORKSPACE": str(ws), "RAY_ADDRESS": ""}
    proc = subprocess.run(
        [_npu_rl(), "train", "--recipe", "tiny_math_cpu", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        start_new_session=True,
    )
    return proc.returncode, proc.stdout + proc.stderr


def _left_behind(ws: Path, within_s: float = 20.0) -> list[str]:
    """Processes still running with the run's workspace in their environment (every process the run started
    inherits it: the Ray head, its workers, the vLLM servers and their engine processes)."""
    import psutil

    deadline = time.monotonic() + within_s
    while True:
        left = []
        for proc in psutil.process_iter(["pid", "name"]):
            try:
                if proc.environ().get("NPU_RL_WORKSPACE") == str(ws) and proc.pid != os.getpid():
                    left.append(f"{proc.pid} {proc.info['name']}")
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(1)


def _metrics(recipe, start: int) -> list[dict]:
    path = run_files.metrics_file(recipe, start)
    return [json.loads(line)["data"] for line in path.read_text().splitlines() if line.strip()]


def test_tiny_recipe_trains_and_resumes_on_verl_0_9(tmp_path, monkeypatch, tiny_model):
    exe = _npu_rl()
    assert versions.line_verl(LINE) == "0.9.0"
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(tmp_path))
    recipe = load_recipe("tiny_math_cpu", SETS)
    tiny_model(run_files.model_dir(recipe), steps=100, args=VLLM_MODEL_ARGS)
    assert main(["data", "math", "--from", "sample", "--out", str(tmp_path / "data" / "math-sample")]) == 0
    assert Path(exe).resolve().parent.parent.name == f".venv-{LINE}"

    code, out = _train(tmp_path, steps=2)
    assert code == 0, out[-4000:]
    assert "npu-rl: finished at global_step_2" in out, out[-2000:]
    assert "Traceback" not in out
    assert _left_behind(tmp_path) == []  # the stop ended every process the run started, vLLM's among them

    verdict = json.loads((run_files.log_root(recipe) / "workers.json").read_text())
    assert verdict["error"] is None
    expected = [
        "batch_fingerprint", "reward_parts", "checkpoint_rotation", "cpu", "file_logger", "consistency", "attest"
    ]  # fmt: skip
    assert verdict["expected"] == expected  # swanlab_finish retired on verl 0.9 (TaskRunnerV1 finishes)
    # The FSDP worker, the reward-loop worker and the vLLM server.
    assert len(verdict["workers"]) == 3, verdict["workers"]
    assert all(set(expected) <= set(w["patches"]) for w in verdict["workers"])
    applied = verdict["trainer"]["applied"]
    assert "verl.plugin.platform.platform_manager:_register_cpu_platform" in applied["cpu"]
    assert "verl.trainer.ppo.v1.trainer_base:_patch_trainer_base" in applied["checkpoint_rotation"]

    # The gate ran the pass the skip leaves out at the run's first step and read verl's measures of it: vLLM's
    # log-probs of the sampled tokens against the trainer's, so the synced weights are the trained ones.
    gate = json.loads((run_files.log_root(recipe) / "consistency.json").read_text())
    assert [(v["step"], v["ok"]) for v in gate["steps"]] == [(1, True)] and gate["error"] is None
    assert all(v["probs_diff_mean"] < 0.05 and v["probs_corr"] > 0.9 for v in gate["steps"]), gate
    assert "consistency gate at step 1: rollout probs diff mean" in out
    assert "consistency gate at step 2" not in out
    steps = _metrics(recipe, 0)
    assert [int(m["training/global_step"]) for m in steps] == [1, 2]
    for m in steps:
        assert {"reward/acc", "reward/format", "reward/boxed", "batch/fingerprint"} <= set(m), sorted(m)
    assert steps[0]["batch/fingerprint"] != steps[1]["batch/fingerprint"]
    # Step 2 skipped the pass (verl's bypass mode: the rollout's log-probs are the update's old ones): verl
    # measured nothing and corrected nothing there, and the update's ratio stayed inside PPO's clip.
    assert METRIC in steps[0] and METRIC not in steps[1]
    assert not any(k.startswith("rollout_corr/") for k in steps[1]), sorted(steps[1])
    assert steps[1]["actor/pg_clipfrac"] < 0.05, steps[1]["actor/pg_clipfrac"]
    # Rotated once step 2's save was complete: the newest one remains (max_to_keep 1).
    assert run_files.step_numbers(run_files.checkpoint_root(recipe)) == [2]

    code, out = _train(tmp_path, steps=3, **{f"env.{DRILL_ENV}": WEIGHTS_DRILL})
    assert code == Exit.INCONSISTENT, out[-4000:]
    assert "resuming line09 from global_step_2" in out, out[-2000:]
    (line,) = [ln for ln in out.splitlines() if ln.startswith("npu-rl: error:")]
    assert line.startswith("npu-rl: error: consistency gate at step 3: the rollout's token probabilities "), line
    assert "stopped before the optimizer step" in line and "Traceback" not in out
    gate = json.loads((run_files.log_root(recipe) / "consistency.json").read_text())
    (step,) = gate["steps"]
    assert step["step"] == 3 and not step["ok"] and (step["probs_diff_mean"] > 0.1 or step["probs_corr"] < 0.9)
    assert METRIC in line or "correlate" in line
    # Stopped before the update: step 3 was neither trained nor saved; nothing of the run is left.
    assert run_files.step_numbers(run_files.checkpoint_root(recipe)) == [2]
    assert _left_behind(tmp_path) == []
