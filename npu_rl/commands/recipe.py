"""`npu-rl recipe validate|show|explain`: check a recipe, or read its documented schema, without running
anything."""

from __future__ import annotations

import argparse

import yaml

from ..errors import UserError
from . import options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "recipe",
        help="validate, show or explain a recipe",
        **options.examples(
            "npu-rl recipe validate --recipe qwen2_5_1_5b_math_a2_1card",
            "npu-rl recipe explain algorithm",
        ),
    )
    rsub = options.subcommands(p, "ACTION")
    v = rsub.add_parser(
        "validate",
        help="check the recipe against the schema",
        **options.examples(
            "npu-rl recipe validate --recipe qwen2_5_1_5b_math_a2_1card",
            "npu-rl recipe validate --recipe my_recipe.yaml --set algorithm.lr=2e-6",
        ),
    )
    options.add_recipe(v)
    v.set_defaults(func=_validate)
    s = rsub.add_parser(
        "show",
        help="print the recipe with every default filled in",
        **options.examples(
            "npu-rl recipe show --recipe tiny_math_cpu",
            "npu-rl recipe show --recipe qwen2_5_1_5b_math_a2_1card --set resources.devices_per_node=2",
        ),
    )
    options.add_recipe(s)
    s.set_defaults(func=_show)
    e = rsub.add_parser(
        "explain",
        help="print the documented recipe schema (with --recipe: its values too)",
        **options.examples(
            "npu-rl recipe explain algorithm   # one section's fields and defaults",
            "npu-rl recipe explain --recipe qwen2_5_1_5b_math_a2_1card algorithm.lr",
        ),
    )
    options.add_recipe(e, required=False, help=f"{options.RECIPE_HELP}: show its values beside the defaults")
    e.add_argument("field", nargs="?", metavar="FIELD", help="dotted field or section to narrow to (algorithm.lr)")
    e.set_defaults(func=_explain)


def _validate(args: argparse.Namespace) -> int:
    print(f"recipe {options.load(args).name}: ok")
    return 0


def _show(args: argparse.Namespace) -> int:
    print(yaml.safe_dump(options.load(args).model_dump(mode="json"), sort_keys=False), end="")
    return 0


def _explain(args: argparse.Namespace) -> int:
    from ..recipe.explain import render  # lazy: the job

    if args.set and not args.recipe:
        raise UserError("recipe explain: --set needs --recipe (the recipe whose fields it overrides)")
    print(render(args.field, options.load(args)))
    return 0
