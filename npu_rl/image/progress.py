"""Turning the Docker API's JSON stream (build and push) into a progress display.

``parse_chunk`` is the pure part: one decoded API chunk -> events. ``Display``
draws them with rich: a bar over the Dockerfile steps, the current step's
instruction, and the latest output line; step lines stay on screen. rich (about 50 ms) is imported
where it draws: the image modules import this one, and parse_chunk needs none of it.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

# Docker prints "Step 3/12 : RUN ...", podman/buildah "STEP 3/12: RUN ...".
_STEP = re.compile(r"^step\s+(\d+)/(\d+)\s*:\s*(.*)$", re.IGNORECASE)

Kind = Literal["step", "output", "status", "error"]


@dataclass(frozen=True)
class Event:
    kind: Kind
    text: str
    step: int | None = None
    total: int | None = None
    current: int | None = None  # bytes, for pull/push status lines


def parse_chunk(chunk: dict[str, Any]) -> list[Event]:
    if "error" in chunk or "errorDetail" in chunk:
        detail = chunk.get("errorDetail") or {}
        message = str(detail.get("message") or chunk.get("error") or "unknown error")
        return [Event("error", " ".join(message.split()))]
    events: list[Event] = []
    for line in str(chunk.get("stream", "")).splitlines():
        line = line.rstrip()
        if not line.strip():
            continue
        m = _STEP.match(line.strip())
        if m:
            events.append(Event("step", m.group(3), int(m.group(1)), int(m.group(2))))
        else:
            events.append(Event("output", line))
    if "status" in chunk:
        detail = chunk.get("progressDetail") or {}
        layer = f"{chunk['id']}: " if chunk.get("id") else ""
        events.append(
            Event("status", f"{layer}{chunk['status']}", current=detail.get("current"), total=detail.get("total"))
        )
    return events


class Display:
    """Feeds events to a rich progress bar; keeps the last output lines for error reports."""

    def __init__(self, title: str, *, verbose: bool = False, console: Any = None, tail_lines: int = 30):
        from rich.console import Console  # lazy: rich

        self.console = console or Console(stderr=True)
        self.title = title
        self.verbose = verbose
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self.step: tuple[int, int, str] | None = None
        self.errors: list[str] = []
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> Display:
        from rich.progress import (  # lazy: rich
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[detail]}", style="dim", markup=False),
            console=self.console,
            transient=True,
        )
        self._progress.__enter__()
        self._task = self._progress.add_task(self.title, total=None, detail="")
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.__exit__(*exc)

    def feed(self, events: Iterable[Event]) -> None:
        for ev in events:
            from rich.markup import escape  # lazy: rich

            if ev.kind == "step":
                self.step = (ev.step or 0, ev.total or 0, ev.text)
                self._progress.update(self._task, total=ev.total, completed=(ev.step or 1) - 1, detail="")
                self._progress.console.print(f"[cyan]step {ev.step}/{ev.total}[/] {escape(ev.text)}", highlight=False)
            elif ev.kind == "error":
                self.errors.append(ev.text)
            else:
                text = ev.text
                if ev.kind == "status" and ev.current and ev.total:
                    text = f"{text} {ev.current * 100 // ev.total}%"
                self.tail.append(text)
                if self.verbose:
                    self._progress.console.print(text, highlight=False, markup=False)
                self._progress.update(self._task, detail=text[-80:])

    def finish(self) -> None:
        task = self._progress.tasks[0]
        self._progress.update(self._task, completed=task.total or 1, total=task.total or 1)
