"""`npu-rl doctor --recipe R [--job train|merge|eval]`: the preflight checks as a table, this host's
(npu_rl.platform.doctor) and then the job's own (npu_rl.launcher.preflight)."""

from __future__ import annotations

import argparse

from . import options
from .argtypes import port

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="check that this host can run a recipe (devices, CANN, memory, disk, data)",
        **options.examples(
            "npu-rl doctor --recipe qwen2_5_1_5b_math_a2_1card",
            "npu-rl doctor --recipe qwen2_5_1_5b_math_a2_1card --job eval --free-port 6006",
        ),
    )
    options.add_recipe(p)
    p.add_argument("--job", choices=["train", "merge", "eval"], default="train", help="which job to check for")
    # Not --ray-port: any port the job needs, which is why it may be given several times.
    p.add_argument(
        "--free-port",
        "--port",
        dest="free_ports",
        type=port,
        action="append",
        default=[],
        metavar="PORT",
        help="also require this port to be free (repeatable)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console  # lazy: the job
    from rich.markup import escape  # lazy: the job
    from rich.table import Table  # lazy: the job

    from ..launcher.preflight import run_checks  # lazy: the job

    recipe = options.load(args)
    results = run_checks(recipe, args.job, ports=args.free_ports)
    table = Table(title=f"npu-rl doctor: {recipe.name} ({args.job}, {recipe.resources.platform})")
    for column in ("check", "status", "detail"):
        table.add_column(column)
    for r in results:
        table.add_row(r.name, f"[{_STYLE[r.status]}]{r.status}[/]", escape(r.detail))
    console = Console()
    console.print(table)
    failed = [r for r in results if r.status == "fail"]
    for r in failed:
        console.print(f"[bold red]fix[/] {r.name}: {escape(r.fix)}", highlight=False, soft_wrap=True)
    return 1 if failed else 0
