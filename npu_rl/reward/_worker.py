"""The symbolic fallback, run only inside worker processes (see ``worker_pool``).

It is the same judge as the fast path (``equiv.judge``) with the symbolic leaf
of :mod:`npu_rl.reward.symbolic` for what ``latex_eval`` cannot decide, so the
fallback holds to the definition of "equal" in ``equiv``. sympy can be stuck in
C code that no signal reaches: the worker arms an interval timer for the usual
case (this is the process's main thread, so signals work) and the parent kills
the process when even that does not return.
"""

from __future__ import annotations

import os
import signal
import sys
from multiprocessing.connection import Connection
from typing import Any

from npu_rl.reward.equiv import judge
from npu_rl.reward.symbolic import leaf_equal


class _SoftTimeout(BaseException):
    """Not an Exception: the parsers' catch-alls must not swallow the deadline."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _SoftTimeout()


def symbolic_equal(pred: str, gt: str) -> bool:
    """The worker's verdict; the fast path's None (nothing left to try) is no."""
    return bool(judge(pred, gt, leaf=leaf_equal))


def _answer(pred: str, gt: str, budget_s: float) -> bool | None:
    try:
        signal.setitimer(signal.ITIMER_REAL, max(budget_s, 0.005))
        try:
            return symbolic_equal(pred, gt)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except (_SoftTimeout, Exception):  # out of time, or a parser bug: no verdict rather than a crash
        return None


def serve(rx: Connection, tx: Connection) -> None:
    """Worker main loop: (pred, gt, budget_s) in, True/False/None out; ends when the parent goes."""
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the parent
    symbolic_equal("\\lfloor 2.5 \\rfloor", "2")  # pull in the lazily imported parser before saying ready
    try:
        tx.send(("ready", os.getpid()))
        while True:
            pred, gt, budget_s = rx.recv()
            tx.send(_answer(pred, gt, budget_s))
    except (EOFError, OSError):  # the parent has gone (a short script can exit before we are ready)
        return


if __name__ == "__main__":
    serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
