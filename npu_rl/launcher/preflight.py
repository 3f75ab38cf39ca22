"""Cheap checks that must pass before Ray or verl start (one clear line on failure)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from ..model.fetch import check_model_dir
from ..recipe.schema import Recipe
from . import paths as run_paths

# verl's RLHFDataset reads these; the reward manager needs reward_model.ground_truth.
REQUIRED_DATA_COLUMNS = ("data_source", "reward_model")


def check_data_file(path: Path, prompt_key: str, field: str) -> None:
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


def check_launch(spec, recipe: Recipe, ports=(), host: bool = True) -> None:
    """Everything that must hold before Ray starts, checked on the launch that will run.

    ``host=False`` (the rehearsal) leaves out this host's platform checks (NPU driver,
    CANN, torch_npu, devices, ports), which only the machine that trains can pass."""
    check_model_dir(run_paths.model_dir(recipe))
    for field, files in (("data.train_files", recipe.data.train_files), ("data.val_files", recipe.data.val_files)):
        for f in files:
            check_data_file(run_paths.resolve(f), recipe.data.prompt_key, field)
    from .overrides import reward_function_path

    reward_function_path(recipe)
    if host:
        _platform_checks(recipe, "train", ports)
    from .verl_config import check_argv

    check_argv(spec.argv)


def _platform_checks(recipe: Recipe, job: str, ports=()) -> None:
    from ..platform.doctor import preflight

    preflight(recipe, for_job=job, ports=ports)
