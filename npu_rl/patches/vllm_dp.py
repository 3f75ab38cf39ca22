"""Rollout expert and data parallelism for verl 0.6.1's synchronous vLLM rollout (vllm-ascend 0.9.1).

Upstream, cann-recipes-train replaces verl's ``vLLMRollout.__init__``
(``llm_rl/deepseek/verl_patches/workers/vllm_rollout/vllm_rollout_spmd.py``) so that every TP=2 vLLM engine
is one data-parallel rank of a MoE engine whose experts are spread over TP x DP ranks:
``enable_expert_parallel=True``, ``VLLM_DP_SIZE`` from the environment with per-rank ``VLLM_DP_RANK`` /
master address / port (``verl_patches/workers/vllm_rollout/vllm_parallel_state.py``), and a torchair graph /
Ascend scheduler ``additional_config``. Here verl's constructor stays: ``enable_expert_parallel`` and
``additional_config`` are engine arguments that verl 0.6.1's ``vLLMRollout.__init__`` passes to
``LLM(**engine_kwargs)`` unchanged, so the launcher emits them (:func:`npu_rl.launcher.megatron.megatron_overrides`)
and this patch only turns OmegaConf nodes in them into plain containers (vLLM hashes and copies its config).
The launcher sets ``VLLM_DP_SIZE`` for every worker; right before verl builds the engine this patch sets the
per-rank variables vLLM reads (:func:`dp_env`), and verl's own rollout DP / EP stay 1 (:func:`check_rollout_config`).
Installed when a recipe sets ``rollout.expert_parallel`` (``NPU_RL_PATCHES=vllm_dp``); imports no verl, torch or vLLM.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .guard import MEGATRON_WORKERS, VERL_0_6_1, VLLM_ROLLOUT, Patch, PatchVersionError

PATCH_NAME = "vllm_dp"

DP_SIZE_ENV = "VLLM_DP_SIZE"
# Each DP group's stateless process group takes ports from its master port upwards
# (vLLM ParallelConfig.get_next_dp_init_port); groups whose leaders share a node get
# ports this far apart.
PORT_STRIDE = 16

# Source fingerprints (npu_rl.patches.guard) of the verl 0.6.1 code this patch relies on:
# vLLMRollout.__init__ builds LLM(...) with engine_kwargs.vllm passed through and no DP/EP
# of its own; the megatron worker's rollout mesh is (world / (TP * rollout DP), TP * rollout DP).
FINGERPRINTS = {
    f"{VLLM_ROLLOUT}:vLLMRollout.__init__": "464155956de163dc",
    f"{MEGATRON_WORKERS}:ActorRolloutRefWorker._build_rollout": "4871a4201f173df2",
}
# The megatron worker's fingerprint is checked when that module is imported (guard.Patch.install).
PATCH = Patch(PATCH_NAME, {VERL_0_6_1: FINGERPRINTS})


# --- layout --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DPCoords:
    dp_rank: int  # VLLM_DP_RANK
    group: int  # which DP group (one per TP index and block of TP*DP ranks)
    leader: int  # global rank of the group's DP rank 0 (its address is the group's master)


def dp_coords(rank: int, world: int, tp: int, dp: int) -> DPCoords:
    """Where ``rank`` sits in vLLM's DP groups: vLLM lays ranks out as (block, DP, PP=1, TP)
    (vLLM 0.9.1 ``vllm/distributed/parallel_state.py`` ``initialize_model_parallel``)."""
    block = tp * dp
    if tp < 1 or dp < 1 or world % block:
        raise PatchVersionError(f"rollout TP {tp} x vLLM DP {dp} does not divide the {world} ranks")
    if not 0 <= rank < world:
        raise PatchVersionError(f"rank {rank} outside the {world} ranks")
    b, t = divmod(rank, block)
    return DPCoords(dp_rank=t // tp, group=(rank // block) * tp + rank % tp, leader=b * block + rank % tp)


def dp_env(rank: int, world: int, tp: int, dp: int, ips: list[str], base_port: int) -> dict[str, str]:
    """The ``VLLM_DP_*`` variables vLLM 0.9.1's ``ParallelConfig`` reads for one rank.

    The DP size is no engine argument: a ``data_parallel_size`` above 1 there makes vLLM treat the engine as
    its own DP launcher (it picks a fresh master port, ``vllm/config.py`` 1885-1887 at v0.9.1). With the
    default of 1, vLLM's ``ParallelConfig.__post_init__`` falls back to the environment, the offline SPMD
    case: ``VLLM_DP_SIZE``, ``VLLM_DP_RANK``, ``VLLM_DP_RANK_LOCAL``, ``VLLM_DP_MASTER_IP`` and
    ``VLLM_DP_MASTER_PORT`` (``vllm/config.py`` 1888-1894 at v0.9.1). vllm-ascend 0.9.1 replaces that
    ``__post_init__`` only when ``VLLM_ASCEND_EXTERNAL_DP_LB_ENABLED`` is set
    (``vllm_ascend/patch/platform/patch_0_9_1/patch_configs.py`` 76-77, ``vllm_ascend/envs.py`` 169-171),
    which npu-rl never sets, so vLLM's fallback is the mechanism that applies.
    ``tests/envs/test_npu_stack.py`` checks these against vLLM 0.9.1's own ``ParallelConfig``."""
    c = dp_coords(rank, world, tp, dp)
    return {
        DP_SIZE_ENV: str(dp),
        "VLLM_DP_RANK": str(c.dp_rank),
        "VLLM_DP_MASTER_IP": ips[c.leader],
        "VLLM_DP_MASTER_PORT": str(base_port + 1 + c.group * PORT_STRIDE),
    }


