"""A stop during a checkpoint save keeps ``max_actor_ckpt_to_keep`` complete checkpoints.

The probe runs verl's own save code in a fresh interpreter, with and without the patch: the workers'
checkpoint managers, FSDP and Megatron (their save dies after the rotation, where a SIGTERM or a lost
node would stop it), and the trainer's ``_save_checkpoint`` with a worker group standing in for the
workers, which writes the step's shards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from npu_rl.patches import env_for

# One interpreter runs verl's own save code: (1) each workers' checkpoint manager (FSDP, Megatron), with
# steps 1 and 2 complete, saving step 3 with max_ckpt_to_keep 2 as verl's workers call it (keywords) and
# dying after its rotation (the FSDP one in the collective that follows it, no process group being left
# after a stop); (2) verl's RayPPOTrainer._save_checkpoint on a trainer whose worker group writes step 3's
# shards, with steps 1 and 2 complete and a damaged 5 of an earlier segment; (3) the same with a worker
# group lost during the save; (4) a damaged 2 older than the step saved (no data.pt: its save died),
# which must neither count toward the limit nor stay; (5) verl's deprecated remove_previous_ckpt_in_save.
PROBE = r"""
import json, pathlib, sys, types
from omegaconf import OmegaConf
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
from verl.utils.checkpoint.megatron_checkpoint_manager import MegatronCheckpointManager
base, out = pathlib.Path(sys.argv[1]), {}

def steps(root):
    return sorted(int(p.name.split("_")[-1]) for p in root.glob("global_step_*"))

for name, cls in (("fsdp", FSDPCheckpointManager), ("megatron", MegatronCheckpointManager)):
    root, paths = base / name, []
    for step in (1, 2):
        (root / f"global_step_{step}" / "actor").mkdir(parents=True)
        (root / f"global_step_{step}" / "actor" / "shard.pt").write_bytes(b"x")
        paths.append(str(root / f"global_step_{step}" / "actor"))
    manager = object.__new__(cls)
    manager.rank, manager.previous_saved_paths = 0, paths
    died = None
    try:
        manager.save_checkpoint(local_path=str(root / "global_step_3" / "actor"), hdfs_path=None, global_step=3,
                                max_ckpt_to_keep=2)
    except Exception as err:
        died = type(err).__name__
    out[name] = {"died": died, "complete": sorted(p.parent.parent.name for p in root.glob("global_step_*/actor/*.pt"))}

cases = {"saved": ((1, 2), (5,), {"max_actor_ckpt_to_keep": 2}),
         "lost": ((1, 2), (5,), {"max_actor_ckpt_to_keep": 2}),
         "damaged": ((1,), (2,), {"max_actor_ckpt_to_keep": 2}),
         "deprecated": ((1, 2), (), {"remove_previous_ckpt_in_save": True})}
for case, (complete, damaged, limit) in cases.items():
    root, seen = base / case, []
    def save_checkpoint(local, remote, step, max_ckpt_to_keep=None):
        seen.append(max_ckpt_to_keep)
        if case == "lost":
            raise RuntimeError("worker lost during the save")
        pathlib.Path(local).mkdir(parents=True)
        (pathlib.Path(local) / "model_world_size_1_rank_0.pt").write_bytes(b"x")
    for step in complete + damaged:
        (root / f"global_step_{step}" / "actor").mkdir(parents=True)
    for step in complete:
        (root / f"global_step_{step}" / "data.pt").write_bytes(b"x")
    trainer = types.SimpleNamespace(
        config=OmegaConf.create({"trainer": {"default_local_dir": str(root), "default_hdfs_dir": None, **limit}}),
        global_steps=3, use_critic=False, actor_rollout_wg=types.SimpleNamespace(save_checkpoint=save_checkpoint),
        train_dataloader=types.SimpleNamespace(state_dict=lambda: {"epoch": 0}))
    died = None
    try:
        RayPPOTrainer._save_checkpoint(trainer)
    except RuntimeError as err:
        died = str(err)
    marker = root / "latest_checkpointed_iteration.txt"
    out[case] = {"died": died, "steps": steps(root), "marker": marker.read_text() if marker.exists() else None,
                 "passed_keep": seen}
print(json.dumps(out))
"""


def _probe(tmp_path, patched: bool) -> dict:
    env = {**os.environ, **(env_for(["checkpoint_rotation"]) if patched else {})}
    if not patched:
        env.pop("NPU_RL_PATCHES", None)
    base = tmp_path / ("patched" if patched else "stock")
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(base)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_stop_during_a_save_keeps_the_complete_checkpoints_and_rotation_follows_completion(tmp_path):
    stock, patched = _probe(tmp_path, False), _probe(tmp_path, True)

    # The workers' managers: verl deletes step 1 before it writes step 3, so a save that dies leaves one
    # complete checkpoint; patched, both stay.
    for manager in ("fsdp", "megatron"):
        assert stock[manager]["died"] and stock[manager]["complete"] == ["global_step_2"], manager
        assert patched[manager] == {"died": stock[manager]["died"], "complete": ["global_step_1", "global_step_2"]}

    # The trainer: once step 3 is complete (the marker names it) step 1 goes, whole; the newer damaged 5
    # is left to the next resume. verl still passes the limit to the workers, who now save without it.
    assert patched["saved"] == {"died": None, "steps": [2, 3, 5], "marker": "3", "passed_keep": [2]}
    # A save lost midway removes nothing and names no new step; stock verl's trainer neither.
    assert patched["lost"] == {
        "died": "worker lost during the save",
        "steps": [1, 2, 5],
        "marker": None,
        "passed_keep": [2],
    }
    assert stock["lost"] == patched["lost"]
    # A damaged older step does not count toward the limit: the complete 1 stays, the damaged 2 goes.
    assert patched["damaged"]["steps"] == [1, 3]
    # verl's deprecated flag means a limit of 1.
    assert patched["deprecated"] == {"died": None, "steps": [3], "marker": "3", "passed_keep": [1]}
    # Stock verl's trainer removes nothing itself: it left the rotation to the workers' managers.
    assert stock["saved"]["steps"] == [1, 2, 3, 5] and stock["saved"]["marker"] == "3"
