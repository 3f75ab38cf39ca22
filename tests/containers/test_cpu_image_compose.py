"""The CPU image, built as `make image-cpu` builds it, runs the demo through docker-compose.

Docker if one answers, else podman's Docker-compatible API (npu_rl.image.engine), and
docker-compose against it, with the compose file users run and a host workspace volume.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from compose_run import compose_project, require_compose
from console_steps import shown_steps

from npu_rl.image.build import build_variant

REPO = Path(__file__).resolve().parents[2]
STEPS = 4

pytestmark = [pytest.mark.image, pytest.mark.timeout(1800)]


def test_cpu_image_builds_and_runs_the_demo_through_compose(tmp_path, capsys):
    require_compose()
    logs: list[str] = []
    built = build_variant("cpu", root=REPO, log=logs.append)
    # The image is the locked set and the demo, not a second copy of either.
    assert 1e9 < built.size_bytes < 4.5e9, f"{built.size_bytes / 1e9:.2f} GB"

    ws = tmp_path / "ws"
    ws.mkdir()
    # A short demo: the image is under test, not the learning (tests/e2e/test_demo_learns.py).
    variables = {"DEMO_STEPS": str(STEPS), "DEMO_WARM_START_STEPS": "50"}
    with compose_project("cpu", ws, "npurltest", **variables) as compose:
        start = time.monotonic()
        run = compose.up("cpu-demo")
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