def requested_dp(environ=os.environ) -> int:
    text = environ.get(DP_SIZE_ENV, "1") or "1"
    try:
        dp = int(text)
    except ValueError:
        raise PatchVersionError(f"{DP_SIZE_ENV}={text!r} is not an integer") from None
    if dp < 1:
        raise PatchVersionError(f"{DP_SIZE_ENV}={dp} must be >= 1")
    return dp


def expert_parallel_size(rollout_config: Any, environ=os.environ) -> int:
    """The rollout's EP size: TP x vLLM DP when the engine runs expert parallel, else verl's own key."""
    vllm_kwargs = (_get(rollout_config, "engine_kwargs") or {}).get("vllm", {}) or {}
    tp = int(_get(rollout_config, "tensor_model_parallel_size") or 1)
    if vllm_kwargs.get("enable_expert_parallel"):
        return tp * requested_dp(environ)
    return int(_get(rollout_config, "expert_parallel_size") or 1)


def _get(obj: Any, key: str) -> Any:
    if isinstance(obj, dict) or hasattr(obj, "keys") and hasattr(obj, "get"):
        return obj.get(key)
    return getattr(obj, key, None)


def check_rollout_config(config: Any, world: int, dp: int) -> None:
    """Refuse a rollout config with which vLLM DP would not do what upstream's run does.

    verl must keep its own ``rollout.data_parallel_size`` / ``expert_parallel_size`` at 1: its megatron worker
    builds the rollout mesh with ``infer_tp = TP * data_parallel_size`` (verl 0.6.1 ``megatron_workers.py``
    ``_build_rollout``), so a verl-side DP of 128 makes one 256-rank "TP group" that receives the whole batch
    on every rank. With 1, the batch is split over world/TP dispatch ranks, each TP pair generates its share,
    and vLLM's DP group (the MoE all-to-all domain) spans them, which is what upstream runs."""
    vllm_kwargs = (_get(config, "engine_kwargs") or {}).get("vllm", {}) or {}
    tp = int(_get(config, "tensor_model_parallel_size") or 1)
    problems = []
    if not vllm_kwargs.get("enable_expert_parallel"):
        problems.append("engine_kwargs.vllm.enable_expert_parallel is not True (vLLM offline DP is for MoE EP)")
    for key in ("data_parallel_size", "expert_parallel_size"):
        if int(_get(config, key) or 1) != 1:
            problems.append(f"rollout.{key}={_get(config, key)} (verl's mesh would give every rank the whole batch)")
    if world % (tp * dp):
        problems.append(f"TP {tp} x {DP_SIZE_ENV} {dp} does not divide the {world} ranks")
    if problems:
        raise PatchVersionError(f"npu_rl patch {PATCH_NAME!r}: {DP_SIZE_ENV}={dp} but " + "; ".join(problems))


