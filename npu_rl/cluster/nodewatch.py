"""Which node left the cluster while a run trained, and at which step.

verl stops on its own when a node goes (an actor dies: seconds for a killed
node; Ray's node health check for a frozen one, about a minute with Ray's
defaults), but its last line says only that an actor died. The launcher keeps a
Ray connection for the run and polls the node table from a thread; a node counts
as gone when Ray marks it dead, or when its raylet's port stops accepting
connections (a killed pod is seen before Ray's health check gives up on it). A
frozen node still accepts connections (the kernel answers for it), so it is
reported when Ray's health check declares it dead.

A departure also ends the run at once (:meth:`NodeWatch.ends`): verl 0.9's trainer
does not stop on its own when a node goes, its request to the lost node's rollout
server waiting on (seen on the 2-node CPU cluster: nothing until the watchdog's
allowance ran out, 90 s later), and no run outlives a node it trains on.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from . import proctree
from .probe import Address, port_open


@dataclass(frozen=True)
class Departure:
    node_ip: str
    node_id: str
    step: int | None  # the last step completed when it was noticed
    reason: str

    def line(self) -> str:
        at = f"step {self.step}" if self.step is not None else "before the first step"
        return f"node {self.node_ip} ({self.node_id}) left the cluster at {at}; {self.reason}"


REFUSALS = 3  # consecutive refused connections that make a node gone


def _raylet(node: dict) -> Address:
    return Address(node["NodeManagerAddress"], int(node["NodeManagerPort"]))


class NodeWatch:
    """Polls ``ray.nodes()`` (a connected driver) every ``poll`` seconds from a daemon thread."""

    def __init__(self, current_step: Callable[[], int | None], poll: float = 2.0):
        self.current_step = current_step
        self.poll = poll
        self.gone: dict[str, Departure] = {}
        self._members: dict[str, dict] = {}
        self._refused: dict[str, int] = {}  # consecutive refused probes per node
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._end: Callable[[], object] | None = None
        self.ended = False  # whether a departure stopped the run (ends)
        self._thread = threading.Thread(target=self._loop, name="npu-rl-nodewatch", daemon=True)

    def start(self) -> NodeWatch:
        import ray  # lazy: ray

        self._members = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}
        self._thread.start()
        return self

    def ends(self, proc: subprocess.Popen) -> None:
        """The first departure stops ``proc`` and everything it started (the run's verl driver)."""
        self._end = lambda: proctree.stop(proc, grace=30.0)

    def stop(self) -> None:
        self._done.set()
        self._thread.join(timeout=self.poll + 5)

    def check(self) -> None:
        import ray  # lazy: ray

        table = {n["NodeID"]: n for n in ray.nodes()}
        for node_id, node in self._members.items():
            if node_id in self.gone:
                continue
            now = table.get(node_id, {})
            reason = None
            if not now.get("Alive", False):
                why = now.get("DeathReasonMessage") or "Ray marked it dead"
                reason = f"Ray: {why}"
            elif not port_open(_raylet(node), timeout=1.0):
                # A single failed connect may be a blip; a killed raylet refuses every one.
                self._refused[node_id] = self._refused.get(node_id, 0) + 1
                if self._refused[node_id] >= REFUSALS:
                    reason = f"its raylet at {_raylet(node)} refuses connections (the node or its pod was killed)"
            else:
                self._refused[node_id] = 0
            if reason:
                with self._lock:
                    self.gone[node_id] = Departure(node["NodeManagerAddress"], node_id, self.current_step(), reason)
                    end, self._end = self._end, None  # once
                if end is not None:
                    self.ended = True
                    end()

    def settle(self, seconds: float) -> list[Departure]:
        """After the run failed: give a departure that caused it time to show, then report all."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the GCS itself is gone: nothing more to learn from it
                break
            if self.gone or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        return self.departures()

    def departures(self) -> list[Departure]:
        with self._lock:
            return list(self.gone.values())

    def _loop(self) -> None:
        while not self._done.wait(self.poll):
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the GCS itself going away ends the run anyway
                return
