"""The Ascend images' Python set, installed here as the Dockerfile installs it, imports and composes.

`make npu-stack` builds .venv-npu the way docker/Dockerfile builds its Python layer: the base
image's torch and torchvision (PyPI's builds of the pinned versions stand in for the base
image's), then `pip install --no-deps --require-hashes -r configs/locks/npu.txt`, then npu-rl.
What exists only on Ascend is not there: CANN, torch_npu's native library, vllm-ascend's
kernels, vLLM built for the NPU and MindSpeed's NPU ops. The test stops at that boundary:
everything up to the first import of one of those runs.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv-npu"

pytestmark = pytest.mark.slow

PROBE = r"""
import importlib, json, sys
import numpy, pyarrow, pyarrow.parquet as pq, datasets, transformers, ray, torch, verl
from npu_rl.envs import locks

out = {"versions": {m.__name__: m.__version__ for m in (numpy, pyarrow, datasets, transformers, ray, torch, verl)}}
# numpy and pyarrow together: a table through parquet and back to numpy.
table = pyarrow.table({"x": numpy.arange(4)})
pq.write_table(table, sys.argv[1])
out["parquet_sum"] = int(pq.read_table(sys.argv[1]).column("x").to_numpy().sum())
# The modules the NPU image runs: the launcher, the patches, the reward, the platform checks.
mods = ["npu_rl.launcher.spec", "npu_rl.launcher.preflight", "npu_rl.patches.old_log_prob",
        "npu_rl.patches.reshard", "npu_rl.patches.vllm_dp", "npu_rl.reward.math", "npu_rl.platform.doctor",
        "npu_rl.reshard.planner", "verl.trainer.main_ppo", "verl.workers.fsdp_workers"]
out["imported"] = [m for m in mods if importlib.import_module(m)]
# The A2 recipe's launch, composed with this verl's hydra configs (what `npu-rl train --dry-run` prints).
from npu_rl.launcher.spec import build_launch
from npu_rl.recipe import load_recipe
from npu_rl.launcher.verl_config import check_argv
spec = build_launch(load_recipe("qwen2_5_1_5b_math_a2_1card"))
cfg = check_argv(spec.argv)  # hydra composition + verl's own validate_config
out["argv_head"] = list(spec.argv[:3])
out["rollout"] = cfg.actor_rollout_ref.rollout.name
# The boundary: torch_npu is the base image's and needs CANN.
try:
    import torch_npu  # noqa: F401
    out["torch_npu"] = "imported"
except ImportError as err:
    out["torch_npu"] = f"absent ({type(err).__name__})"
print("RESULT " + json.dumps(out))
"""


def test_npu_lock_installs_imports_and_composes(tmp_path):
    python = VENV / "bin" / "python"
    if not python.is_file():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI must build .venv-npu (make npu-stack)")
        pytest.skip("no .venv-npu: run `make npu-stack`")
    check = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run([str(python), "-c", PROBE, str(tmp_path / "t.parquet")], capture_output=True, text=True,
                         timeout=600, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.split("RESULT ", 1)[1])
    from npu_rl import versions

    assert result["versions"]["torch"].startswith(str(versions.get("ascend.torch")))
    assert result["versions"]["numpy"].startswith("1.")
    assert result["versions"]["pyarrow"] == str(versions.get("common.pyarrow"))
    assert result["versions"]["verl"] == str(versions.get("verl.version"))
    assert result["parquet_sum"] == 6
    assert result["argv_head"] == [str(VENV / "bin" / "python"), "-m", "verl.trainer.main_ppo"]
    assert result["rollout"] == "vllm"
    assert result["torch_npu"].startswith("absent")
