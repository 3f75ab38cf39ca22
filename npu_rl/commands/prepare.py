"""`npu-rl prepare --recipe R`: fetch the model, convert the data and (megatron) the weights
the recipe reads; each step is skipped when its output is already there."""

from __future__ import annotations

import argparse

from . import options
from .data import source_path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prepare",
        help="put the recipe's model, data and converted weights in place (skips what exists)",
        **options.examples(
            "npu-rl prepare --recipe qwen2_5_1_5b_math_a2_1card --dry-run",
            "npu-rl prepare --recipe qwen2_5_1_5b_math_a2_1card --model-source /mnt/share/Qwen2.5-1.5B-Instruct",
        ),
    )
    options.add_recipe(p)
    # Empty values mean "not given", so compose can pass unset variables straight through.
    p.add_argument(
        "--model-source",
        default=None,
        metavar="HUB_ID_OR_DIR",
        help="where to fetch the model from when it is missing (default: model.hub_id)",
    )
    p.add_argument(
        "--data-source",
        default=None,
        metavar="DIR",
        help="raw MATH-lighteval parquet directory, or 'sample' (default: data.source_dir, else the hub)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print what would be fetched, converted and run (the weight-conversion commands), run nothing",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..launcher.prepare import prepare  # lazy: the job

    recipe = options.load(args)
    if args.dry_run:
        from ..launcher.prepare import describe  # lazy: the job

        print("\n".join(describe(recipe)))
        return 0
    prepare(recipe, model_source=args.model_source or None, data_source=source_path(args.data_source))
    return 0
