"""Wait until the Ray cluster holds the nodes and NPUs a recipe needs.

A node counts once it is alive and registers at least ``npus_per_node`` NPU;
the timeout message says how many nodes and NPUs are still missing and which
nodes registered fewer NPUs than expected (a pod given too few devices).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from . import rayauth
from .probe import Address, Deadline


@dataclass(frozen=True)
class Node:
    ip: str
    npus: float


@dataclass(frozen=True)
class Expectation:
    nnodes: int
    npus_per_node: int

    @property
    def total_npus(self) -> int:
        return self.nnodes * self.npus_per_node


def shortfall(nodes: Iterable[Node], want: Expectation) -> str | None:
    """None when ``nodes`` satisfy ``want``, else one line naming what is missing."""
    nodes = list(nodes)
    full = [n for n in nodes if n.npus >= want.npus_per_node]
    if len(full) >= want.nnodes:
        return None
    npus = sum(int(n.npus) for n in nodes)
    missing_nodes = want.nnodes - len(full)
    msg = (
        f"{missing_nodes} of {want.nnodes} nodes missing ({len(full)} joined with {want.npus_per_node} NPU each); "
        f"{max(0, want.total_npus - npus)} of {want.total_npus} NPUs missing ({npus} registered)"
    )
    short = [n for n in nodes if n.npus < want.npus_per_node]
    if short:
        listed = ", ".join(f"{n.ip} has {int(n.npus)}" for n in short[:5])
        msg += f"; nodes with fewer than {want.npus_per_node} NPUs: {listed}"
    return msg


def ray_nodes() -> list[Node]:
    import ray  # lazy: ray

    return [
        Node(n["NodeManagerAddress"], float(n.get("Resources", {}).get("NPU", 0.0)))
        for n in ray.nodes()
        if n.get("Alive")
    ]


@contextlib.contextmanager
def connected(address: str, namespace: str) -> Iterator[None]:
    """This process as a Ray driver of the cluster at ``address`` for the block; quiet, and the caller's
    signal handlers kept."""
    import ray  # lazy: ray

    rayauth.observe_in_process()
    # ray.init replaces the SIGTERM handler with sys.exit; the caller's (which stops child processes) must survive it.
    # Handlers belong to the main thread (`ray wait` runs this in another one, where ray.init leaves them be).
    in_main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)} if in_main else {}
    try:
        ray.init(
            address=address,
            log_to_driver=False,
            logging_level=logging.ERROR,
            configure_logging=False,
            namespace=namespace,
        )
    finally:
        for s, handler in previous.items():  # at once: a SIGTERM during the block must reach the caller's
            signal.signal(s, handler)
    try:
        yield
    finally:
        ray.shutdown()


class ClusterTimeout(Exception):
    pass


def wait_for_cluster(
    address: Address,
    want: Expectation,
    deadline: Deadline,
    progress: Callable[[str], None],
    poll: float = 1.0,
    report_every: float = 10.0,
) -> list[Node]:
    """Connect to the head at ``address`` and poll membership; raises ClusterTimeout with the shortfall."""
    with connected(str(address), namespace="npu-rl-wait"):
        last_report = -report_every
        while True:
            nodes = ray_nodes()
            missing = shortfall(nodes, want)
            if missing is None:
                progress(
                    f"cluster ready: {len(nodes)} nodes, {sum(int(n.npus) for n in nodes)} NPUs "
                    f"after {deadline.elapsed():.0f}s"
                )
                return nodes
            if deadline.passed():
                raise ClusterTimeout(f"cluster at {address} not ready after {deadline.elapsed():.0f}s: {missing}")
            if deadline.elapsed() - last_report >= report_every:
                progress(f"waiting for cluster: {missing} ({deadline.left():.0f}s left)")
                last_report = deadline.elapsed()
            time.sleep(min(poll, max(0.05, deadline.left())))
