"""The Ascend images' Python set, installed here as the images install it, checks, imports and composes.

`make npu-stack` builds .venv-npu the way the images get their Python: the base image's layer as its
own Dockerfile makes it (torch, vLLM's requirements with vllm-ascend and torch_npu from
configs/locks/npu-base.txt, vLLM built from its sdist with VLLM_TARGET_DEVICE=empty:
npu_rl.envs.ascend_base, whose docstring says what that stand-in lacks), then
configs/locks/npu.txt (uv here, hash-checked, the files `pip install --no-deps --require-hashes` installs
in docker/Dockerfile), then npu-rl. The test runs the image build's strict `pip check`, imports what needs
no CANN, names what does, and builds vLLM 0.9.1's own ParallelConfig for DeepSeek ranks from what the
vllm_dp patch sets.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from pathlib import Path

import pytest
from needs import missing_setup

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv-npu"

pytestmark = pytest.mark.slow

# Without CANN, torch_npu's native library cannot load, and transformers, vLLM and verl import it
# whenever it is installed: the stand-in's .pth hides it (None in sys.modules: what a host without
# torch_npu sees) and leaves vllm-ascend's platform plugin out (VLLM_PLUGINS), which PROBE relies on,
# and BOUNDARY shows what fails without the hiding, and why (npu_rl.envs.ascend_base states this
# difference of the stand-in).
from npu_rl.envs.ascend_base import BOUNDARY_ENV  # noqa: E402

BOUNDARY = r"""
import importlib, json, sys
from importlib import metadata
out = {"plugins": sorted(f"{e.name}={e.value}" for e in metadata.entry_points(group="vllm.platform_plugins"))}
import vllm_ascend
out["register"] = vllm_ascend.register()
try:  # one module per process: a failed import leaves its package half-initialised
    importlib.import_module(sys.argv[1])
    out["import"] = "imported"
except Exception as err:  # ImportError, or an error raised while handling one: report the first
    while err.__cause__ or err.__context__:
        err = err.__cause__ or err.__context__
    out["import"] = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
print("RESULT " + json.dumps(out))
"""
# vLLM resolves its platform on import: the ascend plugin's NPUPlatform, which imports torch_npu.
NEEDS_CANN = ("torch_npu", "vllm", "vllm_ascend.patch.platform.patch_0_9_1.patch_configs", "verl.trainer.main_ppo")

PROBE = r"""
import importlib, importlib.metadata, json, os, sys
out = {"hidden": sys.modules.get("torch_npu", "absent") is None, "plugins": os.environ.get("VLLM_PLUGINS")}
import numpy, pyarrow, pyarrow.parquet as pq, datasets, transformers, ray, torch, verl
from npu_rl.envs import locks

out["versions"] = {m.__name__: m.__version__ for m in (numpy, pyarrow, datasets, transformers, ray, torch, verl)}
# numpy and pyarrow together: a table through parquet and back to numpy.
table = pyarrow.table({"x": numpy.arange(4)})
pq.write_table(table, sys.argv[1])
out["parquet_sum"] = int(pq.read_table(sys.argv[1]).column("x").to_numpy().sum())
# The modules the NPU image runs: the launcher, the patches, the reward, the platform checks.
mods = ["npu_rl.launcher.spec", "npu_rl.launcher.preflight", "npu_rl.patches.old_log_prob",
        "npu_rl.patches.reshard", "npu_rl.patches.vllm_dp", "npu_rl.reward.math", "npu_rl.platform.doctor",
        "npu_rl.reshard.planner", "verl.trainer.main_ppo", "verl.workers.fsdp_workers"]
out["imported"] = [m for m in mods if importlib.import_module(m)]
# verl's converter (the prepare job's) comes with the release the lock installs.
from npu_rl.launcher.megatron import verl_converter
out["converter"] = str(verl_converter()) if verl_converter().is_file() else None
# The A2 recipe's launch, composed with this verl's hydra configs (what `npu-rl train --dry-run` prints).
from npu_rl.launcher.spec import build_launch
from npu_rl.recipe import load_recipe
from npu_rl.launcher.verl_config import check_argv
spec = build_launch(load_recipe("qwen2_5_1_5b_math_a2_1card"))
cfg = check_argv(spec.argv)  # hydra composition + verl's own validate_config
out["argv_head"] = list(spec.argv[:3])
out["rollout"] = cfg.actor_rollout_ref.rollout.name
# vLLM as the base image has it (built with the empty target): its config and engine arguments.
import vllm
import vllm.config, vllm.engine.arg_utils  # noqa: E401
out["vllm"] = importlib.metadata.version("vllm")  # the wheel built here: 0.9.1+empty
# The DeepSeek recipe's rollout: each rank's VLLM_DP_* from the vllm_dp patch, and the ParallelConfig
# vLLM 0.9.1 builds from them (its engine argument left at 1: the offline SPMD fallback).
from npu_rl.patches import vllm_dp
rec = load_recipe("deepseek_r1_671b_a3")
ds = build_launch(rec)
world = rec.resources.world_size
tp, dp = rec.rollout.tensor_model_parallel_size, int(ds.env["VLLM_DP_SIZE"])
ips = [f"10.0.{r // 16}.{r % 16 + 1}" for r in range(world)]
out["engine_args_dp"] = vllm.engine.arg_utils.EngineArgs(model="x").data_parallel_size
ranks = {}
for rank in (0, 1, 2, 37, world - 1):
    env = vllm_dp.dp_env(rank, world, tp, dp, ips, 29500)
    os.environ.update(env)
    pc = vllm.config.ParallelConfig(tensor_parallel_size=tp, enable_expert_parallel=True)
    ranks[rank] = {"env": env, "size": pc.data_parallel_size, "rank": pc.data_parallel_rank,
                   "ip": pc.data_parallel_master_ip, "port": pc.data_parallel_master_port,
                   "ep": pc.enable_expert_parallel, "post_init": type(pc).__post_init__.__module__}
