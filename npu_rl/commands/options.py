"""The arguments and subcommand layout every `npu-rl` job shares, declared once."""

from __future__ import annotations

import argparse
from typing import Any

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
