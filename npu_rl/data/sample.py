"""The demo's MATH-style sample, written by the npu-rl team (no third-party data).

Problems are generated deterministically in MATH-lighteval's schema (problem,
level, type, solution with a final ``\\boxed{}``) and committed as parquet under
configs/data/math-sample/ so that the demo exercises the same conversion path as
real data. ``python -m npu_rl.data.sample`` regenerates the files.
"""

from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path

from ..paths import config_dir


def _add(rng: random.Random) -> dict:
    a, b = rng.randint(2, 60), rng.randint(2, 60)
    return {"problem": f"What is ${a} + {b}$?", "type": "Prealgebra", "level": "Level 1",
            "solution": f"Adding the two numbers gives ${a} + {b} = \\boxed{{{a + b}}}$."}


def _mul(rng: random.Random) -> dict:
    a, b = rng.randint(2, 12), rng.randint(2, 12)
    return {"problem": f"Compute ${a} \\times {b}$.", "type": "Prealgebra", "level": "Level 1",
            "solution": f"${a} \\times {b} = \\boxed{{{a * b}}}$."}


def _linear(rng: random.Random) -> dict:
    x, a, b = rng.randint(-9, 9), rng.randint(2, 9), rng.randint(1, 20)
    c = a * x + b
    return {"problem": f"Solve for $x$: ${a}x + {b} = {c}$.", "type": "Algebra", "level": "Level 2",
            "solution": f"Subtract {b} from both sides: ${a}x = {c - b}$. Divide by {a}: $x = \\boxed{{{x}}}$."}


def _fraction(rng: random.Random) -> dict:
    num, den, k = rng.randint(1, 9), rng.randint(2, 10), rng.randint(2, 6)
    f = Fraction(num, den)
    ans = str(f.numerator) if f.denominator == 1 else f"\\frac{{{f.numerator}}}{{{f.denominator}}}"
    return {"problem": f"Simplify $\\frac{{{num * k}}}{{{den * k}}}$.", "type": "Prealgebra", "level": "Level 2",
            "solution": f"Divide numerator and denominator by their greatest common divisor to get $\\boxed{{{ans}}}$."}


def _square(rng: random.Random) -> dict:
    n = rng.randint(2, 20)
    return {"problem": f"What is the positive square root of ${n * n}$?", "type": "Algebra", "level": "Level 1",
            "solution": f"Since ${n}^2 = {n * n}$, the answer is $\\boxed{{{n}}}$."}


GENERATORS = (_add, _mul, _linear, _fraction, _square)


def generate(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [GENERATORS[i % len(GENERATORS)](rng) for i in range(n)]


def sample_dir() -> Path:
    return config_dir() / "data" / "math-sample"


def write_sample(out: Path | None = None, n_train: int = 256, n_test: int = 64) -> dict[str, Path]:
    from .math import write_parquet

    out = out or sample_dir()
    paths = {
        "train": out / "train-00000-of-00001.parquet",
        "test": out / "test-00000-of-00001.parquet",
    }
    write_parquet(generate(n_train, seed=1), paths["train"])
    write_parquet(generate(n_test, seed=2), paths["test"])
    return paths


if __name__ == "__main__":
    for split, path in write_sample().items():
        print(f"{split}: {path}")
