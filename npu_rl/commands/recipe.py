"""`npu-rl recipe validate|show`: check a recipe without running anything."""

from __future__ import annotations

import argparse

import yaml

from . import options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("recipe", help="validate or show a recipe")
    rsub = options.subcommands(p, "ACTION")
    v = rsub.add_parser("validate", help="check the recipe against the schema")
    options.add_recipe(v)
    v.set_defaults(func=_validate)
    s = rsub.add_parser("show", help="print the recipe with every default filled in")
    options.add_recipe(s)
    s.set_defaults(func=_show)


def _validate(args: argparse.Namespace) -> int:
    print(f"recipe {options.load(args).name}: ok")
    return 0


def _show(args: argparse.Namespace) -> int:
    print(yaml.safe_dump(options.load(args).model_dump(mode="json"), sort_keys=False), end="")
    return 0
