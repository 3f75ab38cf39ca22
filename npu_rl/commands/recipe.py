"""`npu-rl recipe validate|show`: check a recipe without running anything."""

from __future__ import annotations

import argparse

import yaml

from ..recipe import load_recipe, parse_set_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("recipe", help="validate or show a recipe")
    p.add_argument("action", choices=["validate", "show"])
    p.add_argument("--recipe", required=True, help="recipe name (configs/recipes) or YAML path")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a recipe field (dotted)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    recipe = load_recipe(args.recipe, parse_set_args(args.set))
    if args.action == "show":
        print(yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False), end="")
    else:
        print(f"recipe {recipe.name}: ok")
    return 0
