"""The demo's MATH-style sample, written by the npu-rl team (no third-party data).

Simple prealgebra whose answer is a number from the problem with the right sign: the opposite
of ``7``, ``|-7|``, ``-(-7)``, ``7 \\times (-1)``... A tiny CPU model learns to copy the number
quickly; whether the sign is right depends on the problem's form, which is what GRPO has to
learn in the demo (``npu_rl.model.warmstart``: a teacher that gets the sign wrong half the
time). Copying the problem's expression (``\\boxed{-(-7)}``) earns nothing: the reward pays
evaluated answers only (``npu_rl.reward.evaluated``).

Problems are generated deterministically in MATH-lighteval's schema (problem, level, type,
solution with a final ``\\boxed{}``) and committed as parquet under configs/data/math-sample/,
so the demo exercises the same conversion path as real data. No test problem occurs in the
train split. ``python -m npu_rl.data.sample`` regenerates the files.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from ..paths import config_dir
from .math import write_parquet

MAX_NUMBER = 99


def _opposite(rng: random.Random) -> tuple[str, str, str]:
    n = rng.randint(1, MAX_NUMBER)
    return (f"What is the opposite of ${n}$?", "Prealgebra", f"The opposite of {n} is negative: $\\boxed{{{-n}}}$.")


def _distance(rng: random.Random) -> tuple[str, str, str]:
    n = rng.randint(1, MAX_NUMBER)
    return (
        f"How far is ${-n}$ from $0$ on the number line?",
        "Prealgebra",
        f"The distance from -{n} to 0 is never negative: $\\boxed{{{n}}}$.",
    )


def _abs_negative(rng: random.Random) -> tuple[str, str, str]:
    n = rng.randint(1, MAX_NUMBER)
    return (f"What is $|-{n}|$?", "Prealgebra", f"The absolute value of -{n} is its opposite: $\\boxed{{{n}}}$.")


def _double_negative(rng: random.Random) -> tuple[str, str, str]:
    n = rng.randint(1, MAX_NUMBER)
    return f"Simplify $-(-{n})$.", "Prealgebra", f"The opposite of -{n} is the number: $\\boxed{{{n}}}$."


def _times_minus_one(rng: random.Random) -> tuple[str, str, str]:
    n = rng.randint(1, MAX_NUMBER)
    return (
        f"Compute ${n} \\times (-1)$.",
        "Prealgebra",
        f"Multiplying {n} by $-1$ changes the sign: $\\boxed{{{-n}}}$.",
    )


def _negated_abs(rng: random.Random) -> tuple[str, str, str]:
    n = rng.randint(1, MAX_NUMBER)
    return (f"What is $-|{n}|$?", "Prealgebra", f"The absolute value is {n}, and its opposite is $\\boxed{{{-n}}}$.")


# Each form worded apart from the others: a 2-layer model tells forms apart by their words far sooner than
# by one operator inside an equation (with "x + 7 = 0" and "x - 7 = 0" it learnt the other forms' signs in
# 48 steps, and answered both of those with the same sign).
# Each worked answer names the number, as a worked solution does: the tiny model learns to copy it through
# its own reasoning within the warm start (without, 1000 steps left it boxing other numbers).
GENERATORS: tuple[Callable[[random.Random], tuple[str, str, str]], ...] = (
    _opposite, _distance, _abs_negative, _double_negative, _times_minus_one, _negated_abs,
)  # fmt: skip


def generate(n: int, seed: int, exclude: set[str] | frozenset[str] = frozenset()) -> list[dict]:
    """``n`` distinct problems cycling through the forms; none whose text is in ``exclude``."""
    rng = random.Random(seed)
    seen = set(exclude)
    rows: list[dict] = []
    attempt = 0
    while len(rows) < n:
        problem, kind, solution = GENERATORS[attempt % len(GENERATORS)](rng)
        attempt += 1
        if attempt > 100 * n:
            raise ValueError(f"cannot draw {n} distinct problems outside the {len(exclude)} excluded")
        if problem in seen:
            continue
        seen.add(problem)
        rows.append({"problem": problem, "type": kind, "level": "Level 1", "solution": solution})
    return rows


def splits(n_train: int = 256, n_test: int = 64) -> dict[str, list[dict]]:
    """The train split and a test split that shares no problem with it."""
    train = generate(n_train, seed=1)
    return {"train": train, "test": generate(n_test, seed=2, exclude={r["problem"] for r in train})}


def sample_dir() -> Path:
    return config_dir() / "data" / "math-sample"


def write_sample(out: Path | None = None, n_train: int = 256, n_test: int = 64) -> dict[str, Path]:
    out = out or sample_dir()
    paths = {}
    for split, rows in splits(n_train, n_test).items():
        paths[split] = out / f"{split}-00000-of-00001.parquet"
        write_parquet(rows, paths[split])
    return paths


if __name__ == "__main__":
    for split, path in write_sample().items():
        print(f"{split}: {path}")
