"""The OpenCompass backend: the recipe's eight manual evaluation steps as code.

1. the MATH test split becomes ``<data root>/data/math/math.json`` keyed ``"{type}_{n}"`` (MATHDataset reads
   ``problem`` and ``solution``; ``COMPASS_DATA_CACHE=<data root>`` points ``opencompass/math`` there instead
   of downloading: ``utils/datasets.py``);
2. one ``HuggingFacewithChatTemplate`` config per model in a ``--config-dir`` (``utils/run.py`` finds models
   under ``<dir>/models``, datasets in the package's ``configs/datasets``): the install stays untouched;
3. ``opencompass --models ... --datasets math_gen_a58d9d`` runs in the eval image or a checkout's ``.venv-eval``
   (``make eval-venv``; apart from ``.venv`` because OpenCompass 0.5.4 needs ``datasets<4``). ``runners/local.py``:
   ``run_cfg.num_gpus`` must be 0 without accelerators, task params go to ``./tmp`` of the working directory,
   and a failed task does not change the exit status;
4. its summary CSV (``<work dir>/<time>/summary/summary_<time>.csv``: ``cli/main.py``, ``summarizers/default.py``)
   becomes our table. All checked against opencompass 0.5.4 running for real (tests/eval/test_opencompass.py).
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

from .. import versions
from ..data.math import read_table
from ..errors import UserError
from ..paths import project_root as _project_root
from .table import Row

DATASET_CONFIG = "math_gen_a58d9d"
# OpenCompass names the dataset by its config abbr; the recipe's table calls it by its source.
DATASET_ABBR = "math"
DATASET_LABELS = {DATASET_ABBR: "MATH-lighteval"}
# Where `npu-rl eval` looks for the OpenCompass command: --opencompass, this variable,
# PATH (the eval image), then the checkout's eval environment.
EXECUTABLE_ENV = "NPU_RL_OPENCOMPASS"
EVAL_VENV = ".venv-eval"
# The eval environment's own requirements, each with its pin in configs/versions.yaml: the
# inputs of configs/locks/eval.txt (npu_rl.envs.locks), which `make eval-venv` installs.
EVAL_REQUIREMENTS = (
    ("opencompass", "eval.opencompass"),
    # The CPU wheel in a checkout, as for training (the eval image keeps its torch_npu build).
    ("torch", "cpu.torch"),
    ("transformers", "common.transformers"),
    # pyarrow 24+ needs NumPy 2, and OpenCompass 0.5.4 needs numpy<2 (datasets imports pyarrow).
    ("numpy", "common.numpy"),
    ("pyarrow", "common.pyarrow"),
    ("datasets", "eval.datasets"),
    # math_gen_a58d9d grades with MATHVerifyEvaluator, which imports math_verify (not an
    # OpenCompass dependency); the training reward's version and ANTLR runtime.
    ("math-verify[antlr4-9-3]", "reward.math_verify"),
    ("antlr4-python3-runtime", "reward.antlr4_python3_runtime"),
)


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
    """The recipe's hf_qwen2_5_1_5b_instruct.py with our path and abbr filled in.

    ``num_gpus`` is the devices one inference task takes (OpenCompass's LocalRunner
    counts NPUs where torch_npu is present); 0 runs the task on the CPU.
    """
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


def find_executable(explicit: str | os.PathLike | None = None, *, project_root: Path | None = None) -> str | None:
    """The ``opencompass`` command to run: ``explicit`` (``--opencompass``), else
    ``$NPU_RL_OPENCOMPASS``, else ``opencompass`` on PATH (the eval image), else the
    checkout's ``.venv-eval/bin/opencompass``; None when there is none.

    A path that was asked for (option or variable) must be an executable file."""
    for given, what in ((explicit, "--opencompass"), (os.environ.get(EXECUTABLE_ENV) or None, EXECUTABLE_ENV)):
        if given is None:
            continue
        given = str(given)
        if os.sep not in given:
            hit = shutil.which(given)
            if hit is None:
                raise UserError(f"{what}: {given!r} is not a command on PATH")
            return hit
        try:
            path = Path(given).expanduser()
        except RuntimeError:  # ~name of a user this host does not know
            path = Path(given)
        if not path.is_file() or not os.access(path, os.X_OK):
            raise UserError(f"{what}: {path} is not an executable file (the eval environment's bin/opencompass)")
        return str(path.absolute())
    hit = shutil.which("opencompass")
    if hit is not None:
        return hit
    if project_root is None:
        project_root = _project_root()
    venv = project_root / EVAL_VENV / "bin" / "opencompass"
    if venv.is_file() and os.access(venv, os.X_OK):
        return str(venv)
    return None


def require_executable(explicit: str | os.PathLike | None = None) -> str:
    found = find_executable(explicit)
    if found is None:
        raise UserError(
            "'opencompass' is not installed here: it runs in the eval image, or in the eval environment "
            f"of a checkout (`make eval-venv`, or point --opencompass / {EXECUTABLE_ENV} at its "
            "bin/opencompass); or use --backend local, or --dry-run to only write the data and configs"
        )
    return found


def build_command(
    config_dir: Path,
    entries: list[ModelEntry],
    work_dir: Path,
    *,
    max_num_workers: int = 1,
    executable: str = "opencompass",
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
    # The clusters are offline: a missing math.json must fail, not start a download; the
    # models are local directories.
    env.setdefault("HF_DATASETS_OFFLINE", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def run_dirs(work_dir: Path) -> set[str]:
    """The per-run folders (``<time>``) OpenCompass has made under ``work_dir`` so far."""
    return {p.name for p in work_dir.iterdir() if p.is_dir()} if work_dir.is_dir() else set()


def run(cmd: list[str], env: dict[str, str], log_path: Path, cwd: Path | None = None) -> None:
    """Run OpenCompass in ``cwd`` (it writes ``tmp/`` there), echoing its output and
    keeping a copy next to the results."""
    if os.sep not in cmd[0] and shutil.which(cmd[0]) is None:
        raise UserError(
            f"{cmd[0]!r} is not installed here: OpenCompass runs in the eval image or the eval environment "
            "(or use --backend local, or --dry-run to only write the data and configs)"
        )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            proc = subprocess.Popen(
                cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
            )
        except OSError as err:
            raise UserError(f"cannot run {cmd[0]}: {err}") from None
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            log.write(line)
        rc = proc.wait()
    if rc:
        raise UserError(f"opencompass exited with status {rc}; its output is in {log_path}", exit_code=rc)


# --- results ------------------------------------------------------------------------------


def find_summary(work_dir: Path, exclude: set[str] | frozenset[str] = frozenset()) -> Path:
    """The newest summary CSV OpenCompass wrote under ``work_dir`` (one timestamped folder
    per run), ignoring the run folders in ``exclude`` (those from before this run)."""
    hits = sorted(p for p in work_dir.glob("*/summary/summary_*.csv") if p.parent.parent.name not in exclude)
    if not hits:
        raise UserError(f"OpenCompass wrote no summary CSV under {work_dir}/*/summary/ (see its output above)")
    return hits[-1]


def task_logs(run_dir: Path, entry: ModelEntry, stage: str = "infer") -> list[Path]:
    """The output of one model's tasks (``math.out``, or ``math_0.out``, ``math_1.out``...
    when ``--max-num-workers`` splits the dataset), as OpenCompass's LocalRunner keeps it."""
    return sorted((run_dir / "logs" / stage / entry.abbr).glob(f"{DATASET_ABBR}*.out"))


