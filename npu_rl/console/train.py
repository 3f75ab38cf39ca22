"""The terminal of `npu-rl train`: a progress line and the events that matter; the raw stream is the
caller's to keep (``console.log``).

Three modes: ``live`` (a terminal: rich redraws one progress line, events print above it), ``plain``
(pods, CI, pipes: a line per step, and a heartbeat line while a long step runs, so ``kubectl logs``
stays readable) and ``raw`` (``--verbose`` / ``NPU_RL_VERBOSE=1``: the stream as verl
and Ray print it).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO

from . import lines, noise
from .ticks import clock, every

Mode = Literal["live", "plain", "raw"]

VERBOSE_ENV = "NPU_RL_VERBOSE"
EVERY_ENV = "NPU_RL_PROGRESS_EVERY"  # at least this many seconds between two plain step lines (default 0: each step)
GATE_METRIC = "training/rollout_probs_diff_mean"  # npu_rl.patches.consistency.METRIC, verl's name
GATE_CORR_METRIC = "training/rollout_actor_probs_pearson_corr"  # npu_rl.patches.consistency.CORR_METRIC
_REWARD_PARTS = "reward/"  # npu_rl.patches.reward_parts logs each part's batch mean under this prefix
_MAX_PARTS = 4
# verl 0.9 SFT trainer's step metrics (trainer/sft_trainer.py fit: "train/loss", and "val/loss" at validation).
SFT_LOSS, SFT_VAL_LOSS = "train/loss", "val/loss"


def choose_mode(verbose: bool, stream: TextIO) -> Mode:
    if verbose or os.environ.get(VERBOSE_ENV, "").lower() in ("1", "true", "yes"):
        return "raw"
    isatty = getattr(stream, "isatty", None)
    return "live" if callable(isatty) and isatty() else "plain"


@dataclass
class Progress:
    """What the console knows of the run, from the steps seen so far."""

    total: int | None
    start_step: int
    started: float = field(default_factory=time.monotonic)
    first: tuple[int, float] | None = None  # (step, time) of the first step this attempt trained
    last: tuple[int, float] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    held_out: tuple[str, float, int] | None = None  # (name, value, step)

    def step(self, step: int, metrics: dict[str, float], now: float) -> None:
        if step > self.start_step or self.first is not None:
            if self.first is None:
                self.first = (step, now)
            self.last = (step, now)
            self.metrics = metrics
        for key, value in metrics.items():
            if key.startswith("val-core/") and lines.finite(value):
                self.held_out = (key.split("/")[-2], value, step)
            elif key == SFT_VAL_LOSS and lines.finite(value):  # the SFT trainer's validation
                self.held_out = ("loss", value, step)

    def eta(self, now: float) -> float | None:
        if self.total is None or self.last is None or self.first is None:
            return None
        left = self.total - self.last[0]
        done = self.last[0] - self.first[0]
        per_step = (self.last[1] - self.first[1]) / done if done > 0 else self.metrics.get("timing_s/step")
        if per_step is None:
            return None
        return max(0.0, left * per_step - (now - self.last[1]))

    def fields(self, now: float) -> list[str]:
        """Most important first: a narrow terminal cuts the live line from the right."""
        m = self.metrics
        out = []
        eta = self.eta(now)
        if eta is not None:
            out.append(f"ETA {clock(eta)}")
        if self.held_out:
            name, value, step = self.held_out
            out.append(f"held-out {name} {value:.3f} @{step}")
        if lines.finite(m.get("critic/score/mean")):
            parts = [
                f"{k.removeprefix(_REWARD_PARTS)} {v:.2f}"
                for k, v in m.items()
                if k.startswith(_REWARD_PARTS) and lines.finite(v) and v != 0
            ][:_MAX_PARTS]
            out.append(f"reward {m['critic/score/mean']:.3f}" + (f" ({', '.join(parts)})" if parts else ""))
        if lines.finite(m.get(SFT_LOSS)):
            out.append(f"loss {m[SFT_LOSS]:.3f}")
        if lines.finite(m.get("timing_s/step")):
            out.append(f"{m['timing_s/step']:.1f} s/step")
        if lines.finite(m.get("perf/throughput")):
            out.append(f"{m['perf/throughput']:.0f} tok/s/card")
        out.append(f"{clock(now - self.started)} elapsed")
        return out

    def title(self) -> str:
        at = self.last[0] if self.last else self.start_step
        return f"step {at}/{self.total}" if self.total else f"step {at}"


class TrainConsole:
    """Feed it every raw line of the run; it draws the terminal. Thread-safe for ``event``."""

    def __init__(
        self,
        *,
        mode: Mode,
        total: int | None,
        start_step: int,
        out: TextIO | None = None,
        every_s: float | None = None,
        heartbeat_s: float = 120.0,
        gate_max: float | None = None,
        gate_min_corr: float | None = None,
        gate_every: int = 0,
    ):
        self.mode = mode
        self.out = out or sys.stdout
        self.state = Progress(total, start_step)
        self.every_s = float(os.environ.get(EVERY_ENV, "0")) if every_s is None else every_s
        self.heartbeat_s = heartbeat_s
        self.gate_max, self.gate_min_corr, self.gate_every = gate_max, gate_min_corr, gate_every
        self._first_trained: int | None = None  # the gate's first step in this run (Gate.due)
        self.tail: deque[str] = deque(maxlen=400)
        self._warned: set[str] = set()
        self._checkpoint: str | None = None
        self._rotated: str | None = None
        self._printed = 0.0  # when the last plain progress line was printed
        self._lock = threading.RLock()
        self._live: Any = None
        self._task: Any = None
        self._ticks = contextlib.ExitStack()

    # -- lifecycle
    def _gate_due(self, step: int) -> bool:
        if self.gate_max is None and self.gate_min_corr is None:
            return False
        if self._first_trained is None:
            self._first_trained = step
        return step == self._first_trained or (self.gate_every > 0 and step % self.gate_every == 0)

    def __enter__(self) -> TrainConsole:
        if self.mode == "live":
            from rich.console import Console  # lazy: rich, only on a terminal
            from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, TextColumn
            from rich.text import Text

            state, lock = self.state, self._lock

            class Fields(ProgressColumn):
                # Recomputed at each redraw, so elapsed time and ETA move between steps too.
                def render(self, task: Any) -> Text:
                    with lock:
                        # One row, cut to the terminal's width: a wrapped live line would scroll on each redraw.
                        return Text(" | ".join(state.fields(time.monotonic())), no_wrap=True, overflow="ellipsis")

            self._live = Progress(
                SpinnerColumn(),
                TextColumn("[bold]{task.description}"),
                BarColumn(bar_width=16),
                Fields(),
                console=Console(file=self.out, highlight=False),
                refresh_per_second=2,
            )
            self._live.start()
            self._task = self._live.add_task("starting Ray and verl", total=self.state.total)
        elif self.mode == "plain":
            self._ticks.enter_context(every(min(self.heartbeat_s, 30.0), self._heartbeat))
        return self

    def __exit__(self, *exc: object) -> None:
        self._ticks.close()
        if self._live is not None:
            self._refresh()
            self._live.stop()
            self._live = None

    # -- input
    def feed(self, raw: str) -> int | None:
        """One raw line; returns the step number when it is verl's step line."""
        line = lines.read(raw)
        text = line.text
        if text.strip():
            self.tail.append(text)
        if self.mode == "raw":
            self._write(raw if raw.endswith("\n") else raw + "\n")
        parsed = lines.step_metrics(text)
        if parsed:
            self._on_step(*parsed)
            return parsed[0]
        if self.mode == "raw":
            return None
        total = lines.total_steps(text)
        if total and self.state.total is None:
            self.state.total = total
        folder = lines.checkpoint_folder(text)
        rotated = lines.rotation(text)
        if folder:
            self._checkpoint = folder
        elif rotated and self._checkpoint:
            self._rotated = rotated  # said with the checkpoint, on its step line
        elif text.startswith("npu-rl"):
            self.event(text.split(": ", 1)[1] if text.startswith("npu-rl: ") else text)
        elif lines.is_warning(text) and not noise.hidden(text) and text not in self._warned:
            self._warned.add(text)
            source = "a Ray worker" if line.source.startswith("pid=") else line.source or "verl's driver"
            self.event(f"warning from {source}: {text.strip()}")
        return None

    def event(self, message: str) -> None:
        """One line that stays on screen (above the live line)."""
        self._say(f"npu-rl: {message}")

    def error_line(self) -> str | None:
        """The run's last exception (its traceback's final line), skipping the listed noise."""
        for text in reversed(self.tail):
            if lines.is_exception(text) and not noise.hidden(text):
                return text.strip()
        return None

    # -- output
    def _on_step(self, step: int, metrics: dict[str, float]) -> None:
        now = time.monotonic()
        with self._lock:
            self.state.step(step, metrics, now)
        if self.mode == "raw":
            return
        if self._checkpoint:
            rotated = f" ({self._rotated})" if self._rotated else ""
            # The folder names its step: verl's SFT trainer saves after its step line, GRPO's before.
            saved = m.group(1) if (m := re.search(r"global_step_(\d+)", self._checkpoint)) else step
            self.event(f"checkpoint global_step_{saved} saved: {self._checkpoint}{rotated}")
            self._checkpoint = self._rotated = None
        held = self.state.held_out
        if held and held[2] == step:
            when = "before training" if step == self.state.start_step else f"at step {step}"
            self.event(f"validation {when}: held-out {held[0]} {held[1]:.4f}")
        gap = metrics.get(GATE_METRIC)
        # verl logs the gap whenever the rollout returns log-probs (every step on verl 0.9): a gate line only
        # on the steps the consistency gate checks.
        if lines.finite(gap) and self._gate_due(step):
            limit = f" <= {self.gate_max:g}" if self.gate_max is not None else ""
            corr = metrics.get(GATE_CORR_METRIC)
            if lines.finite(corr):
                floor = f" >= {self.gate_min_corr:g}" if self.gate_min_corr is not None else ""
                limit += f", correlation {corr:.3g}{floor}"
            self.event(f"consistency gate at step {step}: rollout probs diff mean {gap:.3g}{limit}: passed")
        if self.state.last is None or self.state.last[0] != step:
            return  # validation before training: no step yet
        if self.mode == "live":
            self._refresh()
            return
        last = self.state.total is not None and step >= self.state.total
        if self._printed == 0.0 or last or now - self._printed >= self.every_s:
            self._printed = now
            self._say(self.progress_line(now))

    def progress_line(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        with self._lock:
            return " | ".join([f"npu-rl: {self.state.title()}", *self.state.fields(now)])

    def _refresh(self) -> None:
        if self._live is None:
            return
        with self._lock:
            s = self.state
            done = s.last[0] if s.last else s.start_step
            self._live.update(self._task, description=s.title(), total=s.total, completed=done)

    def _heartbeat(self) -> None:
        with self._lock:
            last = self.state.last
        now = time.monotonic()
        if last and now - max(self._printed, last[1]) >= self.heartbeat_s:
            self._printed = now
            self._say(f"npu-rl: step {last[0] + 1} running for {clock(now - last[1])} (step {last[0]} done)")

    def _say(self, text: str) -> None:
        with self._lock:
            if self._live is not None:
                self._live.console.print(text, markup=False, highlight=False, soft_wrap=True)
            else:
                self._write(text + "\n")

    def _write(self, text: str) -> None:
        with self._lock:
            self.out.write(text)
            self.out.flush()
