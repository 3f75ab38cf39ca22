"""The agent recipes' data, from the formats upstream reads, into verl's RL rows for the tool agent loop.

- **DAPO-Math-17k** (``BytedTsinghua-SIA/DAPO-Math-17k``, ReTool's training set): rows already in verl's
  layout (``data_source``, ``prompt``, ``ability``, ``reward_model``, ``extra_info``). ReTool's dataset class
  (verl 95470480 recipe/retool/retool.py ``CustomRLHFDataset``) appends a boxed-answer instruction to the
  prompt; so does this conversion, in npu-rl's words (``BOXED``).
- **AIME 2025** (``yentinglin/aime_2025``, ReTool's validation set): ``problem`` and ``answer``.
- **Verifiable coding problems** (``PrimeIntellect/verifiable-coding-problems``, the code agent's): ``prompt``,
  ``source``, ``gold_standard_solution`` and ``verification_info`` (a Python or JSON literal with
  ``language`` and ``test_cases``). Kept as cann-recipes-train's build_dataset.py keeps them: a gold solution
  in one python fence, python, and at least ``MIN_TESTS`` tests with input and output. The tests become the
  ground truth npu_rl.reward.code_tests runs; 1% is held out (seed 42), as upstream splits.

Each reads a parquet or JSON-lines file, or a directory holding such files (the hub's layout). Generated or
downloaded by the user: npu-rl ships none of these sets.
"""

from __future__ import annotations

import ast
import json
import random
from collections.abc import Iterable
from pathlib import Path

from ..errors import UserError
from .math import write_splits

BOXED = "\nPut the final answer in \\boxed{}."
MIN_TESTS = 5
VALIDATION_SHARE = 0.01
SPLIT_SEED = 42


def read_rows(source: Path, required: Iterable[str]) -> list[dict]:
    """Every row of the parquet / JSON-lines files at ``source`` (a file or a directory of them)."""
    import pyarrow.parquet as pq  # lazy: pyarrow

    if source.is_dir():
        files = sorted(p for p in source.rglob("*") if p.suffix in (".parquet", ".jsonl") and p.is_file())
    elif source.is_file():
        files = [source]
    else:
        raise UserError(f"--from {source}: no such file or directory")
    if not files:
        raise UserError(f"--from {source}: no .parquet or .jsonl file in it")
    rows: list[dict] = []
    for path in files:
        try:
            if path.suffix == ".jsonl":
                rows += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            else:
                rows += pq.read_table(path).to_pylist()
        except (OSError, ValueError) as err:
            raise UserError(f"{path}: not readable ({str(err).splitlines()[0]})") from None
        except Exception as err:  # pyarrow raises several types for a broken file
            raise UserError(f"{path}: not a readable parquet file ({str(err).splitlines()[0]})") from None
    missing = [c for c in required if rows and c not in rows[0]]
    if missing:
        raise UserError(f"{source}: missing column(s) {', '.join(missing)}")
    return rows


def _agent_row(row: dict) -> dict:
    return {**row, "agent_name": "tool_agent"}


def dapo_math_row(row: dict, index: int) -> dict | None:
    prompt = row.get("prompt")
    truth = (row.get("reward_model") or {}).get("ground_truth")
    if not isinstance(prompt, list) or not prompt or not isinstance(prompt[0], dict) or truth in (None, ""):
        return None
    first = {**prompt[0], "content": str(prompt[0].get("content", "")) + BOXED}
    return _agent_row(
        {
            "data_source": row.get("data_source") or "math_dapo",
            "prompt": [first, *prompt[1:]],
            "ability": row.get("ability") or "MATH",
            "reward_model": {"style": "rule", "ground_truth": str(truth)},
            "extra_info": {"index": (row.get("extra_info") or {}).get("index", index)},
        }
    )


def aime_row(row: dict, index: int) -> dict | None:
    problem = row.get("problem", row.get("Problem"))
    answer = row.get("answer", row.get("Answer"))
    if not isinstance(problem, str) or not problem.strip() or answer in (None, ""):
        return None
    return _agent_row(
        {
            "data_source": "aime_2025",
            "prompt": [{"role": "user", "content": problem + BOXED}],
            "ability": "MATH",
            "reward_model": {"style": "rule", "ground_truth": str(answer)},
            "extra_info": {"index": index},
        }
    )


def _literal(text) -> dict | None:
    if isinstance(text, dict):
        return text
    if not isinstance(text, str):
        return None
    for parse in (ast.literal_eval, json.loads):
        try:
            value = parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        return value if isinstance(value, dict) else None
    return None


def code_problem_row(row: dict, index: int) -> dict | None:
    gold = row.get("gold_standard_solution")
    info = _literal(row.get("verification_info"))
    prompt = row.get("prompt")
    if not isinstance(gold, str) or not gold.strip().startswith("```python") or not gold.strip().endswith("```"):
        return None
    if info is None or info.get("language") != "python" or not isinstance(prompt, str):
        return None
    cases = [c for c in info.get("test_cases") or [] if isinstance(c, dict) and "input" in c and "output" in c]
    if len(cases) < MIN_TESTS:
        return None
    fn = next((c.get("fn_name") for c in cases if c.get("fn_name")), None)
    truth = {
        "inputs": [c["input"] for c in cases],
        "outputs": [c["output"] for c in cases],
        "fn_name": fn,
        "type": "function_call" if fn else "stdin_stdout",
    }
    try:
        ground_truth = json.dumps(truth)
    except (TypeError, ValueError):  # a literal JSON cannot hold (a set, bytes): no test npu-rl can run
        return None
    return _agent_row(
        {
            "data_source": row.get("source") or "verifiable_coding",
            "prompt": [{"role": "user", "content": prompt}],
            "ability": "code",
            "reward_model": {"style": "rule", "ground_truth": ground_truth},
            "extra_info": {"index": index, "solution": gold},
        }
    )


def _convert(rows: list[dict], to_row) -> tuple[list[dict], int]:
    out = [r for i, row in enumerate(rows) if (r := to_row(row, i)) is not None]
    return out, len(rows) - len(out)


def prepare_dapo_math(out: Path, source: Path) -> dict[str, int]:
    rows, skipped = _convert(read_rows(source, ("prompt", "reward_model")), dapo_math_row)
    return write_converted(out, {"train": rows}, skipped, "a prompt and a ground truth")


def prepare_aime(out: Path, source: Path) -> dict[str, int]:
    rows, skipped = _convert(read_rows(source, ()), aime_row)
    return write_converted(out, {"test": rows}, skipped, "a problem and an answer")


def prepare_code_problems(out: Path, source: Path) -> dict[str, int]:
    rows, skipped = _convert(
        read_rows(source, ("prompt", "gold_standard_solution", "verification_info")), code_problem_row
    )
    random.Random(SPLIT_SEED).shuffle(rows)
    held = max(1, int(len(rows) * VALIDATION_SHARE)) if len(rows) > 1 else 0
    splits = {"train": rows[held:], "validation": rows[:held]}
    return write_converted(out, splits, skipped, f"a python gold solution and {MIN_TESTS}+ tests")


def write_converted(out: Path, splits: dict[str, list[dict]], skipped: int, needs: str) -> dict[str, int]:
    """Every split of a conversion written once each has a usable row (the SFT sets' too), the skipped
    rows counted."""
    for split, rows in splits.items():  # every split checked before any is written
        if not rows:
            raise UserError(f"{split}: no usable row (each needs {needs}); nothing written")
    if skipped:
        print(f"{skipped} row(s) without {needs} skipped", flush=True)
    return write_splits(out, splits)
