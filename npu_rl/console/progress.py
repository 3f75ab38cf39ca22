"""A long job without steps of its own (verl's model merger, a conversion tool): a spinner with the elapsed
time on a terminal, and elsewhere a start line, a line every ``every_s`` seconds and an end line."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import TextIO

from .ticks import clock, every


@contextlib.contextmanager
def activity(title: str, *, out: TextIO | None = None, every_s: float = 60.0) -> Iterator[None]:
    out = out or sys.stdout
    t0 = time.monotonic()
    isatty = getattr(out, "isatty", None)
    if callable(isatty) and isatty():
        from rich.console import Console  # lazy: rich, only on a terminal

        with (
            Console(file=out).status(title) as status,
            every(1.0, lambda: status.update(f"{title} ({clock(time.monotonic() - t0)})")),
        ):
            yield
    else:
        print(f"{title} ...", file=out, flush=True)

        def still() -> None:
            print(f"{title}: still running after {clock(time.monotonic() - t0)}", file=out, flush=True)

        with every(every_s, still):
            yield
    print(f"{title}: done in {clock(time.monotonic() - t0)}", file=out, flush=True)
