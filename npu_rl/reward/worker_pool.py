"""A pool of worker processes that answers within a deadline, from any thread.

``signal.alarm`` only works in the main thread, and a sympy call stuck in C code
cannot be interrupted at all, so the slow symbolic check runs in a separate
process: the caller waits on a pipe until its deadline and, if the worker has not
answered, kills it and starts a replacement in the background (a start costs
about a second of imports, so it must not happen on the caller's clock).

One pool per process (``get_pool``); threads share it, each call checking out a
whole worker so answers never cross.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

log = logging.getLogger(__name__)
_WORKER_MODULE = "npu_rl.reward._worker"
_KILL_MARGIN_S = 0.05
# The worker must import this very copy of npu_rl, installed or not.
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


class _Worker:
    """One ``python -m npu_rl.reward._worker`` child, talked to over two pipes.

    A plain subprocess rather than multiprocessing: it never re-imports the
    caller's ``__main__`` (a Ray worker, a script without a main guard) and can
    be started from daemonic processes too.
    """

    def __init__(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = dict(os.environ)
        # The worker uses neither verl nor torch: the run's verl patches have nothing to do there.
        env.pop("NPU_RL_PATCHES", None)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", _WORKER_MODULE, str(to_child_r), str(from_child_w)],
                pass_fds=(to_child_r, from_child_w),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.tx = Connection(to_child_w, readable=False)
        self.rx = Connection(from_child_r, writable=False)
        self.ready = False

    def wait_ready(self, timeout: float) -> bool:
        # Only the thread that checked this worker out receives on its pipe.
        if not self.ready and self.rx.poll(max(timeout, 0)):
            self.rx.recv()
            self.ready = True
        return self.ready

    def kill(self) -> None:
        self.proc.kill()  # immediate; reaping happens in reap()

    def reap(self) -> None:
        try:
            self.proc.wait(timeout=5)
        finally:
            self.tx.close()
            self.rx.close()


class WorkerPool:
    def __init__(self, max_workers: int | None = None):
        self.max_workers = max_workers or max(2, min(os.cpu_count() or 2, 16))
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._count = 0
        self.timeouts = 0  # how many calls ran out of time
        # Kept started so that a killed worker's replacement is never on anyone's clock.
        self.spares = min(2, self.max_workers)

    def _spawn(self) -> _Worker:
        return _Worker()

    def start(self, n: int = 1, wait_s: float = 0.0) -> None:
        """Have at least ``n`` workers (started now if missing); wait up to ``wait_s`` until one is ready."""
        with self._cond:
            todo = max(0, min(n, self.max_workers) - self._count)
            self._count += todo
        fresh = []
        for _ in range(todo):
            try:
                fresh.append(self._spawn())
            except Exception as exc:
                with self._cond:
                    self._count -= 1
                log.warning("npu-rl reward: cannot start a worker process (%s)", exc)
        with self._cond:
            self._idle.extend(fresh)
            self._cond.notify_all()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            with self._cond:
                if any(w.ready or w.rx.poll(0) for w in self._idle):
                    return
            time.sleep(0.01)

    def _acquire(self, deadline: float) -> _Worker | None:
        w: _Worker | None
        with self._cond:
            while True:
                ready = [w for w in self._idle if w.ready or w.rx.poll(0)]
                if ready:
                    w = ready[0]
                    self._idle.remove(w)
                    return w
                if self._idle:
                    w = self._idle.pop(0)  # still starting: wait on it below, outside the lock
                    break
                if self._count < self.max_workers:
                    self._count += 1
                    w = None
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
        if w is not None:
            return w
        try:
            return self._spawn()
        except Exception as exc:  # e.g. inside a daemonic process, which may not have children
            with self._cond:
                self._count -= 1
            log.warning("npu-rl reward: cannot start a worker process (%s); slow checks score 0", exc)
            return None

    def _release(self, w: _Worker) -> None:
        with self._cond:
            self._idle.append(w)
            self._cond.notify()

    def _discard(self, w: _Worker) -> None:
        w.kill()
        with self._cond:
            self._count -= 1
            target = max(self._count + 1, self.spares)

        def replace() -> None:
            w.reap()
            self.start(target)

        # Reap and replace off the caller's clock, so the next slow call finds a ready worker.
        threading.Thread(target=replace, daemon=True).start()

    def call(self, pred: str, gt: str, deadline: float) -> bool | None:
        """The worker's verdict, or None when the deadline passes first."""
        deadline -= _KILL_MARGIN_S  # killing and reaping a worker is not free
        w = self._acquire(deadline)
        if w is None:
            self.timeouts += 1
            return None
        try:
            if not w.wait_ready(deadline - time.monotonic()):
                self._release(w)  # not broken, just not started yet
                self.timeouts += 1
                return None
            # The worker stops itself a little early so that it usually survives.
            w.tx.send((pred, gt, 0.8 * (deadline - time.monotonic())))
            if w.rx.poll(max(deadline - time.monotonic(), 0)):
                verdict = w.rx.recv()
                self._release(w)
                return verdict
        except (EOFError, OSError, BrokenPipeError):
            pass
        self.timeouts += 1
        self._discard(w)
        return None

    def close(self) -> None:
        with self._cond:
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        for w in idle:
            w.kill()
            w.reap()


_POOL: WorkerPool | None = None
_POOL_LOCK = threading.Lock()


def get_pool() -> WorkerPool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = WorkerPool()
        return _POOL
