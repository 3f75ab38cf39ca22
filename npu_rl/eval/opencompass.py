"""The OpenCompass backend: the recipe's eight manual evaluation steps as code.

1. the MATH test split becomes ``<data root>/data/math/math.json`` keyed
   ``"{type}_{n}"`` (OpenCompass's MATHDataset reads ``problem`` and ``solution``;
   ``COMPASS_DATA_CACHE=<data root>`` points it there instead of downloading);
2. one ``HuggingFacewithChatTemplate`` model config per model, in a config dir
   passed with ``--config-dir`` so nothing inside the OpenCompass install changes;
3. ``opencompass --models ... --datasets math_gen_a58d9d`` runs in the eval image;
4. its summary CSV (``<work dir>/<time>/summary/summary_<time>.csv``) becomes our table.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from .table import Row

DATASET_CONFIG = "math_gen_a58d9d"
# OpenCompass names the dataset by its config abbr; the recipe's table calls it by its source.
DATASET_LABELS = {"math": "MATH-lighteval"}
MATH_JSON_FIELDS = ("problem", "level", "type", "solution")


@dataclass(frozen=True)
class ModelEntry:
    abbr: str
    path: Path
    step: int
    baseline: bool = False

    @property
    def config_name(self) -> str:
        """Module name for ``--models`` (OpenCompass matches config files by name)."""
        return "npu_rl_" + re.sub(r"[^0-9A-Za-z]+", "_", self.abbr).strip("_").lower()


# --- data ---------------------------------------------------------------------------------


def read_math_split(path: Path) -> list[dict]:
    """Rows of a MATH test file: MATH-lighteval parquet, or JSONL with the same fields
    (MATH-500's JSONL calls the type ``subject``)."""
    from ..data.math import read_table

    return read_table(path)


def to_math_json(rows: list[dict]) -> dict[str, dict]:
    """OpenCompass's math.json: one entry per problem, keyed ``"{type}_{n}"`` with n
    counting within the type, fields from the lighteval columns."""
    out: dict[str, dict] = {}
    per_type: dict[str, int] = {}
    for i, row in enumerate(rows):
        kind = row.get("type") or row.get("subject")
        if not kind:
            raise UserError(f"MATH row {i}: no 'type' (or 'subject') field")
        n = per_type.get(kind, 0)
        per_type[kind] = n + 1
        level = row.get("level", "")
        out[f"{kind}_{n}"] = {
            "problem": row["problem"],
            # lighteval writes "Level 3", MATH-500 writes 3.
            "level": level if isinstance(level, str) else f"Level {level}",
            "type": kind,
            "solution": row["solution"],
        }
    return out


def math_json_path(data_root: Path) -> Path:
    # OpenCompass maps the dataset id "opencompass/math" to "./data/math/" under COMPASS_DATA_CACHE.
    return data_root / "data" / "math" / "math.json"


def write_math_json(rows: list[dict], data_root: Path) -> Path:
    path = math_json_path(data_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_math_json(rows), ensure_ascii=False, indent=1), encoding="utf-8")
    return path


# --- configs and command ------------------------------------------------------------------


def model_config_text(entry: ModelEntry, *, max_out_len: int = 1024, batch_size: int = 32, num_gpus: int = 1) -> str:
    """The recipe's hf_qwen2_5_1_5b_instruct.py with our path and abbr filled in."""
    return (
        "# Written by `npu-rl eval --backend opencompass`; regenerated on every run.\n"
        "from opencompass.models import HuggingFacewithChatTemplate\n\n"
        "models = [\n"
        "    dict(\n"
        "        type=HuggingFacewithChatTemplate,\n"
        f"        abbr={entry.abbr!r},\n"
        f"        path={str(entry.path)!r},\n"
        f"        max_out_len={max_out_len},\n"
        f"        batch_size={batch_size},\n"
        f"        run_cfg=dict(num_gpus={num_gpus}),\n"
        "    )\n"
        "]\n"
    )


def write_model_configs(config_dir: Path, entries: list[ModelEntry], **kw) -> list[Path]:
    models_dir = config_dir / "models"
    models_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for e in entries:
        p = models_dir / f"{e.config_name}.py"
        p.write_text(model_config_text(e, **kw), encoding="utf-8")
        paths.append(p)
    return paths


def build_command(
    config_dir: Path, entries: list[ModelEntry], work_dir: Path, *, max_num_workers: int = 1, executable: str = "opencompass"
) -> list[str]:
    cmd = [
        executable,
        "--config-dir",
        str(config_dir),
        "--models",
        *[e.config_name for e in entries],
        "--datasets",
        DATASET_CONFIG,
        "--work-dir",
        str(work_dir),
    ]
    if max_num_workers > 1:
        cmd += ["--max-num-workers", str(max_num_workers)]
    return cmd


def command_env(data_root: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["COMPASS_DATA_CACHE"] = str(data_root)
    # The clusters are offline: a missing math.json must fail, not start a download.
    env.setdefault("HF_DATASETS_OFFLINE", "1")
    return env


def run(cmd: list[str], env: dict[str, str], log_path: Path) -> None:
    """Run OpenCompass, echoing its output and keeping a copy next to the results."""
    if shutil.which(cmd[0]) is None:
        raise UserError(
            f"{cmd[0]!r} is not installed here: OpenCompass runs in the eval image "
            "(or use --backend local, or --dry-run to only write the data and configs)"
        )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            log.write(line)
        rc = proc.wait()
    if rc:
        raise UserError(f"opencompass exited with status {rc}; its output is in {log_path}", exit_code=rc)


# --- results ------------------------------------------------------------------------------


def find_summary(work_dir: Path) -> Path:
    """The newest summary CSV OpenCompass wrote under ``work_dir`` (one timestamped folder per run)."""
    hits = sorted(work_dir.glob("*/summary/summary_*.csv"))
    if not hits:
        raise UserError(f"no OpenCompass summary CSV under {work_dir}/*/summary/")
    return hits[-1]


def parse_summary(path: Path, entries: list[ModelEntry]) -> list[Row]:
    """Rows of our table from OpenCompass's summary CSV.

    Its header is ``dataset,version,metric,mode,<model abbr>...`` and each cell a
    score with two decimals, or ``-`` where that model has no result.
    """
    by_abbr = {e.abbr: e for e in entries}
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header or header[:4] != ["dataset", "version", "metric", "mode"]:
            raise UserError(f"{path}: not an OpenCompass summary (header {header})")
        model_cols = header[4:]
        unknown = [m for m in model_cols if m not in by_abbr]
        if unknown:
            raise UserError(f"{path}: model column(s) {', '.join(unknown)} were not part of this evaluation")
        rows: list[Row] = []
        for rec in reader:
            if len(rec) != len(header):
                continue
            dataset, _version, metric, _mode = rec[:4]
            for abbr, cell in zip(model_cols, rec[4:]):
                if cell.strip() in ("", "-"):
                    continue
                e = by_abbr[abbr]
                rows.append(Row(abbr, e.step, DATASET_LABELS.get(dataset, dataset), metric, float(cell), e.baseline))
    if not rows:
        raise UserError(f"{path}: no scores (every cell is '-'; see the OpenCompass logs)")
    # Baseline first, then by step, as in the recipe's table.
    rows.sort(key=lambda r: (not r.baseline, r.step))
    return rows
