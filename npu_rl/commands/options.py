"""The arguments and subcommand layout every `npu-rl` job shares, declared once."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Any

from ..platform import cpu_isa
from ..recipe import load_recipe, parse_set_args
from .argtypes import port

RECIPE_HELP = "recipe name (configs/recipes) or YAML path"


def add_recipe(
    p: argparse.ArgumentParser, required: bool = True, default: str | None = None, help: str = RECIPE_HELP
) -> None:
    """``--recipe`` and the ``--set`` overrides that go with it wherever a recipe is read."""
    p.add_argument("--recipe", required=required, default=default, help=help)
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a recipe field (dotted)")


def load(args: argparse.Namespace) -> Any:
    """The recipe of ``add_recipe``'s arguments, with its overrides; None where none was given."""
    if not args.recipe:
        return None
    return load_recipe(args.recipe, parse_set_args(args.set))


def examples(*lines: str) -> dict[str, Any]:
    """``add_parser`` keywords that end a job's ``--help`` with its examples, one command line each
    (``npu-rl ...``, a trailing ``# comment`` allowed), laid out as written."""
    return {
        "epilog": "examples:\n" + "\n".join(f"  {line}" for line in lines),
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }


def subcommands(p: argparse.ArgumentParser, metavar: str) -> argparse._SubParsersAction:
    """The one way a job has subcommands (`npu-rl model tiny`): each sets ``func`` itself."""
    sub = p.add_subparsers(dest="subcommand", metavar=metavar)
    sub.required = True
    return sub


def add_ray_port(p: argparse.ArgumentParser, help: str, old_spellings: tuple[str, ...] = ()) -> None:
    """``--ray-port``: the Ray head's GCS port, in every job that talks to Ray."""
    p.add_argument("--ray-port", *old_spellings, dest="ray_port", type=port, default=None, help=help)


def replayed(args: argparse.Namespace) -> list[str]:
    """The options that give ``args`` again under ``args.parser``, the parser of the (sub)command that made
    them (its ``set_defaults(parser=...)``)."""
    argv: list[str] = []
    for action in args.parser._actions:
        value = getattr(args, action.dest, None)
        if not action.option_strings or action.dest == "help" or value is None:
            continue
        flag = action.option_strings[0]
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            argv += [flag] if value != action.default else []
            continue
        for item in value if isinstance(value, list) else [value]:
            argv += [flag, str(item)]
    return argv


def rerun_under_isa(args: argparse.Namespace, command: list[str], line: str | None) -> int | None:
    """The job's exit code, run again by a new `npu-rl` process under the line's instruction-set pins where
    this one lacks any (torch reads them only as it loads: npu_rl.platform.cpu_isa); None: this process has
    them and runs the job itself."""
    pins = cpu_isa.missing(line)
    if not pins:
        return None
    argv = [sys.executable, "-m", "npu_rl", *command, *replayed(args)]
    return subprocess.run(argv, env={**os.environ, **pins}).returncode
