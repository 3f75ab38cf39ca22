"""The recipes rehearsed on the cann9.1-verl0.9 stack line: `npu-rl train --rehearse` of that line's CPU
environment (`make venv STACK=cann9.1-verl0.9`) runs verl 0.9.0's own main_ppo with each launch's exact argv,
through TaskRunnerV1 and PPOTrainer._setup (tokenizer, datasets, resource pool spec) up to
ResourcePoolManager.create_resource_pool, where verl would reserve devices.

verl 0.9 takes its device from its platform layer: the Ascend recipes run on the rehearse patch's stand-in of
verl's own Ascend platform (no torch_npu here), named by the launch (VERL_PLATFORM=huawei), so verl asks for
NPU bundles and keeps trainer.device npu; left to detect, verl would fall back to nvidia and move the recipe
to cuda, whose GPU bundles no npu-rl node offers. (A launch whose patches lack the line's release stops in its
preflight: tests/test_stack_lines.py.)

The stand-ins are the rehearsal tests' own: a tiny Qwen2 and the bundled sample data; the parallel sizes,
world size and every other setting are the recipe's.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from needs import missing_setup

from npu_rl.cli import main
from npu_rl.launcher.spec import build_launch
from npu_rl.paths import project_root, recipes_dir
from npu_rl.recipe import load_recipe

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

LINE = "cann9.1-verl0.9"
RECIPES = sorted(p.stem for p in recipes_dir().glob("*.yaml") if load_recipe(p.stem).sft is None)
# The SFT stages, rehearsed through torchrun and verl's SFT trainer; the tiny one trains whole through the same
# launch (tests/e2e/test_agent_run.py).
SFT_RECIPES = sorted(
    p.stem for p in recipes_dir().glob("*.yaml") if load_recipe(p.stem).sft is not None and "tiny" not in p.stem
)
# The sample's 256 rows twice: the 235B recipe's batch of 512 prompts (its preflight checks the file holds one).
STANDINS = {"model.path": "models/tiny-qwen2", "data.train_files": "[data/sample/train-512.parquet]"}
STANDINS["data.val_files"] = "[data/sample/test.parquet]"
# The SFT stages' data: the agent demo's multi-turn transcripts, with the code tool in each row.
SFT_STANDINS = {
    "model.path": STANDINS["model.path"],
    "data.train_files": "[data/arithmetic/sft.parquet]",
    "data.val_files": "[data/arithmetic/sft_val.parquet]",
}


def _sets(name: str) -> dict[str, str]:
    if name in SFT_RECIPES:
        return {"stack": LINE, **SFT_STANDINS}
    return {"stack": LINE, **STANDINS, **({"rollout.name": "vllm"} if name == "tiny_math_cpu" else {})}


def _launch(name: str, ws: Path):
    """The recipe and its rehearsal's launch, as `npu-rl train --rehearse` in the workspace builds them."""
    os.environ["NPU_RL_WORKSPACE"] = str(ws)
    try:
        recipe = load_recipe(name, {k: yaml.safe_load(v) for k, v in _sets(name).items()})
        return recipe, build_launch(recipe, rehearse=True)
    finally:
        os.environ.pop("NPU_RL_WORKSPACE")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tiny_model):
    exe = project_root() / f".venv-{LINE}" / "bin" / "npu-rl"
    if not exe.is_file():
        missing_setup(f"the {LINE} CPU environment", f"make venv STACK={LINE}")
    ws = tmp_path_factory.mktemp("rehearse-line")
    os.environ["NPU_RL_WORKSPACE"] = str(ws)
    try:
        tiny_model(ws / "models/tiny-qwen2", steps=1)
        assert main(["data", "math", "--from", "sample", "--out", str(ws / "data/sample")]) == 0
        assert main(["data", "arithmetic", "--out", str(ws / "data/arithmetic")]) == 0
    finally:
        os.environ.pop("NPU_RL_WORKSPACE")
    train = pq.read_table(ws / "data/sample/train.parquet")
    pq.write_table(pa.concat_tables([train, train]), ws / "data/sample/train-512.parquet")
    return ws, exe


