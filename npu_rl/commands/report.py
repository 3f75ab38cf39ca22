"""`npu-rl report`: the health report of a run, with an exit code a scheduler can alert on
(0 healthy, 1 warnings, 2 critical)."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import options


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="training-health report of a run (exit 0 healthy, 1 warnings, 2 critical)")
    p.add_argument(
        "--run", type=Path, help="run directory with TensorBoard event files / verl JSONL (default: the recipe's log root)"
    )
    p.add_argument("--out", type=Path, help="output directory (default: <run>/report)")
    options.add_recipe(p, required=False, help="the run's recipe: rules that do not apply to its settings are skipped")
    p.add_argument("--thresholds", type=Path, help="YAML overriding npu_rl/report/thresholds.yaml")
    p.add_argument("--eval-table", type=Path, help="eval_table.csv of `npu-rl eval` (default: newest under --run)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..errors import UserError
    from ..launcher.run_files import log_root
    from ..report import build_report

    if args.run is None and args.recipe is None:
        raise UserError("give --run DIR, or --recipe R to report on that recipe's run")
    recipe = options.load(args)
    run_dir = args.run or log_root(recipe)
    report = build_report(run_dir, args.out, args.thresholds, recipe=recipe, eval_table=args.eval_table)
    print(report.to_markdown(), end="")
    print(f"report: {report.html} ({len(report.plots)} plots)")
    return report.exit_code
