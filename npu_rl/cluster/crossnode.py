"""Cross-node preflight: every node runs the same stack, agrees on the variables that must agree,
and sees the same checkpoint directory.

``npu-rl train`` runs it once all nodes joined, before verl starts: one Ray task per node, pinned
there, with no ``runtime_env`` of its own, so it sees what that node's raylet gave it, which is
what verl's workers inherit under the run's runtime_env.

- Versions: npu-rl, verl, torch, torch_npu, transformers, CANN's toolkit, the NPU driver (Ray checks its own).
- Variables: every ``HCCL_*`` (the timeouts among them), the socket interface variables and
  every ``NPU_RL_*``, unset on one node included; not those the run's runtime_env sets on
  every worker (they cannot differ), nor those naming the node itself (:data:`PER_NODE`).
- The checkpoint directory: each node writes a sentinel there and must see every other
  node's, so a node-local directory (hostPath, a disk per node) is refused now, not at the
  first resume, when the head cannot read the workers' shards.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from ..errors import UserError
from ..exit_codes import Exit
from ..platform import cann
from .network import IFNAME_VARS

PACKAGES = ("npu-rl", "verl", "torch", "torch_npu", "transformers")
AGREE_PREFIXES = ("HCCL_", "NPU_RL_")
AGREE_NAMES = IFNAME_VARS
# Different on every node by design: the node's own address, its raylet's ports and socket paths.
PER_NODE = frozenset({"HCCL_IF_IP", "NPU_RL_RAY_ARGS"})
# Set on every node, each naming that node's own NIC (`npu-rl ray` exports the one routing to the head;
# hosts of one cluster may call it enp189s0f0 and enp61s0f0): only whether they are set must agree.
SET_OR_NOT = frozenset({*IFNAME_VARS, "NPU_RL_IFNAME"})
SENTINELS = ".npu-rl-nodes"


@dataclass(frozen=True)
class NodeFacts:
    node_ip: str
    node_id: str
    versions: dict[str, str | None]
    env: dict[str, str]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def local_facts(node_ip: str, node_id: str, exclude: frozenset[str] = frozenset()) -> NodeFacts:
    versions = {p: _version(p) for p in PACKAGES}
    root = cann.ascend_root()
    versions["CANN"] = cann.toolkit_version(root)
    versions["driver"] = cann.driver_version(root)
    env = {
        k: "(set)" if k in SET_OR_NOT else v
        for k, v in os.environ.items()
        if (k.startswith(AGREE_PREFIXES) or k in AGREE_NAMES) and k not in PER_NODE and k not in exclude
    }
    return NodeFacts(node_ip, node_id, versions, env)


def mismatches(facts: list[NodeFacts]) -> list[str]:
    """One phrase per fact on which the nodes differ, naming each value and its nodes."""
    out = []

    def compare(what: str, values: dict[str, str | None]) -> None:
        by_value: dict[str | None, list[str]] = {}
        for node, value in values.items():
            by_value.setdefault(value, []).append(node)
        if len(by_value) > 1:
            parts = [f"{'unset' if v is None else repr(v)} on {', '.join(nodes)}" for v, nodes in by_value.items()]
            out.append(f"{what}: {'; '.join(parts)}")

    names = {f"{f.node_ip} ({f.node_id[:8]})": f for f in facts}
    for key in facts[0].versions:
        compare(key, {n: f.versions.get(key) for n, f in names.items()})
    for var in sorted({k for f in facts for k in f.env}):
        compare(var, {n: f.env.get(var) for n, f in names.items()})
    return out


def _probe_node(ip: str, ckpt_root: str, token: str, exclude: list[str]) -> dict:
    import ray  # lazy: ray

    facts = local_facts(ip, ray.get_runtime_context().get_node_id(), frozenset(exclude))
    error = None
    try:
        folder = Path(ckpt_root) / SENTINELS / token
        folder.mkdir(parents=True, exist_ok=True)
        (folder / facts.node_id).write_text(ip, encoding="utf-8")
    except OSError as err:
        error = f"cannot write to {ckpt_root}: {err.strerror or err}"
    return {"facts": facts.__dict__, "error": error}


def _seen_by_node(ckpt_root: str, token: str) -> list[str]:
    folder = Path(ckpt_root) / SENTINELS / token
    try:
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    except OSError:  # a stale handle of a network volume: this node sees nobody's sentinel
        return []


def check_cluster(ckpt_root: Path, exclude: set[str], timeout: float = 120.0) -> list[NodeFacts]:
    """Raise UserError (exit 2) naming the nodes and values that disagree; needs a connected ``ray``.

    A node that does not answer or dies meanwhile is not a configuration error (a restart may find the
    cluster whole): that fails with the lost-node code."""
    import ray  # lazy: ray
    from ray.exceptions import GetTimeoutError, RayError  # lazy: ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # lazy: ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    token = uuid.uuid4().hex[:12]
    probe = ray.remote(num_cpus=0, max_retries=0)(_probe_node)
    look = ray.remote(num_cpus=0, max_retries=0)(_seen_by_node)

    def on_each(fn, *args, with_ip=False):
        # The node's address as its raylet registered it (a worker process's own guess may be another interface).
        refs = [
            fn.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
                *([n["NodeManagerAddress"]] if with_ip else []), *args
            )
            for n in nodes
        ]
        try:
            return ray.get(refs, timeout=timeout)
        except GetTimeoutError:
            raise UserError(
                f"cross-node preflight: not every node answered within {timeout:.0f}s (a frozen or overloaded node)",
                exit_code=Exit.NODE_LOST,
            ) from None
        except RayError as err:
            cause = getattr(err, "cause", None)
            if isinstance(cause, ModuleNotFoundError):
                raise UserError(
                    f"cross-node preflight: a node cannot run npu-rl ({cause}); every node needs the same image"
                ) from None
            first = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
            raise UserError(
                f"cross-node preflight: a node failed or left ({type(err).__name__}: {first})", exit_code=Exit.NODE_LOST
            ) from None

    try:
        ckpt_root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create the checkpoint directory {ckpt_root}: {err.strerror or err}") from None
    try:
        probed = on_each(probe, str(ckpt_root), token, sorted(exclude), with_ip=True)
        facts = [NodeFacts(**p["facts"]) for p in probed]
        unwritable = [f"{f.node_ip} ({f.node_id[:8]}): {p['error']}" for f, p in zip(facts, probed) if p["error"]]
        if unwritable:
            raise UserError("checkpoint directory not writable on every node: " + "; ".join(unwritable))
        # Every problem in one line: an operator fixes the job spec once, not once per restart.
        problems = mismatches(facts)
        everyone = {f.node_id for f in facts}
        blind = [(f, everyone - set(seen)) for f, seen in zip(facts, on_each(look, str(ckpt_root), token))]
        blind = [(f, missing) for f, missing in blind if missing]
        if blind:
            f, missing = blind[0]
            others = ", ".join(sorted(g.node_ip + f" ({g.node_id[:8]})" for g in facts if g.node_id in missing))
            problems.append(
                f"checkpoint directory {ckpt_root} is not shared: node {f.node_ip} ({f.node_id[:8]}) "
                f"does not see what {others} wrote there ({len(blind)} of {len(facts)} nodes are "
                "blind to others); mount the same ReadWriteMany volume on every node"
            )
        if problems:
            raise UserError(
                f"the {len(facts)} nodes of the cluster disagree, no step was trained: " + " | ".join(problems)
            )
        return facts
    finally:
        shutil.rmtree(ckpt_root / SENTINELS / token, ignore_errors=True)
