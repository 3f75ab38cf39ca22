"""The NPU recipes' rollout engine on CPU: verl 0.6.1's vLLM rollout on vLLM 0.9.1's CPU backend, in the
cpu-vllm image (`make image-cpu-vllm`), through the compose service users run (`cpu-vllm-demo`).

One workspace, three runs, each through docker-compose against the image:
- the demo, short: a head-size-32 tiny model, GRPO through the launcher with the vLLM engine in each of the
  two FSDP workers (weights synced into it every step), the consistency gate at step 1 on vLLM's own
  log-probs, a checkpoint, merge, eval and the report;
- `npu-rl train` resumed from that checkpoint for two more steps: a new engine per worker, the gate again;
- the gate's drill (every weight sync into vLLM lands with noise): the run stops at its first step, before
  the optimizer step, with exit INCONSISTENT.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from console_steps import shown_steps

from npu_rl.exit_codes import Exit
from npu_rl.image.build import build_variant
from npu_rl.image.engine import engine
from npu_rl.patches.consistency import DRILL_ENV, METRIC, WEIGHTS_DRILL

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "compose" / "docker-compose.yml"
SERVICE = "cpu-vllm-demo"
STEPS = 4
MORE = 2
# The demo's paths inside the container (compose's command: --workdir /workspace/demo-vllm).
DEMO_DIR = "demo-vllm"
TRAIN = ["npu-rl", "train", "--recipe", "tiny_math_cpu", "--set", "rollout.name=vllm"]
TRAIN += ["--set", "model.path=models/tiny-qwen2-vllm"]

pytestmark = [pytest.mark.image, pytest.mark.timeout(2400)]


def _compose(base: list[str], env: dict[str, str], *args: str, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run([*base, *args], env=env, capture_output=True, text=True, timeout=timeout)


def test_the_vllm_rollout_trains_resumes_and_its_broken_sync_is_stopped(tmp_path, require, capsys):
    compose = require("docker-compose")
    if not os.environ.get("DOCKER_HOST") and not Path("/var/run/docker.sock").exists():
        require("podman")
    built = build_variant("cpu-vllm", root=REPO, log=lambda _: None)
    ws = tmp_path / "ws"
    ws.mkdir()
    run_dir = ws / DEMO_DIR
    measured: dict[str, float] = {}
    with engine() as eng:
        env = {
            **os.environ,
            "DOCKER_HOST": eng.host,
            "WORKSPACE_DIR": str(ws),
            "DEMO_STEPS": str(STEPS),
            "DEMO_WARM_START_STEPS": "50",
            "COMPOSE_PROJECT_NAME": f"npurlvllm{os.getpid()}",
        }
        base = [compose, "-f", str(COMPOSE), "--profile", "cpu-vllm"]
        in_demo = ["-e", f"NPU_RL_WORKSPACE=/workspace/{DEMO_DIR}"]
        try:
            start = time.monotonic()
            demo = _compose(base, env, "up", "--no-build", "--abort-on-container-exit", "--exit-code-from", SERVICE,
                            SERVICE, timeout=1500)  # fmt: skip
            measured["demo_s"] = time.monotonic() - start
            log = demo.stdout + demo.stderr
            assert demo.returncode == 0, log[-4000:]
            assert set(range(1, STEPS + 1)) <= set(shown_steps(log)), log[-3000:]
            gate = re.search(r"npu-rl: consistency gate at step 1: rollout probs diff mean ([0-9.e-]+) <= ", log)
            assert gate, log[-3000:]
            measured["gap_step1"] = float(gate.group(1))
            # vLLM's bfloat16 log-probs against the trainer's float32 ones: close, and not equal by construction
            # (the hf rollout shares the trainer's module).
            assert 0 < measured["gap_step1"] < 0.05
            assert list(run_dir.rglob(f"global_step_{STEPS}/actor/huggingface/model.safetensors")), "no merged model"
            assert list(run_dir.rglob("report/report.html"))
            assert re.search(rf"held-out accuracy     : \d+\.\d\d -> \d+\.\d\d at step {STEPS} ", log), log[-3000:]

            # Resumed: the checkpoint's weights go into two new engines, the gate measures again at step 5.
            sets = {"algorithm.total_training_steps": STEPS + MORE}
            args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
            resumed = _compose(base, env, "run", "--rm", *in_demo, SERVICE, *TRAIN, *args, timeout=900)
            log = resumed.stdout + resumed.stderr
            assert resumed.returncode == 0, log[-4000:]
            assert f"npu-rl: resuming tiny_math_cpu from global_step_{STEPS}" in log, log[-3000:]
            assert shown_steps(log) == list(range(STEPS + 1, STEPS + MORE + 1)), log[-3000:]
            gate = re.search(rf"consistency gate at step {STEPS + 1}: rollout probs diff mean ([0-9.e-]+) <= ", log)
            assert gate, log[-3000:]
            measured["gap_resumed"] = float(gate.group(1))

            # The drill: a broken sync into vLLM is stopped at the first step, before the update.
            sets = {"logging.experiment": "drill", "algorithm.total_training_steps": 2}
            args = [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
            drill = _compose(base, env, "run", "--rm", *in_demo, "-e", f"{DRILL_ENV}={WEIGHTS_DRILL}", SERVICE,
                             *TRAIN, *args, timeout=900)  # fmt: skip
            log = drill.stdout + drill.stderr
            assert drill.returncode == Exit.INCONSISTENT, log[-4000:]
            (line,) = [ln for ln in log.splitlines() if "npu-rl: error:" in ln]
            assert "consistency gate at step 1: the rollout's token probabilities differ" in line, line
            assert f"({METRIC}; limit " in line and "stopped before the optimizer step" in line
            assert shown_steps(log) == []
            verdicts = list(run_dir.rglob("drill/consistency.json"))
            assert verdicts, "no verdict file"
            (step,) = json.loads(verdicts[0].read_text())["steps"]
            measured["gap_drill"] = step["probs_diff_mean"]
            # Stopped, and far from a healthy run's gap (measured here: 0.108 against 0.00065).
            assert not step["ok"] and step["probs_diff_mean"] > 20 * measured["gap_step1"]
        finally:
            _compose(base, env, "down", timeout=300)
    with capsys.disabled():
        print(
            f"\nimage {built.tag}: {built.size_bytes / 1e9:.2f} GB; demo ({STEPS} steps) {measured['demo_s']:.0f} s; "
            f"{METRIC}: step 1 {measured['gap_step1']:.5f}, resumed {measured['gap_resumed']:.5f}, "
            f"drill {measured['gap_drill']:.3f}"
        )
