"""`npu-rl report`: the health report of a run, with an exit code a scheduler can alert on
(0 healthy, 1 warnings, 2 critical); `--compare BASE RUN` sets a run beside a baseline instead
(0 within tolerance, 1 a tolerance exceeded, 2 bad input)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UserError
from ..recipe import load_recipe, parse_set_args
from ..run_files import log_root
from . import options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="training-health report of a run (exit 0 healthy, 1 warnings, 2 critical)",
        **options.examples(
            "npu-rl report --recipe qwen2_5_1_5b_math_a2_1card   # the recipe's run, under logs/",
            "npu-rl report --compare baseline-run/ qwen2_5_1_5b_math_a2_1card   # an earlier run vs the recipe's",
        ),
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--run",
        type=Path,
        help="run directory with TensorBoard event files / verl JSONL (default: the recipe's log root)",
    )
    which.add_argument(
        "--compare",
        nargs=2,
        metavar=("BASE", "RUN"),
        help="compare RUN with BASE (each a run directory, or a recipe for its log root) against the tolerances "
        "of thresholds.yaml `compare` (exit 0 within, 1 exceeded)",
    )
    p.add_argument(
        "--out", type=Path, help="output directory (default: <run>/report; with --compare: <RUN>/report/compare)"
    )
    options.add_recipe(
        p,
        required=False,
        help="the run's recipe: rules that do not apply to its settings are skipped "
        "(with --compare: the recipe of BASE and RUN where they are directories)",
    )
    p.add_argument("--thresholds", type=Path, help="YAML overriding npu_rl/report/thresholds.yaml")
    p.add_argument("--eval-table", type=Path, help="eval_table.csv of `npu-rl eval` (default: newest under --run)")
    p.add_argument(
        "--force", action="store_true", help="with --compare: compare runs of different recipes or conditions"
    )
    p.add_argument(
        "--learning",
        action="store_true",
        help="with --compare: only what the runs learnt (training reward, validation accuracy), for a "
        "BASE from another machine or day whose speed and memory say nothing",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..report import build_report  # lazy: the job

    if args.compare:
        return compare(args)
    if args.force or args.learning:
        raise UserError(f"{'--force' if args.force else '--learning'} goes with --compare")
    if args.run is None and args.recipe is None:
        raise UserError("give --run DIR, or --recipe R to report on that recipe's run")
    recipe = options.load(args)
    run_dir = args.run or log_root(recipe)
    report = build_report(run_dir, args.out, args.thresholds, recipe=recipe, eval_table=args.eval_table)
    print(report.to_markdown(), end="")
    print(f"report: {report.html} ({len(report.plots)} plots)")
    return report.exit_code


def _run_and_recipe(arg: str, recipe, args: argparse.Namespace):
    """A --compare operand: a run directory (its recipe: --recipe), or a recipe, whose log root is the run."""
    path = Path(arg)
    if path.is_dir():
        return path, recipe
    if path.suffix not in (".yaml", ".yml") and (path.exists() or "/" in arg):
        raise UserError(f"run directory not found: {arg}")
    try:
        named = load_recipe(arg, parse_set_args(args.set))
    except UserError as err:
        raise UserError(f"run not found: {arg} is neither a run directory nor a recipe ({err})") from None
    return log_root(named), named


def compare(args: argparse.Namespace) -> int:
    from ..report.compare import compare_runs  # lazy: the job

    if args.eval_table:
        raise UserError("--eval-table does not go with --compare")
    recipe = options.load(args)
    (base_dir, base_recipe), (run_dir, run_recipe) = (_run_and_recipe(a, recipe, args) for a in args.compare)
    comp = compare_runs(
        base_dir,
        run_dir,
        args.thresholds,
        base_recipe=base_recipe,
        run_recipe=run_recipe,
        out_dir=args.out,
        force=args.force,
        learning=args.learning,
    )
    print(comp.to_markdown(), end="")
    for line in comp.failure_lines():
        print(line)
    print(f"compare: {comp.html} ({len(comp.plots)} plots)")
    return comp.exit_code
