"""`npu-rl merge --recipe R [--step N]`: FSDP shards -> a Hugging Face model directory."""

from __future__ import annotations

import argparse

from . import options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "merge",
        help="merge a checkpoint's FSDP shards into a Hugging Face model",
        **options.examples(
            "npu-rl merge --recipe qwen2_5_1_5b_math_a2_1card   # the newest checkpoint",
            "npu-rl merge --recipe qwen2_5_1_5b_math_a2_1card --step 280",
        ),
    )
    options.add_recipe(p)
    p.add_argument("--step", type=int, default=None, help="global step to merge (default: latest)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..launcher.merge import merge  # lazy: the job

    recipe = options.load(args)
    out = merge(recipe, args.step)
    print(f"merged model: {out}")
    return 0