def _last_error(logs: list[Path]) -> str:
    """The last line of the task logs that names an error (the exception), if any."""
    for log in logs:
        try:
            lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in reversed(lines):
            if re.search(r"(Error|Exception)\b", line):
                return line.strip()[:300]
    return ""


def parse_summary(path: Path, entries: list[ModelEntry]) -> list[Row]:
    """Rows of our table from OpenCompass's summary CSV.

    Its header is ``dataset,version,metric,mode,<model abbr>...`` and each cell a
    score with two decimals, or ``-`` where that model has no result (a dataset without
    any result has ``-`` as version, metric and mode too). Every model must have a score:
    OpenCompass exits 0 when a task fails, so a missing one is an error naming its log.
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
                try:
                    score = float(cell)
                except ValueError:
                    raise UserError(f"{path}: {abbr} on {dataset}: score {cell!r} is not a number") from None
                e = by_abbr[abbr]
                rows.append(Row(abbr, e.step, DATASET_LABELS.get(dataset, dataset), metric, score, e.baseline))
    if not rows:
        raise UserError(f"{path}: no scores (every cell is '-'; see the OpenCompass logs)")
    scored = {r.model for r in rows}
    missing = [e for e in entries if e.abbr not in scored]
    if missing:
        run_dir = path.parent.parent
        parts = []
        for e in missing:
            logs = task_logs(run_dir, e)
            err = _last_error(logs)
            where = run_dir / "logs" / "infer" / e.abbr
            parts.append(f"{e.abbr} (see {where}/{': ' + err if err else ''})")
        raise UserError(f"{path}: OpenCompass has no score for {'; '.join(parts)}")
    # Baseline first, then by step, as in the recipe's table.
    rows.sort(key=lambda r: (not r.baseline, r.step))
    return rows


# --- the eval environment -----------------------------------------------------------------


def eval_requirements(pins: dict | None = None) -> list[str]:
    """pip requirement lines of the eval environment, pinned from configs/versions.yaml."""
    out = []
    for name, key in EVAL_REQUIREMENTS:
        value = str(versions.get(key, pins))
        out.append(f"{name}{versions.pin_spec(value)}")
    return out
