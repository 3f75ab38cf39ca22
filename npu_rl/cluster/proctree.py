"""Stop every process a command started, including those that left its process group.

Ray's daemons do not stay where they were started: ``ray start --block`` spawns
the GCS server, the raylet and agents, the raylet spawns workers, and when
``ray start`` exits first they are re-parented, so neither a process-group kill
nor waiting on the direct child reaches them (seen: ``ray start``, the GCS server
and zombie raylets left 35 s after SIGTERM to ``npu-rl ray head``). So npu-rl's
long-running commands make themselves a child subreaper (orphans of their tree are
re-parented to them rather than to init, and reaped by them), snapshot a child's
descendants before signalling it, and finish with whatever is still below them.
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator

import psutil

_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


class Terminated(Exception):
    """SIGTERM or SIGINT arrived; ``signum`` says which."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _subreaper(on: bool) -> bool:
    """Make orphaned descendants re-parent to this process (Linux); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Turn SIGTERM and SIGINT into :class:`Terminated`, so that ``finally`` blocks stop the children."""

    def handler(signum, frame):  # noqa: ARG001 - signal handler signature
        raise Terminated(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _alive(procs: Iterable[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def kill_all(procs: Iterable[psutil.Process], grace: float = 5.0) -> None:
    """SIGTERM ``procs`` and what they spawned, SIGKILL survivors after ``grace`` seconds, reap ours."""
    procs = list(procs)
    seen = {p.pid: p for p in procs}
    for p in list(procs):  # children spawned since the snapshot
        with contextlib.suppress(psutil.Error):
            for c in p.children(recursive=True):
                seen.setdefault(c.pid, c)
    targets = list(seen.values())
    for p in _alive(targets):
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(targets, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=grace)


def stop(proc: subprocess.Popen, grace: float = 30.0, sig: int = signal.SIGTERM) -> int | None:
    """Signal ``proc`` (let it shut its own children down), then end every descendant it leaves."""
    tree = _tree(proc.pid)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    kill_all(tree[1:])
    return proc.returncode


@contextlib.contextmanager
def reaped(grace: float = 5.0) -> Iterator[None]:
    """Every process started inside the block, orphans included, is ended when it exits.

    Children this process had before the block (a test runner's other fixtures) are left alone.
    """
    me = psutil.Process().pid
    before = {p.pid for p in _tree(me)[1:]}
    made_subreaper = _subreaper(True)
    try:
        yield
    finally:
        kill_all([p for p in _tree(me)[1:] if p.pid not in before], grace)
        if made_subreaper:
            _subreaper(False)