out["ranks"] = ranks
# After the engine exists, the patch compares vLLM's own DP group with what it computed.
import types
from vllm.distributed import parallel_state
parallel_state._DP = types.SimpleNamespace(rank_in_group=3)
vllm_dp._check_engine_groups({"VLLM_DP_RANK": "3"})
try:
    vllm_dp._check_engine_groups({"VLLM_DP_RANK": "4"})
    out["group_check"] = "passed a wrong rank"
except vllm_dp.PatchVersionError as err:
    out["group_check"] = str(err)
print("RESULT " + json.dumps(out))
"""


def test_npu_lock_installs_imports_and_composes(tmp_path):
    python = VENV / "bin" / "python"
    if not python.is_file():
        missing_setup("no .venv-npu", "run `make npu-stack`")
    # The image build's check: strict, but the one line the stand-in's PyPI torch explains (x86_64).
    check = subprocess.run(
        [str(python), "-m", "npu_rl.envs.ascend_base", "pip-check"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    raw = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True, timeout=600).stdout
    expected = 1 if platform.machine() == "x86_64" else 0
    assert len([x for x in raw.splitlines() if "has requirement" in x or "requires" in x]) == expected, raw
    # vllm-ascend's platform plugin is registered and names its NPU platform; torch_npu, and everything
    # that imports it (vLLM, vllm-ascend's platform and patches, verl), stop at CANN's libraries only.
    for mod in NEEDS_CANN:
        boundary = subprocess.run(
            [str(python), "-c", BOUNDARY, mod],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=REPO,
            env={**os.environ, BOUNDARY_ENV: "1"},
        )
        assert boundary.returncode == 0, boundary.stderr[-3000:]
        edge = json.loads(boundary.stdout.split("RESULT ", 1)[1])
        assert edge["plugins"] == ["ascend=vllm_ascend:register"]
        assert edge["register"] == "vllm_ascend.platform.NPUPlatform"
        assert "ImportError" in edge["import"] and re.search(r"lib\w+\.so", edge["import"]), (mod, edge["import"])
    run = subprocess.run(
        [str(python), "-c", PROBE, str(tmp_path / "t.parquet")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env={**{k: v for k, v in os.environ.items() if k != "VLLM_PLUGINS"}, "PYTHONPATH": str(REPO)},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.split("RESULT ", 1)[1])
    # The stand-in's own .pth did the hiding, before any import of the probe's.
    assert result["hidden"] is True and result["plugins"] == ""
    from npu_rl import versions

    assert result["versions"]["torch"].startswith(str(versions.get("ascend.torch")))
    assert result["versions"]["numpy"].startswith("1.")
    assert result["versions"]["pyarrow"] == str(versions.get("common.pyarrow"))
    assert result["versions"]["verl"] == str(versions.get("verl.version"))
    assert result["parquet_sum"] == 6
    assert result["converter"] and result["converter"].startswith(str(VENV))
    assert result["argv_head"] == [str(VENV / "bin" / "python"), "-m", "verl.trainer.main_ppo"]
    assert result["rollout"] == "vllm"
    # vLLM built from its sdist with the empty target.
    assert result["vllm"] == f"{versions.get('ascend.vllm')}+empty"
    # vllm_dp against vLLM 0.9.1 itself: DP 64 from the environment, each rank's DP rank and master.
    assert result["engine_args_dp"] == 1
    recipe = __import__("npu_rl.recipe", fromlist=["load_recipe"]).load_recipe("deepseek_r1_671b_a3")
    for got in result["ranks"].values():
        assert got["size"] == recipe.rollout.data_parallel_size == 64, got
        assert str(got["rank"]) == got["env"]["VLLM_DP_RANK"], got
        assert got["ip"] == got["env"]["VLLM_DP_MASTER_IP"] and str(got["port"]) == got["env"]["VLLM_DP_MASTER_PORT"]
        assert got["ep"] is True and got["post_init"] == "vllm.config", got
    # vLLM's rank layout (block, DP, PP=1, TP) with TP 2 and DP 64 over 256 ranks: TP pairs share a DP rank.
    assert {int(r): got["rank"] for r, got in result["ranks"].items()} == {0: 0, 1: 0, 2: 1, 37: 18, 255: 63}
    assert result["ranks"]["37"]["ip"] == "10.0.0.2"  # its group's DP rank 0 is rank 1 (same TP index)
    assert "DP rank 3" in result["group_check"] and "computed 4" in result["group_check"]
