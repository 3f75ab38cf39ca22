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

On verl 0.9.0 the same boundary sits in ``TaskRunnerV1.run`` -> ``PPOTrainer.init`` -> ``PPOTrainer._setup``, after
the tokenizer, the datasets and the resource pool spec, at ``ResourcePoolManager.create_resource_pool`` (verl
v0.9.0 trainer/ppo/v1/trainer_base.py:229-234; the manager now lives in single_controller/ray/base.py:185-210).
verl 0.9 asks its platform for the Ray resource a worker reserves (base.py:139-148) and sets
``trainer.device`` from it (utils/device.py:150-165), so an Ascend recipe rehearsed where torch_npu cannot be
imported runs on a stand-in of verl's own Ascend platform (:func:`stand_in_npu_platform`): verl's class, with
no device behind it (``is_available`` false; its device module an error, never reached before the stop).

An SFT recipe's launch is torchrun's (npu_rl.launcher.sft), with no Ray: its device boundary is
``initialize_global_process_group`` (verl v0.9.0 utils/distributed.py:62-74: HCCL's process group, then
``set_device(local_rank)``), the first thing ``run_sft`` does. torchrun starts every rank of the launch; the ranks
past the first record that they started with the run's patches and leave before importing verl (each would build
what the first builds). The first records the world torchrun gave it and goes on with a one-rank gloo group in
place of HCCL's, through ``SFTTrainer.__init__``'s config dataclasses (model, tokenizer, engine, optimizer) and
datasets, to ``_build_engine``, where the FSDP engine would build its device mesh over the world and load the
model onto the devices. There it checks the batch layout the data loader would use over that world.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from . import installed, selected, verl_platforms
from .guard import (
    RAY_BASE,
    RAY_TRAINER,
    SFT_TRAINER,
    TRAINER_BASE,
    VERL_0_6_1,
    VERL_0_9_0,
    Patch,
    installed_verl_version,
)

