"""Where this node sits in the job: rank, node count and head host, read from the
environment of whichever launcher started the pod or host.

Each launcher publishes the same facts under different names; one reader per launcher turns
them into a :class:`Placement`, in the order of ``READERS`` (the first whose marker is set wins):

* Volcano (``env`` + ``svc`` job plugins): ``VC_TASK_INDEX`` and, per task, ``VC_<TASK>_HOSTS`` /
  ``VC_<TASK>_NUM``. With a ``head`` task the head is its first host and a worker's rank is
  ``1 + VC_TASK_INDEX``; with a single task, index 0 is the head.
* KubeRay: ``KUBERAY_GEN_RAY_START_CMD`` (the ``ray start`` built from
  ``rayStartParams``), ``FQ_RAY_IP`` / ``RAY_IP`` for the head service.
* MindCluster Ascend Operator: ``MINDX_TASK_ID``, ``MASTER_ADDR``, ``RANK``,
  ``WORLD_SIZE`` / ``LOCAL_WORLD_SIZE`` (devices), optional ``REPLICA_TYPE``.
* Plain hosts: ``NODE_RANK``, ``MASTER_ADDR``, ``NNODES``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..errors import UserError

HEAD_TASK_ENV = "NPU_RL_HEAD_TASK"  # name of the Volcano task that runs the head (default "head")


@dataclass(frozen=True)
class Placement:
    launcher: str  # volcano | kuberay | mindcluster | env | none
    rank: int | None = None  # node rank, 0 = head; None when the launcher does not number nodes
    nnodes: int | None = None
    head_host: str | None = None
    devices_per_node: int | None = None
    is_head: bool | None = None
    ray_start_cmd: str | None = None  # KubeRay only: the operator's generated `ray start`

    def describe(self) -> str:
        parts = [self.launcher]
        if self.rank is not None:
            parts.append(f"rank {self.rank}" + (f"/{self.nnodes}" if self.nnodes else ""))
        elif self.nnodes:
            parts.append(f"{self.nnodes} nodes")
        return ", ".join(parts)


def _int(env: Mapping[str, str], name: str, minimum: int = 0) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise UserError(f"environment variable {name}={raw!r} is not an integer") from None
    if value < minimum:
        raise UserError(f"environment variable {name}={value} must be >= {minimum}")
    return value


_VC_HOSTS = re.compile(r"^VC_(.+)_HOSTS$")


def _volcano(env: Mapping[str, str], role: str | None) -> Placement | None:
    index = _int(env, "VC_TASK_INDEX")
    if index is None:
        index = _int(env, "VK_TASK_INDEX")
    if index is None:
        return None
    tasks = {m.group(1): [h for h in env[k].split(",") if h] for k in env if (m := _VC_HOSTS.match(k))}
    counts = [_int(env, f"VC_{t}_NUM", 1) or len(hosts) for t, hosts in tasks.items()]
    nnodes = sum(counts) or None
    head_task = env.get(HEAD_TASK_ENV, "head").upper().replace("-", "_")
    if head_task in tasks and tasks[head_task]:
        head_host = tasks[head_task][0]
        if role == "worker":
            return Placement("volcano", 1 + index, nnodes, head_host, is_head=False)
        if role == "head":
            return Placement("volcano", 0, nnodes, head_host, is_head=True)
        # Both tasks number their pods from 0, so the index alone cannot say which task this is.
        return Placement("volcano", None, nnodes, head_host)
    if len(tasks) == 1:
        hosts = next(iter(tasks.values()))
        return Placement("volcano", index, nnodes, hosts[0] if hosts else None, is_head=index == 0)
    return Placement("volcano", None, nnodes, None)


def _kuberay(env: Mapping[str, str], role: str | None) -> Placement | None:
    cmd = env.get("KUBERAY_GEN_RAY_START_CMD")
    if cmd is None:
        return None
    is_head = "--head" in cmd.split()
    head_host = None if is_head else (env.get("FQ_RAY_IP") or env.get("RAY_IP"))
    return Placement("kuberay", 0 if is_head else None, None, head_host, is_head=is_head, ray_start_cmd=cmd)


def _mindcluster(env: Mapping[str, str], role: str | None) -> Placement | None:
    if "MINDX_TASK_ID" not in env:
        return None
    rank = _int(env, "RANK")
    world = _int(env, "WORLD_SIZE", 1)
    local = _int(env, "LOCAL_WORLD_SIZE", 1)
    nnodes = world // local if world and local else None
    replica = env.get("REPLICA_TYPE", "").lower()
    is_head = replica == "master" if replica else (rank == 0 if rank is not None else None)
    return Placement("mindcluster", rank, nnodes, env.get("MASTER_ADDR") or None, local, is_head)


def _plain(env: Mapping[str, str], role: str | None) -> Placement | None:
    if not any(k in env for k in ("NODE_RANK", "MASTER_ADDR", "NNODES")):
        return None
    rank = _int(env, "NODE_RANK")
    return Placement(
        "env", rank, _int(env, "NNODES", 1), env.get("MASTER_ADDR") or None, is_head=None if rank is None else rank == 0
    )


READERS: list[tuple[str, Callable[[Mapping[str, str], str | None], Placement | None]]] = [
    ("volcano", _volcano),
    ("kuberay", _kuberay),
    ("mindcluster", _mindcluster),
    ("env", _plain),
]


def detect(env: Mapping[str, str], role: str | None = None) -> Placement:
    """The placement of this node; ``role`` ("head"/"worker") is what the command was asked to be."""
    for _name, reader in READERS:
        found = reader(env, role)
        if found is not None:
            return found
    return Placement("none")
