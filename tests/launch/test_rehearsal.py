"""Every shipped recipe rehearsed through verl's real main_ppo, with its exact argv, up to the device boundary.

The stand-ins are small (a tiny Qwen2 and a tiny DeepSeek-V3-architecture config with the real
layer and expert counts, the bundled sample data); parallel sizes, world size and every other
setting are the recipe's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from recipe_names import HERE

from npu_rl.cli import main
from npu_rl.launcher.spec import build_launch
from npu_rl.paths import recipes_dir
from npu_rl.recipe import load_recipe

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# Rehearsed elsewhere on this line through the same `npu-rl train --rehearse`, not here (each rehearsal takes
# 40-90 s of CI's two cores): the 1-card Qwen2.5 recipe in the A2 image through compose's rehearse-qwen, and
# DeepSeek-R1 in the A3 image (tests/containers/test_ascend_images.py, both checking the rehearsal's report);
# the 4-card Qwen2.5 recipe differs from the 1-card one only in its world size, whose placement on several
# devices Qwen3-32B's 2 x 16 cards take here; Qwen3-235B takes DeepSeek's path (megatron with expert parallel,
# the reshard, many nodes) and rehearses on the cann9.1-verl0.9 line (test_rehearsal_on_lines.py); the tiny
# recipe trains through the same launch (the smoke run, tests/smoke). Qwen3-32B (megatron TP8/PP2/CP2, the
# only dense megatron recipe, with context parallel) rehearses here.
LIKE_ANOTHER = {
    "deepseek_r1_671b_a3",
    "qwen2_5_1_5b_math_a2_1card",
    "qwen2_5_1_5b_math_a2_4card",
    "qwen3_235b_a22b_grpo_a3",
    "tiny_math_cpu",
}
RECIPES = [name for name in HERE if name not in LIKE_ANOTHER]  # rehearsed with .venv's verl


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tiny_model):
    ws = tmp_path_factory.mktemp("rehearse")
    old = os.environ.get("NPU_RL_WORKSPACE")
    os.environ["NPU_RL_WORKSPACE"] = str(ws)
    try:
        tiny_model(ws / "models/tiny-qwen2", steps=1)
        assert main(["data", "math", "--from", "sample", "--out", str(ws / "data/sample")]) == 0
    finally:
        os.environ.pop("NPU_RL_WORKSPACE") if old is None else os.environ.__setitem__("NPU_RL_WORKSPACE", old)
    train = pq.read_table(ws / "data/sample/train.parquet")
    pq.write_table(pa.concat_tables([train, train]), ws / "data/sample/train-512.parquet")  # Qwen3-32B's batch of 512
    return ws


def _standin_sets(name: str) -> list[str]:
    return [
        "--set",
        "model.path=models/tiny-qwen2",
        "--set",
        "data.train_files=[data/sample/train-512.parquet]",
        "--set",
        "data.val_files=[data/sample/test.parquet]",
    ]


def _rehearse(ws: Path, recipe: str, sets: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "NPU_RL_WORKSPACE": str(ws)}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [sys.executable, "-m", "npu_rl", "train", "--recipe", recipe, "--rehearse", *sets],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )


def test_the_recipes_left_out_here_are_shipped_recipes_of_this_line():
    assert LIKE_ANOTHER < set(HERE) and RECIPES


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_rehearses_through_verl_to_the_device_boundary(name, workspace):
    out = _rehearse(workspace, name, _standin_sets(name))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"rehearsal of {name} passed" in out.stdout

    os.environ["NPU_RL_WORKSPACE"] = str(workspace)
    try:
        sets = dict(s.split("=", 1) for s in _standin_sets(name)[1::2])
        recipe = load_recipe(name, {k: yaml.safe_load(v) for k, v in sets.items()})
        spec = build_launch(recipe, rehearse=True)
    finally:
        os.environ.pop("NPU_RL_WORKSPACE")
    report = json.loads(spec.rehearsal_report.read_text())
    assert report["complete"] and report["stopped_at"].startswith("ResourcePoolManager.create_resource_pool")
    # The exact argv ran: the log's first line is the spec's command.
    log = (spec.log_dir / "rehearsal.log").read_text()
    assert log.splitlines()[0] == "$ " + __import__("shlex").join(spec.argv)
    # The patches reached verl's TaskRunner, a Ray actor, through the launch's runtime_env.
    assert set(spec.patches) <= set(report["patches_in_trainer_process"])
    # verl's placement groups: one bundle per device of the recipe's world, one group per node, all fit.
    res = recipe.resources
    groups = report["plan"]["requested"]
    assert [len(g["bundles"]) for g in groups] == [res.devices_per_node] * res.nnodes
    assert all(b == {"CPU": 1, "NPU": 1} for g in groups for b in g["bundles"])
    assert sorted(report["plan"]["placed"]) == list(range(res.nnodes))
    actor = "McoreActorConfig" if recipe.actor.strategy == "megatron" else "FSDPActorConfig"
    assert f"worker config {actor} built" in report["checked"]
    assert any(c.startswith("datasets: ") for c in report["checked"])


def test_a_placement_no_node_offers_stops_the_rehearsal(workspace, tmp_path):
    # trainer.device=cuda makes verl ask for GPU bundles, which npu-rl's nodes never register.
    data = yaml.safe_load((recipes_dir() / "qwen2_5_1_5b_math_a2_1card.yaml").read_text())
    data["verl_overrides"] = {"trainer.device": "cuda"}
    path = tmp_path / "cuda.yaml"
    path.write_text(yaml.safe_dump(data))
    out = _rehearse(workspace, str(path), _standin_sets("qwen"))
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    # One error line; Ray's shutdown may still log after it on a loaded machine (CI once failed here).
    (error,) = [line for line in out.stderr.splitlines() if line.startswith("npu-rl: error:")] or [out.stderr[-2000:]]
    assert error.startswith("npu-rl: error: rehearsal of") and "fits on no node" in error and "GPU" in error, error
