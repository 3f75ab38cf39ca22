"""The CPU image, built as `make image-cpu` builds it, runs the demo through docker-compose.

Docker if one answers, else podman's Docker-compatible API (npu_rl.image.engine), and
docker-compose against it, with the compose file users run and a host workspace volume.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from console_steps import shown_steps

from npu_rl.image.build import build_variant
from npu_rl.image.engine import engine

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "compose" / "docker-compose.yml"
STEPS = 4

pytestmark = [pytest.mark.image, pytest.mark.timeout(1800)]


def test_cpu_image_builds_and_runs_the_demo_through_compose(tmp_path, require, capsys):
    compose = require("docker-compose")
    if not os.environ.get("DOCKER_HOST") and not Path("/var/run/docker.sock").exists():
        require("podman")
    logs: list[str] = []
    built = build_variant("cpu", root=REPO, log=logs.append)
    # The image is the locked set and the demo, not a second copy of either.
    assert 1e9 < built.size_bytes < 4.5e9, f"{built.size_bytes / 1e9:.2f} GB"

    ws = tmp_path / "ws"
    ws.mkdir()
    with engine() as eng:
        # A short demo: the image is under test, not the learning (tests/e2e/test_demo_learns.py).
        env = {
            **os.environ,
            "DOCKER_HOST": eng.host,
            "WORKSPACE_DIR": str(ws),
            "DEMO_STEPS": str(STEPS),
            "DEMO_WARM_START_STEPS": "50",
            "COMPOSE_PROJECT_NAME": f"npurltest{os.getpid()}",
        }
        base = [compose, "-f", str(COMPOSE), "--profile", "cpu"]
        start = time.monotonic()
        try:
            run = subprocess.run(
                [*base, "up", "--no-build", "--abort-on-container-exit", "--exit-code-from", "cpu-demo", "cpu-demo"],
                env=env,
                capture_output=True,
                text=True,
                timeout=1500,
            )
        finally:
            subprocess.run([*base, "down"], env=env, capture_output=True, timeout=300)
        seconds = time.monotonic() - start
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-4000:]
    # npu-rl's step lines (no TTY in the container), one per GRPO step, from inside the container.
    steps = set(shown_steps(log))
    assert set(range(1, STEPS + 1)) <= steps, sorted(steps)
    # What the run left in the host's volume: the checkpoint, the merged model, the report.
    run_dir = ws / "demo"
    assert list(run_dir.rglob(f"global_step_{STEPS}/actor")), "no checkpoint on the host"
    merged = list(run_dir.rglob(f"global_step_{STEPS}/actor/huggingface/model.safetensors"))
    assert merged, "no merged model on the host"
    assert list(run_dir.rglob("report/report.html"))
    assert re.search(r"held-out accuracy     : \d+\.\d\d -> \d+\.\d\d at step 4 ", log), log[-3000:]
    with capsys.disabled():
        print(
            f"\nimage {built.tag} on {built.base}: {built.size_bytes / 1e9:.2f} GB, build {built.seconds:.0f} s; "
            f"compose cpu-demo ({STEPS} steps): {seconds:.0f} s"
        )
