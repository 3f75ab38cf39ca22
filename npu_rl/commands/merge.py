"""`npu-rl merge --recipe R [--step N]`: FSDP shards -> a Hugging Face model directory."""

from __future__ import annotations

import argparse

from ..recipe import load_recipe, parse_set_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("merge", help="merge a checkpoint's FSDP shards into a Hugging Face model")
    p.add_argument("--recipe", required=True)
    p.add_argument("--set", action="append", metavar="KEY=VALUE")
    p.add_argument("--step", type=int, default=None, help="global step to merge (default: latest)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..launcher.merge import merge

    recipe = load_recipe(args.recipe, parse_set_args(args.set))
    out = merge(recipe, args.step)
    print(f"merged model: {out}")
    return 0
