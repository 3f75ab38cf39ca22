"""Cheap checks that must pass before Ray or verl start (one clear line on failure)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..model.fetch import check_model_dir
from ..recipe.schema import Recipe
from . import run_files

# verl's RLHFDataset reads these; the reward manager needs reward_model.ground_truth.
REQUIRED_DATA_COLUMNS = ("data_source", "reward_model")


def check_data_file(path: Path, prompt_key: str, field: str) -> int:
    """The file's row count, once it is a parquet file with the columns verl reads."""
    import pyarrow.parquet as pq

    if not path.is_file():
        raise UserError(f"{field}: data file not found: {path} (run `npu-rl prepare`)")
    try:
        schema = pq.read_schema(path)
    except Exception as err:  # pyarrow raises several types for a broken file
        raise UserError(f"{field}: {path} is not a readable parquet file ({err})") from None
    missing = [c for c in (prompt_key, *REQUIRED_DATA_COLUMNS) if c not in schema.names]
    if missing:
        raise UserError(f"{field}: {path} lacks column(s) {', '.join(missing)} (convert it with `npu-rl data math`)")
    return pq.read_metadata(path).num_rows


def check_data(recipe: Recipe) -> None:
    """verl drops the last incomplete batch, so fewer training rows than a batch is an empty dataloader."""
    d, batch = recipe.data, recipe.algorithm.train_batch_size
    for field, files, least, why in (
            ("data.train_files", d.train_files, batch, f"algorithm.train_batch_size is {batch}"),
            ("data.val_files", d.val_files, 1, "validation needs at least one")):
        rows = sum(check_data_file(run_files.resolve(f), d.prompt_key, field) for f in files)
        if rows < least:
            raise UserError(f"{field}: {rows} row(s) in {', '.join(files)}; {why}")


def check_reward(recipe: Recipe) -> None:
    """The reward file exists and defines the function verl will look up (read with ast, not imported)."""
    import ast

    from .overrides import reward_function_path

    path = Path(reward_function_path(recipe))
    if not path.is_file():
        raise UserError(f"reward.function: file not found: {path}")
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError) as err:
        raise UserError(f"reward.function: {path} is not valid Python ({err})") from None
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    names |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    if recipe.reward.name not in names:
        raise UserError(f"reward.name: {path} defines no {recipe.reward.name!r}")


def check_launch(spec, recipe: Recipe, ports=(), host: bool = True) -> None:
    """Everything that must hold before Ray starts, checked on the launch that will run.

    ``host=False`` (the rehearsal) leaves out this host's platform checks (NPU driver,
    CANN, torch_npu, devices, ports), which only the machine that trains can pass."""
    check_model_dir(run_files.model_dir(recipe))
    check_data(recipe)
    check_reward(recipe)
    if host:
        _platform_checks(recipe, "train", ports)
    from .verl_config import check_argv

    check_argv(spec.argv)


def _platform_checks(recipe: Recipe, job: str, ports=()) -> None:
    from ..platform.doctor import preflight

    preflight(recipe, for_job=job, ports=ports)
