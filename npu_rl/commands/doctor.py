"""`npu-rl doctor --recipe R [--job train|merge|eval]`: the preflight checks as a table."""

from __future__ import annotations

import argparse

from ..recipe import load_recipe, parse_set_args
from .argtypes import port

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check that this host can run a recipe (devices, CANN, memory, disk, data)")
    p.add_argument("--recipe", required=True, help="recipe name (configs/recipes) or YAML path")
    p.add_argument("--job", choices=["train", "merge", "eval"], default="train", help="which job to check for")
    p.add_argument("--port", type=port, action="append", default=[], help="also require this port to be free")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a recipe field (dotted)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from ..platform.doctor import run_checks

    recipe = load_recipe(args.recipe, parse_set_args(args.set))
    results = run_checks(recipe, args.job, ports=args.port)
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
