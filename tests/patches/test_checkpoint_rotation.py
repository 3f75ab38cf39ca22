"""A stop during a checkpoint save keeps ``max_actor_ckpt_to_keep`` complete checkpoints.

Each probe runs verl's own save code in a fresh interpreter, with and without the patch: the
workers' checkpoint manager (its save dies after the rotation, where a SIGTERM or a lost node would
stop it) and the trainer's ``_save_checkpoint`` with a worker group that writes the step's shards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from npu_rl.patches import env_for

# One interpreter runs verl's own save code three times: (1) the workers' checkpoint manager with steps 1
# and 2 complete, saving step 3 with max_ckpt_to_keep 2 and dying after its rotation, in the collective
# that follows it (no process group here, as none is left after a stop); (2) verl's
# RayPPOTrainer._save_checkpoint on a trainer whose worker group writes step 3's shards; (3) the same
# with a worker group that is lost during the save.
PROBE = r"""
import json, pathlib, sys, types
from omegaconf import OmegaConf
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
base, out = pathlib.Path(sys.argv[1]), {}

def steps(root):
    return sorted(int(p.name.split("_")[-1]) for p in root.glob("global_step_*"))

root, paths = base / "manager", []
for step in (1, 2):
    (root / f"global_step_{step}" / "actor").mkdir(parents=True)
    (root / f"global_step_{step}" / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"x")
    paths.append(str(root / f"global_step_{step}" / "actor"))
manager = object.__new__(FSDPCheckpointManager)
manager.rank, manager.previous_saved_paths = 0, paths
died = None
try:
    manager.save_checkpoint(str(root / "global_step_3" / "actor"), None, 3, max_ckpt_to_keep=2)
except Exception as err:
    died = type(err).__name__
out["manager"] = {"died": died, "complete": sorted(p.parent.parent.name for p in root.glob("global_step_*/actor/*.pt"))}

for case in ("saved", "lost"):
    root, seen = base / case, []
    def save_checkpoint(local, remote, step, max_ckpt_to_keep=None):
        seen.append(max_ckpt_to_keep)
        if case == "lost":
            raise RuntimeError("worker lost during the save")
        pathlib.Path(local).mkdir(parents=True)
        (pathlib.Path(local) / "model_world_size_1_rank_0.pt").write_bytes(b"x")
    for step in (1, 2, 5):  # 5: a damaged save of an earlier segment, newer than this step
        (root / f"global_step_{step}" / "actor").mkdir(parents=True)
    trainer = types.SimpleNamespace(
        config=OmegaConf.create({"trainer": {"default_local_dir": str(root), "default_hdfs_dir": None,
                                             "max_actor_ckpt_to_keep": 2}}),
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
    proc = subprocess.run([sys.executable, "-c", PROBE, str(base)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_stop_during_a_save_keeps_the_complete_checkpoints_and_rotation_follows_completion(tmp_path):
    stock, patched = _probe(tmp_path, False), _probe(tmp_path, True)

    # The workers' manager: verl deletes step 1 before it writes step 3, so a save that dies leaves one
    # complete checkpoint; patched, both stay.
    assert stock["manager"]["died"] and stock["manager"]["complete"] == ["global_step_2"]
    assert patched["manager"] == {"died": stock["manager"]["died"], "complete": ["global_step_1", "global_step_2"]}

    # The trainer: once step 3 is complete (the marker names it) step 1 goes, whole; the newer damaged 5
    # is left to the next resume. verl still passes the limit to the workers, who now save without it.
    assert patched["saved"] == {"died": None, "steps": [2, 3, 5], "marker": "3", "passed_keep": [2]}
    # A save lost midway removes nothing and names no new step.
    assert patched["lost"] == {"died": "worker lost during the save", "steps": [1, 2, 5], "marker": None,
                               "passed_keep": [2]}
    # Stock verl's trainer removes nothing itself: it left the rotation to the workers' managers.
    assert stock["saved"]["steps"] == [1, 2, 3, 5] and stock["saved"]["marker"] == "3"
