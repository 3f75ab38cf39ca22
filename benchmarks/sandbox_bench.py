"""What the sandbox's isolation costs: `npu-rl sandbox serve` against bare ``python -c`` subprocesses.

One run measures, with the same interpreter (.venv-sandbox's) and the same snippets:

- a trivial snippet at concurrency 1 and 8: executions/s, p50 and p99 latency, through the service (HTTP,
  the queue, bubblewrap, the limits) and bare (a subprocess per execution, no isolation, no HTTP);
- a snippet of about 1 s of CPU at concurrency 1: the service's extra time per run, to show it is fixed
  rather than proportional to the run.

    .venv/bin/python benchmarks/sandbox_bench.py [--runs 200] [--slots 8]

Needs bubblewrap and `make sandbox-venv`; runs as root (the service gives each slot a user of its own).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv-sandbox" / "bin" / "python"
TRIVIAL = "print(sum(range(100)))"
LONG = "n = 0\nfor i in range(25_000_000):\n    n += i\nprint(n)"  # about 1 s of CPU here


def bare(code: str) -> float:
    t = time.perf_counter()
    out = subprocess.run([str(PYTHON), "-I", "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return time.perf_counter() - t


def served(url: str, code: str) -> float:
    body = json.dumps({"code": code, "language": "python", "run_timeout": 60}).encode()
    t = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=300) as r:
        answer = json.loads(r.read())
    assert answer["status"] == "Success", answer
    return time.perf_counter() - t


def measure(one, code: str, runs: int, concurrency: int) -> dict:
    t = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        lat = sorted(pool.map(lambda _: one(code), range(runs)))
    wall = time.perf_counter() - t
    return {
        "per_s": runs / wall,
        "p50_ms": 1000 * statistics.median(lat),
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=200, help="trivial executions per setting")
    p.add_argument("--long-runs", type=int, default=5)
    p.add_argument("--slots", type=int, default=8)
    args = p.parse_args()
    server = subprocess.Popen(
        [sys.executable, "-m", "npu_rl", "sandbox", "serve", "--port", "0", "--slots", str(args.slots)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        line = server.stdout.readline()
        url = line.split("serving ")[1].split(" ")[0].rstrip(",")
        for _ in range(5):  # warm: the interpreter's files in the page cache, numpy's first import done
            served(url, TRIVIAL), bare(TRIVIAL)
        print(f"{'setting':<28}{'bare /s':>9}{'served /s':>11}{'ratio':>7}{'p50 bare':>10}{'p50':>8}{'p99':>8}")
        trivial = {}
        for concurrency in (1, 8):
            b = measure(bare, TRIVIAL, args.runs, concurrency)
            s = measure(lambda c: served(url, c), TRIVIAL, args.runs, concurrency)
            trivial[concurrency] = s["p50_ms"] - b["p50_ms"]
            print(
                f"{'trivial, concurrency ' + str(concurrency):<28}{b['per_s']:>9.1f}{s['per_s']:>11.1f}"
                f"{s['per_s'] / b['per_s']:>7.2f}{b['p50_ms']:>8.1f}ms{s['p50_ms']:>6.1f}ms{s['p99_ms']:>6.1f}ms"
            )
        b = measure(bare, LONG, args.long_runs, 1)
        s = measure(lambda c: served(url, c), LONG, args.long_runs, 1)
        print(
            f"{'~1 s of CPU, concurrency 1':<28}{b['per_s']:>9.2f}{s['per_s']:>11.2f}{s['per_s'] / b['per_s']:>7.2f}"
            f"{b['p50_ms']:>8.0f}ms{s['p50_ms']:>6.0f}ms{s['p99_ms']:>6.0f}ms"
        )
        print(
            f"per-run overhead (p50 served - bare, concurrency 1): {trivial[1]:.0f} ms on the trivial snippet, "
            f"{s['p50_ms'] - b['p50_ms']:.0f} ms on ~1 s of CPU"
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
