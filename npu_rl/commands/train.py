"""`npu-rl train --recipe R [--dry-run]`: GRPO with verl; re-running resumes."""

from __future__ import annotations

import argparse
import sys

from ..errors import UserError
from . import options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a recipe with verl GRPO (resumes from the latest checkpoint)",
        **options.examples(
            "npu-rl train --recipe tiny_math_cpu --prepare   # on the CPU, once `npu-rl model tiny` made its model",
            "npu-rl train --recipe qwen2_5_1_5b_math_a2_1card --dry-run",
        ),
    )
    options.add_recipe(p)
    p.add_argument("--dry-run", action="store_true", help="print the environment and verl command, run nothing")
    p.add_argument(
        "--rehearse",
        action="store_true",
        help="run the launch through verl up to where devices would be allocated (a local Ray; an SFT recipe: "
        "torchrun on this host)",
    )
    p.add_argument(
        "--prepare",
        action="store_true",
        help="first fetch the model, convert the data and weights where missing (as `npu-rl prepare`)",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="show verl's and Ray's whole output instead of the progress line (also: NPU_RL_VERBOSE=1); "
        "it is always kept in the run's console.log",
    )
    p.add_argument(
        "--merge",
        nargs="?",
        type=int,
        const=True,  # --merge alone: the newest checkpoint (argparse would pass a string const through int())
        default=None,
        metavar="STEP",
        help="once training finishes, merge the newest checkpoint (or global_step_STEP) as `npu-rl merge` does: "
        "an SFT stage's pod leaves the model its RL recipe's model.path reads",
    )
    options.add_ray_port(p, "GCS port of the local Ray head (default: a free one)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.merge is not None and (args.dry_run or args.rehearse):
        raise UserError("--merge merges what a training run saved: --dry-run and --rehearse train nothing")
    recipe = options.load(args)
    if args.dry_run:
        from ..launcher.preflight import check_graphs  # lazy: the job
        from ..launcher.spec import build_launch  # lazy: the job

        spec = build_launch(recipe)
        # The recipe's own checks that need no host: a rollout whose largest decode batches would silently
        # run eager is refused here too, not only minutes into the run.
        check_graphs(recipe)
        print(spec.dry_run_text())
        return 0
    if args.prepare:
        from ..launcher.prepare import prepare  # lazy: the job

        prepare(recipe)
    if args.rehearse:
        from ..launcher.rehearsal import run_rehearsal  # lazy: the job

        print(run_rehearsal(recipe).text())
        return 0
    from ..cluster import proctree  # lazy: the job
    from ..launcher.train import run_training  # lazy: the job

    try:
        with proctree.reaped(), proctree.signals_raise():
            result = run_training(recipe, ray_port=args.ray_port, verbose=args.verbose)
    except proctree.Terminated as stop:
        print(f"npu-rl: {stop}: stopped before training began", file=sys.stderr)
        return stop.exit_code
    if result.error:
        print(f"npu-rl: error: {result.error} (console log: {result.log_file})", file=sys.stderr)
    elif result.exit_code != 0:  # a signal ended it: the stop was asked for, nothing failed
        print(
            f"npu-rl: training stopped (exit code {result.exit_code}); checkpoints up to step "
            f"{result.end_step} are kept, re-run to resume (console log: {result.log_file})"
        )
    if result.exit_code == 0 and args.merge is not None:
        from ..launcher.merge import merge  # lazy: the job

        print(f"merged model: {merge(recipe, None if args.merge is True else args.merge)}")
    return result.exit_code
