"""Time as the console shows it, and a callback run every few seconds for as long as a block lasts."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator


def clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}"


@contextlib.contextmanager
def every(seconds: float, tick: Callable[[], None]) -> Iterator[None]:
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(seconds):
            tick()

    thread = threading.Thread(target=loop, name="console-tick", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