# --- rollout -------------------------------------------------------------------------------------


def node_ip() -> str:
    """This process's address as the other ranks reach it (the HCCL interface `npu-rl ray` chose)."""
    ip = os.environ.get("HCCL_IF_IP")
    if ip:
        return ip
    import ray  # lazy: ray

    return ray.util.get_node_ip_address()


def gather_ips() -> list[str]:
    import torch.distributed as dist  # lazy: torch

    ips: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(ips, node_ip())
    return [str(ip) for ip in ips]


def prepare_dp_env(config: Any, environ=os.environ) -> dict[str, str]:
    """Set this rank's ``VLLM_DP_*`` variables (a collective: every rank builds its rollout at once)."""
    import torch.distributed as dist  # lazy: torch

    dp = requested_dp(environ)
    if dp == 1:
        return {}
    world, rank = dist.get_world_size(), dist.get_rank()
    check_rollout_config(config, world, dp)
    tp = int(_get(config, "tensor_model_parallel_size") or 1)
    base = int(environ.get("MASTER_PORT", "29500"))
    env = dp_env(rank, world, tp, dp, gather_ips(), base)
    environ.update(env)
    return env


def _plain_engine_kwargs(config: Any) -> None:
    """OmegaConf nodes in ``engine_kwargs.vllm`` -> plain dicts and lists, as vLLM expects."""
    kwargs = _get(config, "engine_kwargs")
    if not kwargs or "vllm" not in kwargs or kwargs["vllm"] is None:
        return
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf  # lazy: omegaconf
    except ImportError:  # pragma: no cover - verl depends on omegaconf
        return
    vllm_kwargs = kwargs["vllm"]
    if isinstance(vllm_kwargs, (DictConfig, ListConfig)):
        vllm_kwargs = OmegaConf.to_container(vllm_kwargs, resolve=True)
    plain = {
        k: OmegaConf.to_container(v, resolve=True) if isinstance(v, (DictConfig, ListConfig)) else v
        for k, v in dict(vllm_kwargs).items()
    }
    try:
        kwargs["vllm"] = plain
    except Exception:  # a read-only node: leave verl's view as it is
        pass


def _check_engine_groups(env: dict[str, str]) -> None:
    """After the engine exists: vLLM's own DP group must place this rank where dp_env did."""
    if not env:
        return
    try:
        from vllm.distributed import parallel_state as vllm_ps  # lazy: vllm
    except ImportError:
        return
    group = getattr(vllm_ps, "_DP", None)
    if group is not None and str(group.rank_in_group) != env["VLLM_DP_RANK"]:
        raise PatchVersionError(
            f"npu_rl patch {PATCH_NAME!r}: vLLM put this rank at DP rank {group.rank_in_group}, "
            f"the patch computed {env['VLLM_DP_RANK']}; vLLM's rank layout changed, port the patch"
        )


@PATCH.wrap(VLLM_ROLLOUT, "vLLMRollout.__init__")
def patch_vllm_rollout(original):
    def __init__(self, config, model_config, device_mesh, *args, **kwargs):
        _plain_engine_kwargs(config)
        env = prepare_dp_env(config)
        original(self, config, model_config, device_mesh, *args, **kwargs)
        _check_engine_groups(env)

    return __init__
