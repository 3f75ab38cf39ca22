"""The symbolic fallback, run only inside worker processes (see ``budget``).

Math-Verify (sympy under the hood) decides what the fast paths in ``equiv``
cannot parse. Its own timeouts use ``signal.alarm`` and are switched off; the
worker arms its own interval timer (this is the process's main thread, so
signals work) and the parent kills the process if even that does not return.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from multiprocessing.connection import Connection
from typing import Any

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

logging.getLogger("math_verify").setLevel(logging.ERROR)

_CONFIG = [LatexExtractionConfig(), ExprExtractionConfig()]


class _SoftTimeout(Exception):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise _SoftTimeout()


def symbolic_equal(pred: str, gt: str) -> bool:
    gold = parse(f"${gt}$", extraction_config=_CONFIG, extraction_mode="first_match", parsing_timeout=None)
    if not gold:
        return False
    answer = parse(f"${pred}$", extraction_config=_CONFIG, extraction_mode="first_match", parsing_timeout=None)
    return bool(answer) and bool(verify(gold, answer, timeout_seconds=None))


def _answer(pred: str, gt: str, budget_s: float) -> bool | None:
    try:
        signal.setitimer(signal.ITIMER_REAL, max(budget_s, 0.005))
        try:
            return symbolic_equal(pred, gt)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except Exception:  # _SoftTimeout, or a parser bug: no verdict rather than a crash
        return None


def serve(rx: Connection, tx: Connection) -> None:
    """Worker main loop: (pred, gt, budget_s) in, True/False/None out; ends when the parent goes."""
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the parent
    symbolic_equal("\\frac{1}{2}", "0.5")  # pull in the lazily imported parser before saying ready
    tx.send(("ready", os.getpid()))
    while True:
        try:
            pred, gt, budget_s = rx.recv()
        except (EOFError, OSError):
            return
        tx.send(_answer(pred, gt, budget_s))


if __name__ == "__main__":
    serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
