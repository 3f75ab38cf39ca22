"""SwanLab (local mode) shows a verl run as finished when RayPPOTrainer.fit returns, and as crashed when
it raises, although the process then ends the way Ray ends verl's TaskRunner (a forced exit: no atexit
hook, no garbage collection) while something still holds the tracker fit made.

Each case runs verl's real ``RayPPOTrainer.fit`` (up to its validation-only return) with verl's real
``Tracking`` and the swanlab backend in a fresh process that installs the patches as every Ray worker
does (``NPU_RL_PATCHES`` and the boot ``sitecustomize``); the state is read back with SwanLab's own
dashboard models (swanboard), where 1 is finished, -1 crashed and 0 running."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from npu_rl.patches import env_for

pytestmark = pytest.mark.timeout(300)

FINISHED, CRASHED, RUNNING = 1, -1, 0

# fit's tracker outlives fit when something keeps fit's frame (a stored traceback does); _validate
# keeps it here. `ending` is how the process ends: Ray's forced exit, or collect then exit normally.
CHILD = textwrap.dedent(
    """
    import gc, os, sys
    from omegaconf import OmegaConf
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    crash, ending = sys.argv[1] == "crash", sys.argv[2]
    kept = []

    def validate():
        kept.append(sys._getframe(1))
        if crash:
            raise RuntimeError("validation blew up")
        return {"val-core/x/acc/mean@1": 0.5}

    trainer = RayPPOTrainer.__new__(RayPPOTrainer)
    trainer.config = OmegaConf.create({"trainer": {
        "project_name": "npu_rl_test", "experiment_name": "exp", "logger": ["console", "swanlab"],
        "val_before_train": True, "val_only": True}})
    trainer.val_reward_fn = object()
    trainer._load_checkpoint = lambda: None
    trainer._validate = validate
    try:
        trainer.fit()
    except RuntimeError as err:
        print("fit raised:", err, flush=True)
    print("fit ended", flush=True)
    if ending == "forced":
        os._exit(0)
    kept.clear()
    gc.collect()
    """
)


def _run(tmp_path: Path, case: str, ending: str, patched: bool = True) -> tuple[subprocess.CompletedProcess, Path]:
    logdir = tmp_path / f"{case}-{ending}" / "swanlab"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NPU_RL_PATCHES", "SWANLAB_"))}
    env.update(env_for(["swanlab_finish"] if patched else []))
    env.update(SWANLAB_MODE="local", SWANLAB_LOG_DIR=str(logdir))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, case, ending], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0 and "fit ended" in out.stdout, (out.stdout[-2000:], out.stderr[-3000:])
    return out, logdir


def _states(logdir: Path) -> list[tuple[str, int]]:
    from swanboard.db import Experiment, connect

    connect(str(logdir))
    return [(e.name, e.status) for e in Experiment.select()]


def test_a_run_whose_fit_returned_is_finished_after_a_forced_exit(tmp_path):
    _, logdir = _run(tmp_path, "ok", "forced")
    assert _states(logdir) == [("exp", FINISHED)]


def test_a_run_whose_fit_raised_is_crashed_with_the_error(tmp_path):
    _, logdir = _run(tmp_path, "crash", "forced")
    assert _states(logdir) == [("exp", CRASHED)]
    (error_log,) = logdir.glob("run-*/console/error.log")
    assert "RuntimeError: validation blew up" in error_log.read_text()


def test_the_tracker_is_finished_once(tmp_path):
    """When the tracker is collected later, its own __del__ finds nothing left to finish."""
    out, logdir = _run(tmp_path, "ok", "collected")
    assert _states(logdir) == [("exp", FINISHED)]
    assert "Exception ignored" not in out.stderr and "finish()" not in out.stdout + out.stderr, out.stderr[-2000:]


def test_without_the_patch_the_run_stays_running(tmp_path):
    """What the patch is for: verl alone leaves the run running when the process is force-exited."""
    _, logdir = _run(tmp_path, "ok", "forced", patched=False)
    assert _states(logdir) == [("exp", RUNNING)]
