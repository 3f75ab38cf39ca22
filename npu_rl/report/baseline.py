"""A run's learning curves kept as a baseline: the metrics that say what a run learnt (reward, its
parts, validation, lengths and tokens per step), without the ones that depend on the machine (timings,
throughput, memory), in the file logger's JSONL, so ``npu-rl report --compare BASELINE RUN --learning``
reads it like any run.

``python -m npu_rl.report.baseline RUN_DIR OUT_DIR`` writes one (the demo's is
``tests/e2e/baselines/demo``, recorded from a fresh ``make demo``)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from .scalars import load_run

# What a run learnt; timing_s/*, perf/throughput and memory are left out: another machine has other ones.
LEARNING = re.compile(
    r"^(critic/score/mean|reward/.+|val-(core|aux)/.+|response_length/mean|perf/total_num_tokens"
    r"|actor/entropy|batch/fingerprint)$"
)
FILE = "metrics-from-step-0.jsonl"


def write_baseline(run_dir: Path, out_dir: Path) -> Path:
    series = {tag: s for tag, s in load_run(run_dir).items() if LEARNING.match(tag)}
    if not series:
        raise ValueError(f"{run_dir}: no learning metrics to keep")
    steps = sorted({int(x) for s in series.values() for x in s.steps})
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / FILE
    with open(path, "w", encoding="utf-8") as f:
        for step in steps:
            data = {tag: s.value_at(step) for tag, s in sorted(series.items()) if step in set(s.steps.tolist())}
            f.write(json.dumps({"step": step, "data": data}, sort_keys=True) + "\n")
    return path


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m npu_rl.report.baseline RUN_DIR OUT_DIR")
    print(write_baseline(Path(sys.argv[1]), Path(sys.argv[2])))
