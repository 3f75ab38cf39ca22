"""Every Ray worker of a run says which npu_rl patches it installed, before training starts.

A patch that silently fails to reach a worker (a raylet started without the run's
environment, a worker image without npu_rl) leaves verl's stock code running
there, and nothing in the metrics says so. Right after ``RayPPOTrainer.init_workers``
has created the worker groups, the trainer's process (verl's TaskRunner) asks every
worker actor for :func:`npu_rl.patches.installed` and :func:`npu_rl.patches.applied` (the
patch functions that really changed verl's code there) through Ray's ``__ray_call__``,
writes the answers to ``NPU_RL_ATTEST_FILE`` (JSON) and stops the run, before
``fit``, when a worker lacks a patch that ``NPU_RL_PATCHES`` selected or a selected patch
changed nothing in the trainer or any worker. The launcher
prints that file's verdict as one ``npu-rl: error:`` line.

On verl 0.9 the trainer has no ``init_workers``: the hook follows ``PPOTrainer.init`` (verl v0.9.0
trainer/ppo/v1/trainer_base.py:217-227), which has made the worker groups, the reward-loop workers
(:332, ``get_reward_handles`` :383) and the rollout servers (``llm_server_manager``, :351; each replica's
``servers``, workers/rollout/replica.py:127): all of them are asked. The agent-loop workers come later
(main_ppo.py:152), and a vLLM server's engine runs in a process of its own that Ray does not know.

Importing this module does not import verl, torch or ray.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

from . import applied, installed, selected
from .guard import RAY_TRAINER, TRAINER_BASE, VERL_0_6_1, VERL_0_9_0, Patch

PATCH_NAME = "attest"
ATTEST_ENV = "NPU_RL_ATTEST_FILE"
# The worker groups init_workers leaves on the trainer (verl 0.6.1); several may share actors.
WORKER_GROUPS = ("actor_rollout_wg", "ref_policy_wg", "critic_wg", "rm_wg")
FINGERPRINTS = {f"{RAY_TRAINER}:RayPPOTrainer.init_workers": "cdf7fb40ec91ce88"}
FINGERPRINTS_0_9_0 = {
    f"{TRAINER_BASE}:PPOTrainer.init": "6ef187cb2ec8df0b",
    f"{TRAINER_BASE}:PPOTrainer._setup": "afd8c8397fb1d0c2",
}
PATCH = Patch(PATCH_NAME, {VERL_0_6_1: FINGERPRINTS, VERL_0_9_0: FINGERPRINTS_0_9_0})


class PatchNotActive(RuntimeError):
    """A Ray worker of the run lacks a patch the recipe selected."""


def _attest_after(original):
    def init(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        verdict = attest(self)
        target = os.environ.get(ATTEST_ENV)
        if target:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            Path(target).write_text(json.dumps(verdict, indent=1), encoding="utf-8")
        if verdict["error"]:
            raise PatchNotActive(verdict["error"])
        return result

    return init


patch_ray_trainer, patch_trainer_base = PATCH.wrap_each(
    _attest_after,
    patch_ray_trainer=(RAY_TRAINER, "RayPPOTrainer.init_workers", VERL_0_6_1),
    patch_trainer_base=(TRAINER_BASE, "PPOTrainer.init", VERL_0_9_0),
)


def actor_handles(trainer: Any) -> list[Any]:
    """Every actor of the run the trainer holds: its worker groups', and on verl 0.9 its reward-loop
    workers and rollout servers."""
    handles: list[Any] = []
    for attr in WORKER_GROUPS:
        handles += getattr(getattr(trainer, attr, None), "workers", None) or []
    reward_loop = getattr(trainer, "reward_loop_manager", None)
    handles += getattr(reward_loop, "reward_loop_worker_handles", None) or []
    servers = getattr(trainer, "llm_server_manager", None)
    for replica in servers.get_replicas() if servers is not None else []:
        handles += getattr(replica, "servers", None) or []
    return handles


def report(_actor: object = None) -> dict:
    """What this process installed; runs inside each worker actor (``__ray_call__`` passes the actor)."""
    node_ip = node_id = None
    try:
        import ray  # lazy: ray

        # The address the raylet was started with (--node-ip-address), which names the node in Ray.
        node_ip = ray._private.worker.global_worker.node_ip_address
        node_id = ray.get_runtime_context().get_node_id()
    except Exception:  # not inside a connected Ray process
        pass
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "node_ip": node_ip,
        "node_id": node_id,
        "patches": installed(),
        "applied": applied(),
        "selected": os.environ.get("NPU_RL_PATCHES", ""),
    }


def attest(trainer: Any) -> dict:
    """Ask every distinct worker actor of ``trainer`` for its patches; name what is missing."""
    import ray  # lazy: ray

    want = [n for n in selected() if n != "rehearse"]
    handles: dict[str, Any] = {}
    for handle in actor_handles(trainer):
        handles.setdefault(handle._actor_id.hex(), handle)
    workers = ray.get([h.__ray_call__.remote(report) for h in handles.values()])
    me = report()
    lacking = [w for w in workers if set(want) - set(w["patches"])]
    # By now the trainer has imported verl's trainer and the workers their model code: a selected patch
    # that changed nothing in any of them is a hook on a module verl no longer uses.
    idle = [n for n in want if not any(n in r["applied"] for r in (me, *workers))]
    error = None
    if not workers:
        error = "no Ray worker of the run could be asked for its patches"
    elif lacking:
        w = lacking[0]
        missing = ", ".join(sorted(set(want) - set(w["patches"])))
        error = (
            f"patch(es) {missing} not active in {len(lacking)} of {len(workers)} Ray workers "
            f"(e.g. pid {w['pid']} on {w['node_ip'] or w['host']}); the run was stopped before training"
        )
    elif idle:
        error = (
            f"patch(es) {', '.join(idle)} installed but applied to none of verl's code in the trainer and "
            f"{len(workers)} Ray workers; the run was stopped before training"
        )
    return {
        "expected": want,
        "trainer": me,
        "workers": workers,
        "nodes": sorted({w["node_id"] or w["host"] for w in workers}),
        "error": error,
    }
