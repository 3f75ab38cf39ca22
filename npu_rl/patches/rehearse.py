"""Rehearsal of a launch: verl's real ``main_ppo`` up to the point where devices would be allocated.

Installed only by ``npu-rl train --rehearse``. The run goes through verl's own entry point with the launch's exact
argv: hydra composition, ``run_ppo``'s ``ray.init`` with the launch's runtime_env (a local Ray, no accelerator), the
TaskRunner actor (which must receive the patches through that runtime_env), ``validate_config``, tokenizer, reward
manager and dataset loading, and the ``RayPPOTrainer`` construction, up to ``RayPPOTrainer.init_workers``'s first
step, ``ResourcePoolManager.create_resource_pool``, where verl would reserve placement groups on the accelerators.

There, instead, it records the placement groups verl would ask Ray for (verl's ``RayResourcePool.get_placement_groups``
with Ray's ``placement_group`` replaced by a recorder), packs them, with the strategy verl's worker groups use, onto
the nodes the launch's cluster registers (``NPU_RL_REHEARSE_NODES``: what ``npu-rl ray head|worker`` give
``ray start``), and builds the worker config dataclasses the workers build first (``omega_conf_to_dataclass`` of
actor, rollout, ref and ``HFModelConfig``). The findings go to ``NPU_RL_REHEARSE_REPORT`` (JSON) and
:class:`RehearsalComplete` ends the TaskRunner; the launcher reads the report, not the exit code.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
from pathlib import Path
from typing import Any

from . import installed, selected
from .guard import RAY_BASE, RAY_TRAINER, VERL_0_6_1, Patch

PATCH_NAME = "rehearse"
REPORT_ENV = "NPU_RL_REHEARSE_REPORT"
NODES_ENV = "NPU_RL_REHEARSE_NODES"
STOPPED_AT = (
    "ResourcePoolManager.create_resource_pool, the first step of RayPPOTrainer.init_workers: "
    "no placement group reserved, no worker started"
)

# What the rehearsal wraps, replaces or relies on: the trainer's construction, the pool creation it
# stops at, the bundle scheme it records, and TaskRunner.run's order (everything before the stop runs).
FINGERPRINTS = {
    f"{RAY_TRAINER}:RayPPOTrainer.__init__": "0ee98f3e214ccfa6",
    f"{RAY_TRAINER}:ResourcePoolManager.create_resource_pool": "27130303dd094e08",
    f"{RAY_BASE}:RayResourcePool.get_placement_groups": "82e7609b32721544",
    "verl.trainer.main_ppo:TaskRunner.run": "01fba572c691f5cf",
}

PATCH = Patch(PATCH_NAME, {VERL_0_6_1: FINGERPRINTS})

_seen: dict[str, Any] = {}


class RehearsalComplete(Exception):
    """Raised where verl would allocate devices; the report says what was checked."""


# Everything is checked when the trainer is patched: main_ppo runs as __main__ in the driver.
@PATCH.applies_to(RAY_TRAINER, also=(RAY_BASE, "verl.trainer.main_ppo"))
def patch_ray_trainer(module: Any) -> None:
    trainer_cls, manager_cls = module.RayPPOTrainer, module.ResourcePoolManager
    original_init = trainer_cls.__init__
    # Whatever create_resource_pool is installed now (stock, or the cpu patch's) builds the pools.
    build_pools = manager_cls.create_resource_pool

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        _seen["trainer"] = self

    def create_resource_pool(self):
        trainer = _seen.get("trainer")
        if trainer is None:  # verl constructs the trainer before init_workers builds its pools
            raise RuntimeError("npu-rl rehearse: resource pools built before RayPPOTrainer was constructed")
        checked = _constructed(trainer)
        plan = _placement_plan(self, build_pools, trainer)
        checked.append(f"placement: {plan['summary']}")
        checked += _worker_configs(trainer.config)
        _write(
            {
                "complete": plan["error"] is None,
                "stopped_at": STOPPED_AT,
                "checked": checked,
                "plan": plan,
                "error": plan["error"],
            }
        )
        raise RehearsalComplete(plan["error"] or STOPPED_AT)

    trainer_cls.__init__ = __init__
    manager_cls.create_resource_pool = create_resource_pool


def _write(report: dict) -> None:
    have, want = installed(), selected()
    report["patches_in_trainer_process"] = have
    missing = sorted(set(want) - set(have))
    if missing:
        report["complete"] = False
        report["error"] = f"patch(es) {', '.join(missing)} not active in verl's TaskRunner process"
    else:
        report["checked"].append(f"patches active in verl's TaskRunner (a Ray actor): {', '.join(have)}")
    target = os.environ.get(REPORT_ENV)
    if target:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    for line in report["checked"]:
        print(f"npu-rl rehearse: {line}", flush=True)


def _constructed(trainer: Any) -> list[str]:
    cfg = trainer.config
    return [
        f"hydra config composed and validated by verl (strategy {cfg.actor_rollout_ref.actor.strategy}, "
        f"rollout {cfg.actor_rollout_ref.rollout.name}, device {trainer.device_name})",
        f"tokenizer {type(trainer.tokenizer).__name__} loaded from {cfg.actor_rollout_ref.model.path}",
        f"reward manager {type(trainer.reward_fn).__name__} with {cfg.custom_reward_function.path}:"
        f"{cfg.custom_reward_function.name}",
        f"datasets: {len(trainer.train_dataset)} train rows, {len(trainer.val_dataset)} validation rows",
        f"RayPPOTrainer constructed: {trainer.total_training_steps} training steps, roles "
        f"{', '.join(sorted(str(r) for r in trainer.role_worker_mapping))}",
    ]


def _placement_plan(manager: Any, build_pools, trainer: Any) -> dict:
    """The placement groups verl would reserve, packed onto the launch's nodes."""
    import ray  # lazy: ray

    base: Any = importlib.import_module(RAY_BASE)  # verl's module; placement_group is swapped below
    requested: list[dict] = []

    class _Recorded:
        def __init__(self, bundles, strategy, **_):
            requested.append({"bundles": [dict(b) for b in bundles], "strategy": strategy})
            self.bundle_count = len(bundles)

        def ready(self):
            return ray.put(True)

    real_pg, real_check = base.placement_group, type(manager)._check_resource_available
    base.placement_group = _Recorded
    type(manager)._check_resource_available = lambda self: None
    try:
        build_pools(manager)
        for pool in manager.resource_pool_dict.values():
            # RayWorkerGroup's default bin_pack=True asks for STRICT_PACK (verl 0.6.1 _init_with_resource_pool).
            pool.get_placement_groups(strategy="STRICT_PACK", device_name=trainer.device_name)
    finally:
        base.placement_group, type(manager)._check_resource_available = real_pg, real_check
    nodes = json.loads(os.environ.get(NODES_ENV, "[]"))
    return {"requested": requested, "nodes": nodes, **pack(requested, nodes)}


