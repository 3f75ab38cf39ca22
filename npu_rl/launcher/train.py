"""Run verl GRPO for a recipe: preflight, Ray, ``verl.trainer.main_ppo``, resume."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..recipe.schema import Recipe
from . import paths as run_paths
from .overrides import build_env, command
from .preflight import check_train_inputs
from .ray_local import LocalRayHead


@dataclass
class TrainResult:
    exit_code: int
    seconds: float
    start_step: int | None
    end_step: int | None
    log_file: Path


def dry_run_text(recipe: Recipe) -> str:
    env = build_env(recipe)
    lines = [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    cmd = command(recipe, python="python3")
    lines.append(" \\\n    ".join(shlex.quote(c) for c in cmd))
    return "\n".join(lines)


def run_training(recipe: Recipe, *, ray_port: int | None = None) -> TrainResult:
    check_train_inputs(recipe, ports=[ray_port] if ray_port else ())
    env = build_env(recipe)
    log_dir = run_paths.log_root(recipe)
    log_dir.mkdir(parents=True, exist_ok=True)
    run_paths.tensorboard_dir(recipe).mkdir(parents=True, exist_ok=True)
    log_file = log_dir / "train.log"
    start_step = run_paths.latest_step(recipe)
    if start_step is not None and recipe.checkpoint.resume == "auto":
        print(f"npu-rl: resuming {recipe.logging.experiment} from global_step_{start_step}", flush=True)

    env["VERL_FILE_LOGGER_PATH"] = str(run_paths.metrics_file(recipe, start_step or 0))
    cmd = command(recipe, python=sys.executable)
    t0 = time.monotonic()
    address = os.environ.get("RAY_ADDRESS")
    if address:
        # A multi-node cluster brought up by `npu-rl ray head`; just submit.
        code = _run(cmd, {**env, "RAY_ADDRESS": address}, log_file)
    else:
        res = recipe.resources
        npus = 0
        if res.platform != "cpu":
            npus, device_env = _select_npus(res.devices_per_node)
            env.update(device_env)
        # Ray's CPU count is logical: verl needs one slot per worker plus its TaskRunner.
        head = LocalRayHead(port=ray_port, num_cpus=max(res.world_size + 2, os.cpu_count() or 1), npus=npus,
                            env=env)
        with head:
            code = _run(cmd, {**env, "RAY_ADDRESS": head.address}, log_file)
    return TrainResult(code, time.monotonic() - t0, start_step, run_paths.latest_step(recipe), log_file)


def _select_npus(needed: int) -> tuple[int, dict[str, str]]:
    """This host's NPUs for the run (``NPU_DEVICES`` narrows the choice): count and visibility env."""
    from ..platform import devices

    found = devices.discover()
    selected = devices.select(found, needed, os.environ.get("NPU_DEVICES"))
    return len(selected), devices.visible_devices_env(selected, found)


def _run(cmd: list[str], env: dict[str, str], log_file: Path) -> int:
    """Run verl, streaming its output to the console and to ``log_file``."""
    full_env = {**os.environ, **env}
    with open(log_file, "a", encoding="utf-8") as log:
        log.write(f"\n$ {' '.join(shlex.quote(c) for c in cmd)}\n")
        proc = subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                bufsize=1)
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                sys.stdout.write(line)
                log.write(line)
        except KeyboardInterrupt:
            proc.terminate()
            raise
        return proc.wait()
