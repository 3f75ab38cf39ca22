"""The hung-run watchdog: no training step within the allowance -> stacks, one line, stop.

A rank stuck in a device call or a collective looks healthy to Ray (its node
answers health checks), and every other rank waits with it until HCCL's own
timeout. The launcher already reads each step's console line; :class:`StepClock`
turns those into an allowance (``recipe.watchdog``, see its schema), and
:class:`Watchdog` checks it from a thread. On a trip it dumps the stacks of the
driver and of every Ray worker on every node (:mod:`npu_rl.cluster.stacks`, in
its own process with a deadline) into ``<logs>/hang-<time>/``, then stops the
run's process tree; the launcher exits with ``Exit.HUNG``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..cluster.stacks import NODE_TIMEOUT_FACTOR
from ..recipe.schema import WatchdogSpec


class StepClock:
    """The steps a run completed and the allowance for the next one."""

    def __init__(
        self, spec: WatchdogSpec, now: Callable[[], float] = time.monotonic, heavy_every: tuple[int, ...] = ()
    ):
        self.spec = spec
        self.now = now
        self.heavy_every = tuple(f for f in heavy_every if f > 0)  # save_freq, test_freq: steps that do more
        self.started = now()
        self.last_step: int | None = None
        self.last_at = self.started
        self.intervals: list[float] = []

    def begin(self) -> None:
        """The run's process starts now: the first step's allowance counts from here."""
        self.started = self.last_at = self.now()

    def step(self, k: int) -> None:
        if self.last_step is not None and k <= self.last_step:
            return  # the same step's line again (verl's console logger and Ray's echo of it)
        t = self.now()
        if self.last_step is not None:
            self.intervals.append(t - self.last_at)
        self.last_step, self.last_at = k, t

    def allowance(self) -> float:
        if self.last_step is None:
            return self.spec.first_step_s
        extra = self._extra()
        if not self.intervals:  # one step seen, no step time measured yet
            return self.spec.floor_s + extra
        return max(self.spec.floor_s, self.spec.stall_factor * statistics.median(self.intervals)) + extra

    def _extra(self) -> float:
        """``checkpoint_s`` when the next step validates or saves a checkpoint."""
        heavy = self.last_step is not None and any((self.last_step + 1) % f == 0 for f in self.heavy_every)
        return self.spec.checkpoint_s if heavy else 0.0

    def waited(self) -> float:
        return self.now() - self.last_at

    def overdue(self) -> bool:
        return self.waited() > self.allowance()

    def describe(self) -> str:
        """The stall, for the error line."""
        waited, allowed = self.waited(), self.allowance()
        if self.last_step is None:
            return f"no training step completed in {waited:.0f}s (first-step allowance {allowed:.0f}s)"
        rule = (
            f"max(floor {self.spec.floor_s:.0f}s, {self.spec.stall_factor:g} x median step "
            f"{statistics.median(self.intervals):.1f}s)"
            if self.intervals
            else "the floor"
        )
        if self._extra():
            rule += f" + {self._extra():.0f}s for a step that validates or saves"
        return (
            f"step {self.last_step + 1} did not complete in {waited:.0f}s after step {self.last_step} "
            f"(allowance {allowed:.0f}s = {rule})"
        )


class Watchdog:
    """Watches a :class:`StepClock` from a daemon thread; on a trip runs ``on_hang`` once."""

    def __init__(self, clock: StepClock, on_hang: Callable[[], None], poll: float = 1.0):
        self.clock = clock
        self.on_hang = on_hang
        self.poll = poll
        self.tripped: str | None = None  # the stall, once tripped
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="npu-rl-watchdog", daemon=True)

    def __enter__(self) -> Watchdog:
        if self.clock.spec.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()

    def join(self) -> None:
        """Wait for a tripped watchdog to finish its dump and stop."""
        if self._thread.is_alive():
            self._thread.join()

    def _watch(self) -> None:
        while not self._done.wait(self.poll):
            if self.clock.overdue():
                self.tripped = self.clock.describe()
                self.on_hang()
                return


def dump_stacks(out_dir: Path, driver_pid: int, ray_address: str | None, timeout: float) -> dict:
    """Run the stack collector with a deadline; its summary, or what went wrong."""
    cmd = [
        sys.executable,
        "-m",
        "npu_rl.cluster.stacks",
        "--out",
        str(out_dir),
        "--pid",
        str(driver_pid),
        "--timeout",
        str(timeout),
    ]
    if ray_address:
        cmd += ["--address", ray_address]
    deadline = (NODE_TIMEOUT_FACTOR + 2) * timeout + 30  # the driver's dump, ray.init, the nodes', writing
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=deadline)
    except subprocess.TimeoutExpired:
        return {"suspects": [f"the stack collector did not finish within {deadline:.0f}s"], "processes": 0}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    try:
        if out.returncode == 0 and lines:
            return json.loads(lines[-1])
    except ValueError:
        pass
    tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
    return {"suspects": [f"the stack collector failed: {tail}"], "processes": 0}


def hang_message(stall: str, summary: dict, out_dir: Path) -> str:
    named = summary.get("suspects") or []
    who = "; ".join(named[:6]) + (f"; and {len(named) - 6} more" if len(named) > 6 else "")
    return (
        f"run hung: {stall}; {'suspects: ' + who if who else 'every process answered, none stands out'}; "
        f"stacks of {summary.get('processes', 0)} processes in {out_dir}; the run was stopped"
    )
