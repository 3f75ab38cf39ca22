"""Convert DeepScaleR-Preview (``deepscaler.json``: problem, answer, solution) into verl's RL format.

This is the data cann-recipes-train's DeepSeek-R1 run trains on (its
``llm_rl/deepseek/verl_patches/scripts/json_to_parquet.py``), with the same
semantics: the prompt is the problem as written (no instruction appended, unlike
the MATH conversion), the ground truth is ``answer``, and the file is split in
its own order, the first ``train_ratio`` of it for training and the rest for
validation. Offline a local ``deepscaler.json`` is the input; the hub is the fallback.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from ..errors import UserError
from .math import write_splits

HUB_DATASET = "agentica-org/DeepScaleR-Preview-Dataset"
DATA_SOURCE = "deepscaler"  # upstream's data_source value
FILE_NAME = "deepscaler.json"
REQUIRED_FIELDS = ("problem", "answer")
TRAIN_RATIO = 0.9


def to_verl_row(item: object, split: str, index: int) -> dict | None:
    """verl's row for one item; None for an item without a text problem and a textual or numeric answer."""
    if not isinstance(item, dict):
        return None
    problem, answer = item.get("problem"), item.get("answer")
    # A list or a bool as the answer would become a ground truth no response can match.
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        return None
    if not isinstance(problem, str) or not problem.strip() or not str(answer).strip():
        return None
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": problem}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(answer).strip()},
        "extra_info": {"split": split, "index": index, "solution": str(item.get("solution") or "")},
    }


def split_rows(items: Sequence[object], train_ratio: float = TRAIN_RATIO) -> tuple[dict[str, list[dict]], int]:
    """({"train": rows, "test": rows}, rows skipped); the split is by position, before skipping."""
    if not 0 < train_ratio < 1:
        raise UserError(f"train ratio must be between 0 and 1 (got {train_ratio})")
    cut = int(len(items) * train_ratio)
    out: dict[str, list[dict]] = {"train": [], "test": []}
    skipped = 0
    for i, item in enumerate(items):
        split = "train" if i < cut else "test"
        row = to_verl_row(item, split, i)
        if row is None:
            skipped += 1
        else:
            out[split].append(row)
    return out, skipped


def read_json(source: Path) -> list[object]:
    path = source / FILE_NAME if source.is_dir() else source
    if not path.is_file():
        raise UserError(f"--from {source}: no {FILE_NAME} found")
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not a JSON file ({err})") from None
    if not isinstance(items, list):
        raise UserError(f"{path}: expected a JSON list of {{{', '.join(REQUIRED_FIELDS)}, solution}} objects")
    return items


def _load_hub(dataset: str) -> list[dict]:
    try:
        import datasets  # lazy: datasets
    except ImportError:
        raise UserError("no --from path given and the `datasets` package is not installed") from None
    print(f"loading {dataset} from the hub (pass --from DIR with {FILE_NAME} for offline use)", flush=True)
    try:
        return list(datasets.load_dataset(dataset, split="train"))
    except Exception as err:  # network errors come in many types
        raise UserError(f"could not load {dataset} from the hub: {str(err).splitlines()[0]}") from None


def prepare(
    out: Path, source: Path | None, hub_dataset: str = HUB_DATASET, train_ratio: float = TRAIN_RATIO
) -> dict[str, int]:
    """Write ``out/train.parquet`` and ``out/test.parquet``; returns rows written per split."""
    items = read_json(source) if source is not None else _load_hub(hub_dataset)
    splits, skipped = split_rows(items, train_ratio)
    for split, rows in splits.items():  # both checked before either is written
        if not rows:
            raise UserError(
                f"{split}: no usable row among {len(items)} (each needs a text problem and an answer); nothing written"
            )
    if skipped:
        print(f"{skipped} row(s) without a text problem or an answer skipped", flush=True)
    return write_splits(out, splits)
