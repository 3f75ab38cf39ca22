"""Python stacks of every process of a run, on every node, for a hang report.

One task per alive Ray node, pinned there (``NodeAffinitySchedulingStrategy``, ``num_cpus=0`` so
a node whose CPUs the run holds still takes it), lists the Ray worker processes of its own raylet
(the task's parent, which keeps apart the nodes of a host with several raylets) and runs
``py-spy dump --nonblocking`` on each: it reads the process's memory without ptrace-stopping it,
so a stopped process (SIGSTOP, a frozen device call) is dumpable at all, where py-spy's default
mode fails ("Failed to suspend process"). Every dump and every node has a timeout, so a process
or a node that does not answer is named, not waited for.

This module runs as its own process (``python -m npu_rl.cluster.stacks``): ``ray.init`` and the
tasks may hang on a broken cluster, and the caller must be able to give up on them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from .membership import connected
from .raynode import beside_python

# Frames of a process blocked in a collective: torch.distributed's Python API (Gloo on CPU, HCCL on
# NPU through torch_npu's ProcessGroupHCCL) and the NCCL/HCCL communicators vLLM uses.
_COLLECTIVE = re.compile(
    r"distributed_c10d\.py|\b(all_reduce|all_gather\w*|reduce_scatter\w*|all_to_all\w*|"
    r"barrier|alltoallv)\b \("
)
# A node's answer may take this many dump timeouts (its dumps run at once; the task must be scheduled).
NODE_TIMEOUT_FACTOR = 3
# Titles Ray gives its worker processes ("ray::WorkerDict", "ray::TaskRunner.run", "ray::IDLE").
_IDLE = "ray::IDLE"


@dataclass
class ProcessStack:
    pid: int
    title: str
    status: str  # psutil's: running, sleeping, stopped, zombie, ...
    stack: str = ""
    error: str | None = None  # why there is no stack: py-spy timed out or failed

    @property
    def in_collective(self) -> bool:
        return bool(_COLLECTIVE.search(self.stack))


@dataclass
class NodeStacks:
    node_ip: str
    node_id: str
    processes: list[ProcessStack] = field(default_factory=list)
    error: str | None = None  # the node did not answer


def py_spy() -> str:
    return beside_python("py-spy")


def dump_pid(pid: int, timeout: float, tries: int = 3) -> tuple[str, str | None]:
    """(stack text, error) of one process. py-spy's read of a live interpreter (``--nonblocking``: the process
    is not paused) sometimes finds no interpreter state at all ("Failed to find a python interpreter in the
    .data section", seen in CI once on a stopped rank); it is asked again, within ``timeout``."""
    deadline = time.monotonic() + timeout
    stack, error = "", None
    for _ in range(tries):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            out = subprocess.run(
                [py_spy(), "dump", "--nonblocking", "--pid", str(pid)], capture_output=True, text=True, timeout=left
            )
        except subprocess.TimeoutExpired:
            return stack, f"py-spy did not answer within {timeout:.0f}s"
        except OSError as err:
            return "", f"py-spy could not run: {err}"
        if out.returncode == 0:
            return out.stdout, None
        lines = [ln for ln in (out.stderr or out.stdout).splitlines() if ln.strip()]
        stack, error = out.stdout, (lines[0] if lines else f"py-spy exited with code {out.returncode}")
        if not psutil.pid_exists(pid):
            break
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    return stack, error


def describe(pid: int) -> tuple[str, str]:
    try:
        p = psutil.Process(pid)
        cmd = p.cmdline()
        return (cmd[0] if cmd else p.name()), p.status()
    except psutil.Error:
        return "?", "gone"


def local_stacks(pids: list[int], timeout: float) -> list[ProcessStack]:
    """Every process at once: 16 ranks of an A3 node stuck in a device call must fit in one timeout."""

    def one(pid: int) -> ProcessStack:
        title, status = describe(pid)
        stack, error = dump_pid(pid, timeout)
        return ProcessStack(pid, title, status, stack, error)

    if not pids:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(pids))) as pool:
        return list(pool.map(one, pids))


def _raylet_workers() -> list[int]:
    """The Ray worker processes of the raylet that started this process, this process left out."""
    me = os.getpid()
    try:
        raylet = psutil.Process(os.getppid())
        children = raylet.children()
    except psutil.Error:
        return []
    pids = []
    for c in children:
        try:
            cmd = c.cmdline()
        except psutil.Error:
            continue
        if c.pid != me and cmd and cmd[0].startswith("ray::") and not cmd[0].startswith(_IDLE):
            pids.append(c.pid)
    return pids