def _rehearse(ws: Path, exe: Path, name: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NPU_RL_WORKSPACE": str(ws)}
    env.pop("RAY_ADDRESS", None)
    args = [a for k, v in _sets(name).items() for a in ("--set", f"{k}={v}")]
    return subprocess.run(
        [str(exe), "train", "--recipe", name, "--rehearse", *args],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


# Rehearsed on the seeds' line and composed on this one (tests/test_stack_lines.py), not rehearsed here (each
# rehearsal through verl 0.9 takes about two minutes here): the 4-card Qwen2.5 recipe differs from the 1-card
# one only in its world size, which Qwen3-32B's 2 x 16 cards exceed; the tiny recipe trains on this line
# through the same launch (tests/cluster/test_multinode_line.py).
# The seeds' 1-card recipe on this line is the line's own qwen2_5_1_5b_math_a2_1card_verl09, which rehearses
# in the line's image through its compose file (tests/containers/test_line_images.py). DeepSeek-R1 is the
# seeds' A3 recipe: on this line the Qwen3-235B recipe takes the same path (megatron with expert parallel,
# the reshard, the old_log_prob skip as bypass mode, 64 cards), and the reshard's verl 0.9.0 sync runs on
# both architectures (tests/reshard/test_patch_verl09.py).
LIKE_ANOTHER = {
    "deepseek_r1_671b_a3",
    "qwen2_5_1_5b_math_a2_1card",
    "qwen2_5_1_5b_math_a2_1card_verl09",
    "qwen2_5_1_5b_math_a2_4card",
    "tiny_math_cpu",
    # Trains through the same launch, tool calls and all (tests/e2e/test_agent_run.py).
    "tiny_agent_cpu",
}


@pytest.mark.parametrize("name", [n for n in RECIPES if n not in LIKE_ANOTHER])
def test_recipe_rehearses_through_verl_0_9_to_the_device_boundary(name, workspace):
    ws, exe = workspace
    out = _rehearse(ws, exe, name)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"rehearsal of {name} passed" in out.stdout and "Traceback" not in out.stderr

    recipe, spec = _launch(name, ws)
    report = json.loads(spec.rehearsal_report.read_text())
    assert report["complete"] and report["stopped_at"].startswith("ResourcePoolManager.create_resource_pool")
    # The launch's argv ran, with the line environment's Python (this process's builds it with its own).
    ran = shlex.split((spec.log_dir / "rehearsal.log").read_text().splitlines()[0].removeprefix("$ "))
    assert ran[1:] == list(spec.argv[1:])
    assert Path(ran[0]).parent == exe.parent
    assert set(spec.patches) <= set(report["patches_in_trainer_process"])
    checked = report["checked"]
    if recipe.resources.platform == "cpu":
        assert "verl platform PlatformCPU (device cpu, Ray resource NPU, device available: True)" in checked
    else:
        # verl's Ascend platform, standing in where torch_npu is absent: the recipe keeps its device.
        assert "verl platform PlatformNPUStandIn (device npu, Ray resource NPU, device available: False)" in checked
        assert "device npu)" in checked[0], checked[0]
    # The reward verl 0.9 will load, from where it reads it (reward.custom_reward_function).
    own = f"{recipe.reward.function.replace('.', '/')}.py:{recipe.reward.name}"  # math, agent or code_tests
    assert any(c.startswith("reward manager ") and c.endswith(own) for c in checked), checked
    # verl's placement groups: one bundle per device of the recipe's world, one group per node, all fit.
    res = recipe.resources
    groups = report["plan"]["requested"]
    assert [len(g["bundles"]) for g in groups] == [res.devices_per_node] * res.nnodes
    assert all(b["NPU"] == 1 for g in groups for b in g["bundles"])
    assert sorted(report["plan"]["placed"]) == list(range(res.nnodes))
    actor = "McoreActorConfig" if recipe.actor.strategy == "megatron" else "FSDPActorConfig"
    assert f"worker config {actor} built" in checked


@pytest.mark.parametrize("name", SFT_RECIPES)
def test_sft_recipe_rehearses_through_torchrun_to_the_device_boundary(name, workspace):
    """The SFT launch's own torchrun argv: every rank starts with the run's patches (those past the first leave
    before importing verl), rank 0 builds verl's SFT trainer up to the FSDP engine on one gloo rank in place of
    HCCL's group, and the batch layout over the recipe's world is the one verl's data loader would make."""
    ws, exe = workspace
    out = _rehearse(ws, exe, name)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"rehearsal of {name} passed" in out.stdout and "Traceback" not in out.stderr

    recipe, spec = _launch(name, ws)
    assert recipe.sft is not None
    report = json.loads(spec.rehearsal_report.read_text())
    assert report["complete"] and report["stopped_at"].startswith("TrainingWorker"), report
    ran = shlex.split((spec.log_dir / "rehearsal.log").read_text().splitlines()[0].removeprefix("$ "))
    assert ran[1:] == list(spec.argv[1:]) and "torch.distributed.run" in ran
    assert Path(ran[0]).parent == exe.parent
    checked = report["checked"]
    world, sp = recipe.resources.devices_per_node, recipe.sft.ulysses_sequence_parallel_size
    assert f"torchrun's world: {world} ranks; this is rank 0 (local 0)" in checked
    assert f"ranks 1-{world - 1} started by torchrun with the world of {world} and the patches" in checked
    assert "verl platform PlatformNPUStandIn (device npu, Ray resource NPU, device available: False)" in checked
    assert "device npu)" in checked[0], checked[0]
    layout = next(c for c in checked if c.startswith("batch layout: "))
    dp = world // sp
    per_dp = recipe.algorithm.train_batch_size // dp
    groups = f"{dp} data-parallel group(s) of {sp} rank(s) (sequence parallel), {per_dp} rows"
    assert layout.startswith(f"batch layout: {groups}"), layout
    assert set(spec.patches) == set(report["patches_in_trainer_process"])
