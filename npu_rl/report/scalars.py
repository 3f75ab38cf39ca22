"""Reads a run's scalar curves from TensorBoard event files and from verl's
``file`` logger JSONL (lines ``{"step": N, "data": {tag: value}}``)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

EVENT_GLOB = "events.out.tfevents.*"


@dataclass(frozen=True)
class Series:
    tag: str
    steps: np.ndarray  # int, ascending, unique
    values: np.ndarray  # float, NaN/inf kept: they are findings

    def __len__(self) -> int:
        return len(self.steps)

    def value_at(self, step: int) -> float:
        i = int(np.searchsorted(self.steps, step))
        return float(self.values[i]) if i < len(self.steps) and self.steps[i] == step else math.nan


def _tensorboard_points(directory: Path) -> dict[str, dict[int, tuple[float, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # lazy: tensorboard

    # size_guidance 0 keeps every point; the default samples 10,000 scalars per tag.
    acc = EventAccumulator(str(directory), size_guidance={"scalars": 0})
    acc.Reload()
    points: dict[str, dict[int, tuple[float, float]]] = {}
    for tag in acc.Tags().get("scalars", []):
        for ev in acc.Scalars(tag):
            # A resumed run logs some steps twice; the later write wins.
            prev = points.setdefault(tag, {}).get(ev.step)
            if prev is None or ev.wall_time >= prev[1]:
                points[tag][ev.step] = (float(ev.value), ev.wall_time)
    return points


def _jsonl_points(path: Path) -> dict[str, dict[int, tuple[float, float]]] | None:
    """Points of a verl file-logger JSONL, or None when the file is something else."""
    points: dict[str, dict[int, tuple[float, float]]] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                return None if lineno == 0 else points
            if not (isinstance(rec, dict) and isinstance(rec.get("step"), int) and isinstance(rec.get("data"), dict)):
                return None if lineno == 0 else points
            for tag, value in rec["data"].items():
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                # Later lines win, as with a resumed run's TensorBoard points.
                points.setdefault(tag, {})[rec["step"]] = (float(value), float(lineno))
    return points


def find_sources(run_dir: Path) -> tuple[list[Path], list[Path]]:
    """Directories holding event files, and JSONL files, under ``run_dir``."""
    event_dirs = sorted({p.parent for p in run_dir.rglob(EVENT_GLOB)})
    jsonl = sorted(run_dir.rglob("*.jsonl"))
    return event_dirs, jsonl


def load_run(run_dir: Path) -> dict[str, Series]:
    """All scalar series of the run; TensorBoard and JSONL points of one step agree or the JSONL wins."""
    event_dirs, jsonl_files = find_sources(run_dir)
    merged: dict[str, dict[int, float]] = {}
    sources = [_tensorboard_points(d) for d in event_dirs]
    sources += [p for p in (_jsonl_points(f) for f in jsonl_files) if p]
    for points in sources:
        for tag, by_step in points.items():
            target = merged.setdefault(tag, {})
            for step, (value, _) in by_step.items():
                target[step] = value
    out = {}
    for tag, values in merged.items():
        steps = np.array(sorted(values), dtype=np.int64)
        out[tag] = Series(tag, steps, np.array([values[s] for s in steps], dtype=np.float64))
    return out