def _node_task(timeout: float) -> list[dict]:
    return [asdict(p) for p in local_stacks(_raylet_workers(), timeout)]


def cluster_stacks(address: str, timeout: float, node_timeout: float) -> list[NodeStacks]:
    """Stacks of the Ray workers of every alive node of the cluster at ``address``."""
    import ray  # lazy: ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # lazy: ray

    with connected(address, namespace="npu-rl-stacks"):
        task = ray.remote(num_cpus=0, max_retries=0)(_node_task)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        refs = {
            n["NodeID"]: task.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
            ).remote(timeout)
            for n in nodes
        }
        deadline = time.monotonic() + node_timeout
        out = []
        for n in nodes:
            node = NodeStacks(n["NodeManagerAddress"], n["NodeID"])
            try:
                rows = ray.get(refs[n["NodeID"]], timeout=max(1.0, deadline - time.monotonic()))
                node.processes = [ProcessStack(**r) for r in rows]
            except Exception as err:  # noqa: BLE001 - a timeout or a dead node: named in the report
                node.error = f"did not answer ({type(err).__name__})"
            out.append(node)
        return out


def write_dump(out_dir: Path, driver: list[ProcessStack], nodes: list[NodeStacks]) -> None:
    """One text file per process (``<node>-<pid>.txt``) and ``summary.json``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = [("driver", "local", driver)] + [(n.node_ip, n.node_id[:8], n.processes) for n in nodes]
    for ip, tag, procs in groups:
        for p in procs:
            head = f"# pid {p.pid} {p.title} on {ip} ({tag}), status {p.status}\n"
            body = p.stack if not p.error else f"# no stack: {p.error}\n{p.stack}"
            (out_dir / f"{ip}-{tag}-{p.pid}.txt").write_text(head + body, encoding="utf-8")
    summary = {"driver": [asdict(p) for p in driver], "nodes": [asdict(n) for n in nodes]}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")


def suspects(driver: list[ProcessStack], nodes: list[NodeStacks]) -> list[str]:
    """Who to look at: nodes and processes that did not answer, stopped processes, and the workers
    outside a collective while others wait in one (a rank that never reached it)."""
    named = [f"node {n.node_ip} ({n.node_id[:12]}) {n.error}" for n in nodes if n.error]
    procs = [(n.node_ip, p) for n in nodes for p in n.processes] + [("driver", p) for p in driver]
    for ip, p in procs:
        # A process's state is named with or without its stack: a stopped rank is the finding either way.
        state = f" is {p.status}" if p.status in ("stopped", "tracing-stop", "zombie", "dead") else ""
        if p.error:
            named.append(f"pid {p.pid} {p.title} on {ip}{state}: {p.error}")
        elif state:
            named.append(f"pid {p.pid} {p.title} on {ip}{state}")
    workers = [(ip, p) for ip, p in procs if p.title.startswith("ray::WorkerDict") and not p.error]
    waiting = [w for w in workers if w[1].in_collective]
    if waiting:
        for ip, p in workers:
            if not p.in_collective and p.status not in ("stopped", "tracing-stop"):
                named.append(f"pid {p.pid} {p.title} on {ip} is not in the collective the others wait in")
    return named


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m npu_rl.cluster.stacks")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--address", default=None, help="Ray GCS address; without it only --pid is dumped")
    p.add_argument("--pid", type=int, action="append", default=[], help="local processes to dump (the driver)")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds for each py-spy dump")
    args = p.parse_args(argv)
    driver = local_stacks(args.pid, args.timeout)
    nodes: list[NodeStacks] = []
    if args.address:
        try:
            nodes = cluster_stacks(args.address, args.timeout, node_timeout=NODE_TIMEOUT_FACTOR * args.timeout)
        except Exception as err:  # noqa: BLE001 - the cluster itself is broken: say so, keep the driver's
            nodes = [NodeStacks(args.address, "?", error=f"did not answer: {err}".splitlines()[0])]
    write_dump(args.out, driver, nodes)
    print(
        json.dumps(
            {"suspects": suspects(driver, nodes), "processes": len(driver) + sum(len(n.processes) for n in nodes)}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
