"""The CPU patches, exercised in a fresh interpreter as Ray's workers would see them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from npu_rl.patches import env_for

PROBE = r"""
import json, torch
import verl.utils.device as device
from verl.workers.rollout.base import _ROLLOUT_REGISTRY
import verl.trainer.ppo.ray_trainer as rt
import verl.workers.fsdp_workers as fw
out = {
    "nccl_backend": device.get_nccl_backend(),
    "rng_roundtrip": bool(torch.equal(device.get_torch_device().get_rng_state(), torch.get_rng_state())),
    "hf_rollout": _ROLLOUT_REGISTRY.get(("hf", "sync")),
    "fsdp_patched": fw.FSDP is not torch.distributed.fsdp.FullyShardedDataParallel,
}
import verl.single_controller.ray.base as base
asked = []
class PG:
    def __init__(self, bundles, **kw): asked.append(bundles)
    def ready(self): return None
base.placement_group = PG
base.ray.get = lambda refs: refs
pool = base.RayResourcePool(process_on_nodes=[2, 1], use_gpu=True, max_colocate_count=1)
pool.get_placement_groups(device_name="cpu")
out["bundles"] = asked
import torch.distributed as dist, tempfile
f = tempfile.mktemp()
dist.init_process_group(backend="cpu:gloo,cpu:gloo", init_method=f"file://{f}", rank=0, world_size=1)
from verl.utils.profiler.performance import topk_reduce_ratio_min_max
out["topk"] = list(topk_reduce_ratio_min_max(1.5))
dist.destroy_process_group()
import gc
full = []
gc.callbacks.append(lambda phase, info: full.append(1) if phase == "start" and info["generation"] == 2 else None)
fw.aggressive_empty_cache(force_sync=True)
out["full_collections_per_empty_cache"] = len(full)
print(json.dumps(out))
"""


def _probe(env_extra: dict[str, str]) -> dict:
    env = {**os.environ, **env_extra}
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cpu_patch_applies_in_child_processes_via_sitecustomize():
    out = _probe(env_for(["cpu"]))
    assert out["nccl_backend"] == "gloo"
    assert out["rng_roundtrip"] is True
    assert out["hf_rollout"] == "npu_rl.patches.cpu_rollout.CPURollout"
    assert out["fsdp_patched"] is True
    # one worker slot per CPU worker, as an NPU worker takes one NPU, STRICT_PACKed per node
    assert out["bundles"] == [[{"CPU": 1, "NPU": 1}] * 2, [{"CPU": 1, "NPU": 1}]]
    assert out["topk"] == [0.0, 1.5, 1.5]
    # What the workers call at three mode switches of every step: no full collection on a CPU (verl's own
    # makes one each time, torch.cpu being an "available" device)
    assert out["full_collections_per_empty_cache"] == 0


def test_without_the_patch_verl_is_untouched():
    env = {k: v for k, v in os.environ.items() if k not in ("NPU_RL_PATCHES",)}
    proc = subprocess.run(
        [sys.executable, "-c", "import verl.utils.device as d; print(d.get_nccl_backend())"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.stdout.strip() == "nccl"


def test_file_logger_writes_tensor_metrics(tmp_path):
    probe = (
        "import json, torch, numpy as np\n"
        "from verl.utils.tracking import FileLogger\n"
        "lg = FileLogger('p', 'e')\n"
        "lg.log({'global_seqlen/min': torch.tensor(3), 'a': np.float32(0.5), 'b': 1.0}, step=1)\n"
        "lg.finish()\n"
    )
    path = tmp_path / "m.jsonl"
    env = {**os.environ, **env_for(["file_logger"]), "VERL_FILE_LOGGER_PATH": str(path)}
    proc = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(path.read_text()) == {"step": 1, "data": {"global_seqlen/min": 3, "a": 0.5, "b": 1.0}}
