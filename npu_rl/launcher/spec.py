"""The launch of one run, built once: everything else (dry-run, preflight, rehearsal, run) reads it.

A :class:`LaunchSpec` holds verl's config name, the exact argv of ``python -m verl.trainer.main_ppo``,
the environment of that driver process and the environment every Ray worker of the run must have.
Nothing downstream rebuilds overrides or edits the environment: the preflight composes ``spec.argv``
itself with verl's hydra config (:func:`hydra_args`), and the run executes it.

Why the worker environment is inside the argv: on a cluster brought up with ``npu-rl ray head|worker`` the
raylets start before the driver exists, so the driver's environment never reaches the workers they spawn.
verl's ``run_ppo`` passes ``ray_kwargs.ray_init`` to ``ray.init`` and merges its ``runtime_env`` into its
default one (verl 0.6.1 ``verl/trainer/main_ppo.py`` ``run_ppo``); Ray applies a job's ``runtime_env.env_vars``
to every worker process of the job on every node, merged into each actor's own ``runtime_env`` (verl's worker
groups set ``RANK``/``WORLD_SIZE`` there). So ``+ray_kwargs.ray_init.runtime_env.env_vars.K=V`` overrides
carry the patch selection (``NPU_RL_PATCHES``, the boot ``PYTHONPATH``) and the recipe's variables to every worker.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import run_files
from ..cluster.raynode import registered_resources
from ..patches import env_for
from ..patches.attest import ATTEST_ENV
from ..patches.consistency import FILE_ENV
from ..patches.rehearse import NODES_ENV, RANKS_LEAVE_ENV, REPORT_ENV
from ..recipe.schema import Recipe
from . import sft
from .hydra import quoted
from .overrides import build_overrides, outage_file, patches_for, run_env

ENTRY_MODULE = "verl.trainer.main_ppo"
# Each entry's @hydra.main config: main_ppo's, and the SFT trainer's (npu_rl.launcher.sft).
DEFAULT_CONFIGS = {ENTRY_MODULE: "ppo_trainer", sft.ENTRY_MODULE: sft.CONFIG_NAME}
RUNTIME_ENV_PREFIX = "+ray_kwargs.ray_init.runtime_env.env_vars."


def config_name(recipe: Recipe) -> str:
    """verl's hydra config for the recipe's trainer and actor strategy (verl/trainer/config/<name>.yaml)."""
    if recipe.sft is not None:
        return sft.CONFIG_NAME
    return "ppo_megatron_trainer" if recipe.actor.strategy == "megatron" else "ppo_trainer"


@dataclass(frozen=True)
class LaunchSpec:
    recipe: str
    config_name: str
    argv: tuple[str, ...]
    # The driver's environment (on top of the caller's os.environ) and, through the
    # runtime_env overrides in argv, every Ray worker's.
    env: Mapping[str, str]
    patches: tuple[str, ...]
    start_step: int | None
    log_dir: Path
    attest_file: Path | None  # the Ray workers' patch report (None: an SFT launch, whose ranks are torchrun's)
    consistency_file: Path | None = None  # the consistency gate's verdicts (recipes with the gate)
    outage_file: Path | None = None  # the code tool's verdict that the sandbox is down (recipes with the tool)
    rehearsal_report: Path | None = None
    notes: tuple[str, ...] = ()  # what the launch decided that a user should read (a damaged checkpoint)

    def dry_run_text(self) -> str:
        reach = (
            "every Ray worker gets the runtime_env env_vars in argv"
            if self.attest_file is not None
            else "torchrun's ranks inherit the environment"
        )
        lines = [
            f"# npu-rl launch of {self.recipe}: verl config {self.config_name}, patches "
            f"{','.join(self.patches) or 'none'}; {reach}"
        ]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(self.env.items())]
        lines.append(" \\\n    ".join(shlex.quote(c) for c in self.argv))
        return "\n".join(lines)


def hydra_args(argv: Sequence[str]) -> tuple[str, list[str]]:
    """(config name, overrides) of a ``python -m verl.trainer.main_ppo`` argv (or of the SFT trainer's under
    torchrun), read as hydra reads it."""
    argv = list(argv)
    entry = next((a for a in argv if a in DEFAULT_CONFIGS), None)
    if entry is None:
        raise ValueError(f"not a {' or '.join(DEFAULT_CONFIGS)} command: {shlex.join(argv)}")
    rest = argv[argv.index(entry) + 1 :]
    name, overrides, i = DEFAULT_CONFIGS[entry], [], 0  # the entry's @hydra.main default
    while i < len(rest):
        arg = rest[i]
        if arg in ("--config-name", "-cn"):
            name, i = rest[i + 1], i + 2
            continue
        if arg.startswith("--config-name="):
            name = arg.split("=", 1)[1]
        else:
            overrides.append(arg)
        i += 1
    return name, overrides


def cluster_nodes(recipe: Recipe) -> list[dict[str, float]]:
    """The custom resources of each node of the recipe's cluster, as `npu-rl ray head|worker` register them
    (on CPU the ``--devices`` count registers worker slots, see npu_rl.patches.cpu_platform)."""
    res = recipe.resources
    return [registered_resources(res.devices_per_node) for _ in range(res.nnodes)]


def build_launch(recipe: Recipe, *, python: str | None = None, rehearse: bool = False) -> LaunchSpec:
    """The one launch of ``recipe``; ``rehearse`` stops verl where devices would be allocated."""
    if recipe.sft is not None:
        return _sft_launch(recipe, python, rehearse)
    start_step, resume_from, restart, notes = _resume_point(recipe)
    log_dir = run_files.log_root(recipe)
    attest_file = log_dir / "workers.json"
    patches = [*patches_for(recipe), "attest"]
    env = run_env(recipe, start_step)
    env[ATTEST_ENV] = str(attest_file)
    consistency_file = None
    if recipe.consistency_gated:
        consistency_file = log_dir / "consistency.json"
        env[FILE_ENV] = str(consistency_file)
    report = None
    if rehearse:
        report = log_dir / "rehearsal.json"
        patches.append("rehearse")  # last: its hooks run after the others'
        env[REPORT_ENV] = str(report)
        env[NODES_ENV] = json.dumps(cluster_nodes(recipe))
    env.update(env_for(patches))
    name = config_name(recipe)
    runtime = [f"{RUNTIME_ENV_PREFIX}{k}={quoted(v)}" for k, v in sorted(env.items())]
    argv = (
        python or sys.executable,
        "-m",
        ENTRY_MODULE,
        "--config-name",
        name,
        *build_overrides(recipe, resume_from, restart),
        *runtime,
    )
    return LaunchSpec(
        recipe=recipe.name,
        config_name=name,
        argv=argv,
        env=dict(env),
        patches=tuple(patches),
        start_step=start_step,
        log_dir=log_dir,
        attest_file=attest_file,
        consistency_file=consistency_file,
        outage_file=outage_file(recipe) if recipe.tools.code_interpreter.enabled else None,
        rehearsal_report=report,
        notes=tuple(notes),
    )


def _sft_launch(recipe: Recipe, python: str | None, rehearse: bool) -> LaunchSpec:
    """An SFT recipe's launch (npu_rl.launcher.sft): torchrun's ranks, no Ray, the same resume and files."""
    start_step, resume_from, restart, notes = _resume_point(recipe)
    patches = sft.patches_for(recipe)
    env = run_env(recipe, start_step)
    report = None
    if rehearse:
        report = run_files.log_root(recipe) / "rehearsal.json"
        patches.append("rehearse")  # last: the ranks past the first leave once the others are installed
        env[REPORT_ENV] = str(report)
        env[RANKS_LEAVE_ENV] = "1"
    env.update(env_for(patches))
    argv = (
        python or sys.executable,
        "-m",
        sft.TORCHRUN,
        *sft.torchrun_args(recipe),
        "-m",
        sft.ENTRY_MODULE,
        *sft.sft_overrides(recipe, resume_from, restart),
    )
    return LaunchSpec(
        recipe=recipe.name,
        config_name=sft.CONFIG_NAME,
        argv=argv,
        env=dict(env),
        patches=tuple(patches),
        start_step=start_step,
        log_dir=run_files.log_root(recipe),
        attest_file=None,
        rehearsal_report=report,
        notes=tuple(notes),
    )


def _resume_point(recipe: Recipe) -> tuple[int | None, Path | None, bool, list[str]]:
    """(start step, checkpoint to resume, start afresh, notes): the newest complete checkpoint, named
    explicitly, because verl's own choice (latest_checkpointed_iteration.txt) may be a damaged one."""
    if recipe.checkpoint.resume != "auto":
        return None, None, False, []
    start = run_files.latest_step(recipe)
    notes = [f"skipping damaged global_step_{s}: {problem}" for s, problem in run_files.damaged_steps(recipe)]
    if start is not None:
        return start, run_files.step_dir(recipe, start), False, notes
    if notes:
        notes.append("no complete checkpoint: training starts from step 0")
    return None, None, bool(notes), notes