def pack(requested: list[dict], nodes: list[dict]) -> dict:
    """First-fit of each STRICT_PACK group onto one node; CPU is not counted (nodes report their own)."""
    free = [{k: float(v) for k, v in n.items()} for n in nodes]
    placed: list[int] = []
    for i, pg in enumerate(requested):
        need: dict[str, float] = {}
        for b in pg["bundles"]:
            for k, v in b.items():
                if k != "CPU":
                    need[k] = need.get(k, 0.0) + float(v)
        node = next((j for j, f in enumerate(free) if all(f.get(k, 0.0) >= v for k, v in need.items())), None)
        if node is None:
            want = ", ".join(f"{k}:{v:g}" for k, v in need.items()) or "CPU only"
            have = sorted({json.dumps(n, sort_keys=True) for n in nodes})
            return {
                "error": f"placement group {i} ({len(pg['bundles'])} bundles, {want}) fits on no node of the "
                f"cluster ({len(nodes)} nodes registering {', '.join(have) or 'nothing'})",
                "summary": "does not fit",
                "placed": placed,
            }
        for k, v in need.items():
            free[node][k] -= v
        placed.append(node)
    bundles = sorted({json.dumps(b, sort_keys=True) for pg in requested for b in pg["bundles"]})
    summary = (
        f"{len(requested)} placement group(s) of {[len(pg['bundles']) for pg in requested]} bundles "
        f"{', '.join(bundles)} fit on {len(set(placed))} of {len(nodes)} nodes"
    )
    return {"error": None, "summary": summary, "placed": placed}


def _worker_configs(cfg: Any) -> list[str]:
    """The config dataclasses verl's ActorRolloutRefWorker builds before touching a device."""
    from verl.utils.config import omega_conf_to_dataclass  # lazy: verl
    from verl.workers.config import HFModelConfig  # lazy: verl

    arr = cfg.actor_rollout_ref
    built = [omega_conf_to_dataclass(arr.model, dataclass_type=HFModelConfig)]
    for section in (arr.actor, arr.rollout, arr.ref):
        if section is not None and "_target_" in section:
            built.append(omega_conf_to_dataclass(section))
    model = built[0].hf_config
    return [f"worker config {type(b).__name__} built" for b in built] + [
        f"model config {type(model).__name__} ({getattr(model, 'num_hidden_layers', '?')} layers) read from "
        f"{arr.model.path}"
    ]