PATCH_NAME = "rehearse"
REPORT_ENV = "NPU_RL_REHEARSE_REPORT"
# Set by an SFT rehearsal's launch only: torchrun's ranks past the first leave at once (never a GRPO run's
# Ray workers, which inherit the report's variable).
RANKS_LEAVE_ENV = "NPU_RL_REHEARSE_RANKS_LEAVE"
NODES_ENV = "NPU_RL_REHEARSE_NODES"
STOPPED_AT = (
    "ResourcePoolManager.create_resource_pool, the first step of RayPPOTrainer.init_workers: "
    "no placement group reserved, no worker started"
)
STOPPED_AT_SFT = (
    "TrainingWorker, the FSDP engine SFTTrainer._build_engine builds after the config, the tokenizer and the "
    "datasets: no process group on the devices, no device mesh, no model on a device"
)
STOPPED_AT_0_9 = (
    "ResourcePoolManager.create_resource_pool, in PPOTrainer._setup after the tokenizer and the datasets: "
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

NPU_PLATFORM = "verl.plugin.platform.platform_npu"
DISTRIBUTED = "verl.utils.distributed"
DEVICE = "verl.utils.device"
PERFORMANCE = "verl.utils.profiler.performance"
SFT_DATASET = "verl.utils.dataset.multiturn_sft_dataset"
ENGINE_WORKERS = "verl.workers.engine_workers"
# verl 0.9.0's: the trainer's construction and _setup's order up to the stop, the pool creation and the bundle
# scheme, TaskRunnerV1.run's order, and the Ascend platform the stand-in subclasses.
FINGERPRINTS_0_9_0 = {
    f"{TRAINER_BASE}:PPOTrainer.__init__": "372600c3d003d066",
    f"{TRAINER_BASE}:PPOTrainer._setup": "afd8c8397fb1d0c2",
    f"{RAY_BASE}:ResourcePoolManager.create_resource_pool": "538bcb1fb37aad97",
    f"{RAY_BASE}:RayResourcePool.get_placement_groups": "3257354262ab9d56",
    "verl.trainer.main_ppo:TaskRunnerV1.run": "ffed4efa9d5444f4",
    f"{NPU_PLATFORM}:PlatformNPU": "73e9d485583529ee",
    f"{NPU_PLATFORM}:_ensure_torch_npu": "cf9fff58648590d5",
    # The SFT trainer's: main handing its config to auto_set_device, the process group run_sft starts with,
    # __init__'s order (memory log, datasets, then the engine's TrainingWorker), and the data loader's batch
    # layout (global batch // data-parallel size, drop_last) the stop checks against the world.
    f"{DEVICE}:auto_set_device": "b6f0b6cd6c45a8eb",
    f"{DISTRIBUTED}:initialize_global_process_group": "7bf3dbdce7fdee4b",
    f"{PERFORMANCE}:_get_current_mem_info": "5cea16f29d0484f5",
    f"{ENGINE_WORKERS}:TrainingWorker.__init__": "e2873b04326e0586",
    f"{SFT_TRAINER}:main": "e2edb503d0d25671",
    f"{SFT_TRAINER}:run_sft": "1249f628320bdb05",
    f"{SFT_TRAINER}:SFTTrainer.__init__": "5566559d48c2ff76",
    f"{SFT_TRAINER}:SFTTrainer._build_dataset": "987a28bf7b3ee0e5",
    f"{SFT_TRAINER}:SFTTrainer._build_engine": "b61155d6dfccd7bc",
    f"{SFT_TRAINER}:SFTTrainer._build_dataloader": "624b2b4ac88197af",
}


def rank_file(report: Path, rank: str) -> Path:
    """Where a torchrun rank past the first records that it started (beside the report)."""
    return report.with_name(f"{report.stem}-rank{rank}.json")


def _other_ranks_leave() -> None:
    """A torchrun rank past the first, in an SFT rehearsal: record the world and the patches it started with,
    then leave before it imports verl."""
    rank, report = os.environ.get("RANK", "0"), os.environ.get(REPORT_ENV)
    if os.environ.get(RANKS_LEAVE_ENV) != "1" or os.environ.get("TORCHELASTIC_RUN_ID") is None or rank == "0":
        return
    if not report:  # the launch sets both; a rank that cannot say it started still leaves, and is named missing
        os._exit(0)
    seen = {
        "rank": int(rank),
        "local_rank": int(os.environ.get("LOCAL_RANK", "-1")),
        "world_size": int(os.environ.get("WORLD_SIZE", "0")),
        # This patch is installing now, after every other one selected.
        "patches": sorted({*installed(), PATCH_NAME}),
    }
    rank_file(Path(report), rank).write_text(json.dumps(seen), encoding="utf-8")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


PATCH = Patch(PATCH_NAME, {VERL_0_6_1: FINGERPRINTS, VERL_0_9_0: FINGERPRINTS_0_9_0}, on_install=_other_ranks_leave)

NO_DEVICE = (
    "npu-rl rehearse: verl asked the stand-in Ascend platform for torch.npu before the device boundary "
    "(torch_npu cannot be imported here)"
)

_seen: dict[str, Any] = {}


class RehearsalComplete(Exception):
    """Raised where verl would allocate devices; the report says what was checked."""


# Everything is checked when the trainer is patched: main_ppo runs as __main__ in the driver.
@PATCH.applies_to(RAY_TRAINER, also=(RAY_BASE, "verl.trainer.main_ppo"), releases=(VERL_0_6_1,))
def patch_ray_trainer(module: Any) -> None:
    _stop_at_pools(module.RayPPOTrainer, module.ResourcePoolManager)


@PATCH.applies_to(TRAINER_BASE, also=(RAY_BASE, "verl.trainer.main_ppo"), releases=(VERL_0_9_0,))
def patch_trainer_base(module: Any) -> None:
    _stop_at_pools(module.PPOTrainer, module.ResourcePoolManager)


@PATCH.applies_to(NPU_PLATFORM, releases=(VERL_0_9_0,))
def stand_in_npu_platform(module: Any) -> None:
    """Where torch_npu imports (an Atlas host, the line's image), verl's Ascend platform stays as it is."""
    if module._ensure_torch_npu():
        return

    class PlatformNPUStandIn(module.PlatformNPU):
        """verl's Ascend platform without torch_npu: its names (device npu, Ray resource NPU), no device."""

        def is_available(self) -> bool:
            return False

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return True

        @property
        def device_module(self) -> Any:
            raise RuntimeError(NO_DEVICE)

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            # Asked as verl.trainer.main_ppo is imported (constants_ppo.py:23); an NPU reports none either.
            return None, None

    module.PlatformRegistry.register(platform=verl_platforms.NPU)(PlatformNPUStandIn)


def _stop_at_pools(trainer_cls: Any, manager_cls: Any) -> None:
    original_init = trainer_cls.__init__
    # Whatever create_resource_pool is installed now (stock, or the cpu patch's) builds the pools.
    build_pools = manager_cls.create_resource_pool

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        _seen["trainer"] = self

    stopped_at = STOPPED_AT if installed_verl_version() == VERL_0_6_1 else STOPPED_AT_0_9

    def create_resource_pool(self):
        trainer = _seen.get("trainer")
        if trainer is None:  # verl constructs the trainer before init_workers builds its pools
            raise RuntimeError("npu-rl rehearse: resource pools built before RayPPOTrainer was constructed")
        checked = _constructed(trainer)
        device = _device_name(trainer)
        plan = _placement_plan(self, build_pools, device)
        checked.append(f"placement: {plan['summary']}")
        checked += _worker_configs(trainer.config)
        _write(
            {
                "complete": plan["error"] is None,
                "stopped_at": stopped_at,
                "checked": checked,
                "plan": plan,
                "error": plan["error"],
            }
        )
        raise RehearsalComplete(plan["error"] or stopped_at)

    trainer_cls.__init__ = __init__
    manager_cls.create_resource_pool = create_resource_pool


def _write(report: dict, where: str = "verl's TaskRunner (a Ray actor)") -> None:
    have, want = installed(), selected()
    report["patches_in_trainer_process"] = have
    missing = sorted(set(want) - set(have))
    if missing:
        report["complete"] = False
        report["error"] = f"patch(es) {', '.join(missing)} not active in {where}"
    else:
        report["checked"].append(f"patches active in {where}: {', '.join(have)}")
    target = os.environ.get(REPORT_ENV)
    if target:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    for line in report["checked"]:
        print(f"npu-rl rehearse: {line}", flush=True)


# verl's SFT entry runs as __main__ (`-m verl.trainer.sft_trainer`), out of reach of import hooks: the stop and
# what it checks sit in the modules it imports, and the config comes from the first function main hands it to.
@PATCH.wrap(DEVICE, "auto_set_device", releases=(VERL_0_9_0,))
def _keep_the_config(original):
    def auto_set_device(config):
        original(config)
        _seen["config"] = config

    return auto_set_device


@PATCH.wrap(DISTRIBUTED, "initialize_global_process_group", also=(SFT_TRAINER,), releases=(VERL_0_9_0,))
def _one_rank_for_the_devices(original):
    def initialize_global_process_group(timeout_second=36000):
        import torch.distributed as dist  # lazy: torch

        world = {k: int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
        _seen["world"] = world
        # SFTTrainer asks the group for its rank before the stop; nothing collective runs before it.
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        return world["LOCAL_RANK"], world["RANK"], world["WORLD_SIZE"]

    return initialize_global_process_group


@PATCH.wrap(PERFORMANCE, "_get_current_mem_info", releases=(VERL_0_9_0,))
def _no_device_memory(original):
    """SFTTrainer.__init__ opens by logging the device's memory (sft_trainer.py:57, after set_device)."""

    def _get_current_mem_info(unit: str = "GB", precision: int = 2):
        return ("n/a (rehearsal)",) * 4

    return _get_current_mem_info


@PATCH.wrap(SFT_DATASET, "MultiTurnSFTDataset.__init__", releases=(VERL_0_9_0,))
def _keep_the_datasets(original):
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _seen.setdefault("datasets", []).append(self)  # SFTTrainer._build_dataset: train, then validation

    return __init__


@PATCH.wrap(ENGINE_WORKERS, "TrainingWorker.__init__", also=(SFT_TRAINER,), releases=(VERL_0_9_0,))
def _stop_at_the_engine(original):
    def __init__(self, config):
        if "world" not in _seen:  # not the SFT trainer's (a GRPO rehearsal stops before any worker)
            return original(self, config)
        checked, error = _sft_checks(config)
        _write(
            {"complete": error is None, "stopped_at": STOPPED_AT_SFT, "checked": checked, "error": error},
            where="torchrun's rank 0",
        )
        raise RehearsalComplete(error or STOPPED_AT_SFT)

    return __init__


def sft_layout(rows: int, world: int, sp: int, batch: int, micro: int, dynamic: bool) -> tuple[str | None, dict]:
    """The batch layout verl's SFT data loader makes of ``world`` ranks (trainer/sft_trainer.py
    ``_build_dataloader``: each data-parallel group takes ``batch // dp`` rows of its ``rows // dp``, dropping
    the rest), and the first thing about it that cannot train (None: it can)."""
    dp = world // sp if sp > 0 else 0
    layout = {"world": world, "sp": sp, "dp": dp}
    if sp <= 0 or world % sp:
        return f"the world of {world} ranks is no multiple of ulysses_sequence_parallel_size {sp}", layout
    per_dp = batch // dp
    layout["per_dp"] = per_dp
    if batch % dp:
        return f"train_batch_size {batch} does not divide over {dp} data-parallel groups", layout
    if not dynamic and per_dp % micro:
        return f"{per_dp} rows per data-parallel group are no multiple of the micro-batch {micro}", layout
    layout["steps_per_epoch"] = (rows // dp) // per_dp
    if layout["steps_per_epoch"] == 0:
        return f"{rows} training rows make no batch of {batch} over {dp} data-parallel groups", layout
    return None, layout


def _sft_checks(worker_config: Any) -> tuple[list[str], str | None]:
    cfg, world = _seen["config"], _seen["world"]
    model, engine = worker_config.model_config, worker_config.engine_config
    datasets = _seen.get("datasets", [])
    if not datasets:
        return [], "verl built no MultiTurnSFTDataset before the engine (a custom dataset class?)"
    train = datasets[0]
    error, layout = sft_layout(
        len(train),
        world["WORLD_SIZE"],
        int(engine.ulysses_sequence_parallel_size),
        int(cfg.data.train_batch_size),
        int(cfg.data.micro_batch_size_per_gpu),
        bool(cfg.data.use_dynamic_bsz),
    )
    built = (model, engine, worker_config.optimizer_config, worker_config.checkpoint_config)
    checked = [
        f"hydra config composed by verl (engine {engine.strategy}, device {cfg.trainer.device})",
        _platform(),
        f"torchrun's world: {world['WORLD_SIZE']} ranks; this is rank {world['RANK']} (local {world['LOCAL_RANK']})",
        f"config dataclasses built: {', '.join(type(c).__name__ for c in built)}",
        f"tokenizer {type(model.tokenizer).__name__} and model config {type(model.hf_config).__name__} "
        f"({getattr(model.hf_config, 'num_hidden_layers', '?')} layers) read from {cfg.model.path}",
        f"datasets: {len(train)} train rows" + (f", {len(datasets[1])} validation rows" if len(datasets) > 1 else ""),
    ]
    if error is None:
        total = cfg.trainer.total_training_steps or layout["steps_per_epoch"] * int(cfg.trainer.total_epochs)
        checked.append(
            f"batch layout: {layout['dp']} data-parallel group(s) of {layout['sp']} rank(s) (sequence parallel), "
            f"{layout['per_dp']} rows each a step; {layout['steps_per_epoch']} steps an epoch, {total} in all"
        )
    return checked, error


def _device_name(trainer: Any) -> str:
    # verl 0.6.1's trainer keeps the device name; verl 0.9's config holds the one its platform set.
    return getattr(trainer, "device_name", None) or str(trainer.config.trainer.device)


def _reward(trainer: Any) -> str:
    cfg = trainer.config
    if installed_verl_version() == VERL_0_6_1:
        fn = cfg.custom_reward_function
        return f"reward manager {type(trainer.reward_fn).__name__} with {fn.path}:{fn.name}"
    # verl 0.9 builds the reward loop after the pools: the function and manager class it will load, loaded.
    reward: Any = importlib.import_module("verl.trainer.ppo.reward")  # verl 0.9's module (0.6.1's lacks these)

    fn = cfg.reward.custom_reward_function
    if reward.get_custom_reward_fn(cfg) is None:
        raise RuntimeError(f"npu-rl rehearse: verl found no reward function at {fn.path}:{fn.name}")
    return f"reward manager {reward.resolve_reward_manager_cls(cfg).__name__} with {fn.path}:{fn.name}"


def _platform() -> str:
    if installed_verl_version() == VERL_0_6_1:
        return "device from trainer.device (verl 0.6.1 has no platform layer)"
    from verl.plugin.platform import get_platform  # lazy: verl

    p = get_platform()
    return (
        f"verl platform {type(p).__name__} (device {p.device_name}, Ray resource {p.ray_resource_name()}, "
        f"device available: {p.is_available()})"
    )


def _constructed(trainer: Any) -> list[str]:
    cfg = trainer.config
    return [
        f"hydra config composed and validated by verl (strategy {cfg.actor_rollout_ref.actor.strategy}, "
        f"rollout {cfg.actor_rollout_ref.rollout.name}, device {_device_name(trainer)})",
        _platform(),
        f"tokenizer {type(trainer.tokenizer).__name__} loaded from {cfg.actor_rollout_ref.model.path}",
        _reward(trainer),
        f"datasets: {len(trainer.train_dataset)} train rows, {len(trainer.val_dataset)} validation rows",
        f"{type(trainer).__name__} constructed: {trainer.total_training_steps} training steps, roles "
        f"{', '.join(sorted(str(r) for r in trainer.role_worker_mapping))}",
    ]


def _placement_plan(manager: Any, build_pools, device: str) -> dict:
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
    real_sort = getattr(base, "sort_placement_group_by_node_ip", None)
    base.placement_group = _Recorded
    type(manager)._check_resource_available = lambda self: None
    if real_sort is not None:  # verl 0.9 sorts the groups by their nodes' addresses as it reserves them
        base.sort_placement_group_by_node_ip = lambda pgs: pgs
    try:
        build_pools(manager)
        for pool in manager.resource_pool_dict.values():
            # RayWorkerGroup's default bin_pack=True asks for STRICT_PACK (verl 0.6.1 _init_with_resource_pool).
            pool.get_placement_groups(strategy="STRICT_PACK", device_name=device)
    finally:
        base.placement_group, type(manager)._check_resource_available = real_pg, real_check
        if real_sort is not None:
            base.sort_placement_group_by_node_ip = real_sort
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
    for section in (arr.actor, arr.rollout, _ref_as_built(arr)):
        if section is not None and "_target_" in section:
            built.append(omega_conf_to_dataclass(section))
    model = built[0].hf_config
    return [f"worker config {type(b).__name__} built" for b in built] + [
        f"model config {type(model).__name__} ({getattr(model, 'num_hidden_layers', '?')} layers) read from "
        f"{arr.model.path}"
    ]


# verl 0.9's worker renames the ref's log-prob batch keys to the actor config's before building it
# (workers/engine_workers.py:538-547, ActorRolloutRefWorker.init_model).
_REF_RENAMED = {
    "log_prob_micro_batch_size": "ppo_micro_batch_size",
    "log_prob_micro_batch_size_per_gpu": "ppo_micro_batch_size_per_gpu",
    "log_prob_use_dynamic_bsz": "use_dynamic_bsz",
    "log_prob_max_token_len_per_gpu": "ppo_max_token_len_per_gpu",
}


def _ref_as_built(arr: Any) -> Any:
    """The ref section as the worker hands it to its dataclass: as it is on verl 0.6.1, renamed on 0.9."""
    if arr.ref is None or installed_verl_version() == VERL_0_6_1:
        return arr.ref
    from omegaconf import OmegaConf, open_dict  # lazy: omegaconf

    ref: Any = OmegaConf.create(OmegaConf.to_container(arr.ref))
    with open_dict(ref):
        ref.ppo_mini_batch_size = arr.actor.ppo_mini_batch_size
        for old, new in _REF_RENAMED.items():
            ref[new] = ref.pop(old, False if old == "log_prob_use_dynamic_bsz" else None)
    return ref
