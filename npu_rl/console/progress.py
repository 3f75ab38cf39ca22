"""A long job without steps of its own (verl's model merger, a conversion tool): a spinner with the elapsed
time on a terminal, and elsewhere a start line, a line every ``every_s`` seconds and an end line."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

from .train import clock


@contextlib.contextmanager
def activity(title: str, *, out: TextIO | None = None, every_s: float = 60.0) -> Iterator[None]:
    out = out or sys.stdout
    t0 = time.monotonic()
    isatty = getattr(out, "isatty", None)
    if callable(isatty) and isatty():
        from rich.console import Console  # lazy: rich, only on a terminal

        with Console(file=out).status(title) as status:
            stop = threading.Event()

            def tick() -> None:
                while not stop.wait(1.0):
                    status.update(f"{title} ({clock(time.monotonic() - t0)})")

            ticker = threading.Thread(target=tick, daemon=True)
            ticker.start()
            try:
                yield
            finally:
                stop.set()
                ticker.join()
        print(f"{title}: done in {clock(time.monotonic() - t0)}", file=out, flush=True)
        return
    print(f"{title} ...", file=out, flush=True)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            print(f"{title}: still running after {clock(time.monotonic() - t0)}", file=out, flush=True)

    beater = threading.Thread(target=beat, daemon=True)
    beater.start()
    try:
        yield
    finally:
        stop.set()
        beater.join()
    print(f"{title}: done in {clock(time.monotonic() - t0)}", file=out, flush=True)
