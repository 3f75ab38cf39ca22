"""Reads the validation split in verl's RL parquet format (what `npu-rl data math` writes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UserError

REQUIRED_COLUMNS = ("data_source", "prompt", "reward_model")


@dataclass(frozen=True)
class Problem:
    data_source: str
    messages: list[dict[str, str]]
    ground_truth: str
    extra_info: dict[str, Any] = field(default_factory=dict)


def dataset_label(data_source: str) -> str:
    """ "DigitalLearningGmbH/MATH-lighteval" -> "MATH-lighteval", the name the recipe's table uses."""
    return data_source.rstrip("/").rsplit("/", 1)[-1]


def _to_problem(row: dict, where: str) -> Problem:
    messages = row["prompt"]
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    reward = row["reward_model"] or {}
    if "ground_truth" not in reward:
        raise UserError(f"{where}: reward_model has no ground_truth")
    return Problem(
        data_source=str(row["data_source"]),
        messages=[{"role": m["role"], "content": m["content"]} for m in messages],
        ground_truth=str(reward["ground_truth"]),
        extra_info=dict(row.get("extra_info") or {}),
    )


def load_problems(files: list[str | Path], limit: int | None = None) -> list[Problem]:
    """Rows of all ``files`` in order, the first ``limit`` of them when given."""
    import pyarrow.parquet as pq  # lazy: pyarrow

    if limit is not None and limit <= 0:
        raise UserError(f"--limit must be positive (got {limit})")
    problems: list[Problem] = []
    for f in files:
        path = Path(f)
        if not path.is_file():
            raise UserError(f"validation file not found: {path} (run `npu-rl data math` first)")
        try:
            table = pq.read_table(path)
        except Exception as err:  # pyarrow raises several types for a broken file
            raise UserError(f"{path}: not a readable parquet file ({err})") from None
        missing = [c for c in REQUIRED_COLUMNS if c not in table.column_names]
        if missing:
            raise UserError(f"{path}: missing column(s) {', '.join(missing)} (need verl's RL format)")
        if limit is not None:
            table = table.slice(0, limit - len(problems))
        problems.extend(_to_problem(row, f"{path} row {i}") for i, row in enumerate(table.to_pylist()))
        if limit is not None and len(problems) >= limit:
            break
    if not problems:
        raise UserError(f"no rows in {', '.join(str(f) for f in files)}")
    return problems
