"""Convert MATH-lighteval (problem, level, type, solution) into verl's RL format.

Behaviour matches verl's examples/data_preprocess/math_dataset.py: the ground
truth is the last ``\\boxed{}`` of the solution and the prompt is the problem
followed by the step-by-step instruction. Unlike that script, local parquet files
are the normal input (clusters are offline), and the hub is the fallback.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import UserError

DATA_SOURCE = "DigitalLearningGmbH/MATH-lighteval"
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
REQUIRED_COLUMNS = ("problem", "solution")
SPLITS = ("train", "test")


def extract_ground_truth(solution: str) -> str | None:
    from verl.utils.reward_score.math_reward import last_boxed_only_string, remove_boxed  # lazy: verl

    boxed = last_boxed_only_string(solution)
    if boxed is None:
        return None
    try:
        return remove_boxed(boxed)
    except AssertionError:
        return None


def to_verl_row(example: dict, split: str, index: int, data_source: str = DATA_SOURCE) -> dict | None:
    if not isinstance(example.get("problem"), str) or not isinstance(example.get("solution"), str):
        return None  # a null or numeric cell: skipped and counted like a solution without an answer
    truth = extract_ground_truth(example["solution"])
    if truth is None:
        return None
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": f"{example['problem']} {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": truth},
        "extra_info": {"split": split, "index": index},
    }


def convert_rows(rows: Iterable[dict], split: str) -> tuple[list[dict], int]:
    out, skipped = [], 0
    for i, example in enumerate(rows):
        row = to_verl_row(example, split, i)
        if row is None:
            skipped += 1
        else:
            out.append(row)
    return out, skipped


def find_split_file(src: Path, split: str) -> Path | None:
    """MATH-lighteval on the hub lays files out as data/<split>-00000-of-00001.parquet."""
    for pattern in (f"{split}.parquet", f"{split}-*.parquet", f"data/{split}-*.parquet", f"**/{split}-*.parquet"):
        hits = sorted(src.glob(pattern))
        if hits:
            return hits[0]
    return None


def read_table(path: Path) -> list[dict]:
    import pyarrow.parquet as pq  # lazy: pyarrow

    if path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        columns = set(rows[0]) if rows else set()
    else:
        try:
            table = pq.read_table(path)
        except Exception as err:  # pyarrow raises several types for a broken file
            raise UserError(f"{path}: not a readable parquet file ({err})") from None
        columns = set(table.column_names)
        rows = table.to_pylist()
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)} (need {', '.join(REQUIRED_COLUMNS)})")
    return rows


def write_parquet(rows: list[dict], path: Path) -> None:
    import pyarrow as pa  # lazy: pyarrow
    import pyarrow.parquet as pq  # lazy: pyarrow

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def _load_hub(dataset: str) -> dict[str, list[dict]]:
    try:
        import datasets  # lazy: datasets
    except ImportError:
        raise UserError("no --from directory given and the `datasets` package is not installed") from None
    print(f"loading {dataset} from the hub (pass --from DIR to convert local files)", flush=True)
    try:
        ds = datasets.load_dataset(dataset)
    except Exception as err:  # network errors come in many types
        raise UserError(f"could not load {dataset} from the hub: {str(err).splitlines()[0]}") from None
    return {split: list(ds[split]) for split in SPLITS if split in ds}


def prepare(out: Path, source: Path | None, hub_dataset: str = DATA_SOURCE) -> dict[str, int]:
    """Write ``out/train.parquet`` and ``out/test.parquet``; returns rows written per split."""
    if source is not None:
        if not source.is_dir():
            raise UserError(f"--from {source}: directory not found")
        tables = {}
        for split in SPLITS:
            f = find_split_file(source, split)
            if f is None:
                raise UserError(f"--from {source}: no {split} parquet file found (expected {split}-*.parquet)")
            tables[split] = read_table(f)
    else:
        tables = _load_hub(hub_dataset)
    converted = {}
    for split, rows in tables.items():  # every split converted before any is written: no half-written output
        converted[split], skipped = convert_rows(_progress(rows, split), split)
        if not converted[split]:
            raise UserError(
                f"{split}: none of the {len(rows)} rows has a text problem and a solution with a "
                "\\boxed answer; nothing written"
            )
        if skipped:
            print(f"{split}: {skipped} row(s) without a text problem or a \\boxed answer skipped", flush=True)
    return write_splits(out, converted)


def write_splits(out: Path, splits: dict[str, list[dict]]) -> dict[str, int]:
    """``out/<split>.parquet`` for each split, once every split has been converted; rows per split."""
    counts = {}
    for split, rows in splits.items():
        write_parquet(rows, out / f"{split}.parquet")
        counts[split] = len(rows)
        print(f"{split}: {len(rows)} rows -> {out / f'{split}.parquet'}", flush=True)
    return counts


def _progress(rows: list[dict], split: str) -> Iterator[dict]:
    from rich.progress import track  # lazy: rich

    yield from track(rows, description=f"converting {split}", transient=True)
