"""`npu-rl dashboard --run DIR | --recipe R [--tensorboard] [--swanlab]`: the run's TensorBoard and SwanLab."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..dashboards import DEFAULT_HOST, KINDS, PORTS, log_tail, plan, serve, wait_for_logs
from ..errors import UserError
from ..run_files import log_root
from . import options
from .argtypes import port


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dashboard",
        help="serve a run's TensorBoard and SwanLab (local) dashboards",
        **options.examples(
            "npu-rl dashboard --recipe tiny_math_cpu",
            "npu-rl dashboard --run logs/verl_grpo_example_math/qwen2_5_1_5b_math --tensorboard",
        ),
    )
    p.add_argument("--run", type=Path, help="run directory (default: the recipe's log root)")
    options.add_recipe(p, required=False, help="the run's recipe (instead of --run)")
    p.add_argument("--tensorboard", action="store_true", help="serve TensorBoard (default: both)")
    p.add_argument("--swanlab", action="store_true", help="serve SwanLab's local dashboard (default: both)")
    p.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST}; 0.0.0.0 inside a container)"
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="wait for the run's log folders to appear instead of failing (compose services)",
    )
    p.add_argument("--tensorboard-port", type=port, default=PORTS["tensorboard"])
    p.add_argument("--swanlab-port", type=port, default=PORTS["swanlab"])
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..cluster import proctree  # lazy: the job

    if args.run is None and args.recipe is None:
        raise UserError("give --run DIR, or --recipe R to serve that recipe's run")
    if args.run is not None and args.recipe is not None:
        raise UserError("give --run DIR or --recipe R, not both")
    run_dir = (args.run or log_root(options.load(args))).resolve()
    kinds = tuple(k for k in KINDS if getattr(args, k))
    ports = {"tensorboard": args.tensorboard_port, "swanlab": args.swanlab_port}
    # A stop (SIGTERM from compose or a scheduler, Ctrl-C) ends the servers too, waiting included.
    try:
        with proctree.signals_raise():
            if args.wait:
                wait_for_logs(run_dir, kinds or KINDS)
            dashboards = plan(run_dir, kinds, args.host, ports)
            with serve(run_dir, dashboards) as procs:
                print("serving until stopped (Ctrl-C)", flush=True)
                while all(p.poll() is None for p in procs):
                    time.sleep(1)
                d, p = next((d, p) for d, p in zip(dashboards, procs) if p.poll() is not None)
                raise UserError(f"{d.kind} exited with code {p.returncode}: {log_tail(run_dir, d.kind)}")
    except proctree.Terminated as stop:
        return stop.exit_code
