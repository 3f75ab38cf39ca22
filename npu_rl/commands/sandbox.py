"""`npu-rl sandbox serve`: run policy-written code where it can do no harm, over SandboxFusion's API."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import UserError
from ..paths import SANDBOX_PYTHON_ENV as PYTHON_ENV
from ..paths import sandbox_python
from . import options
from .argtypes import port, positive_int

DEFAULT_PORT = 8080  # SandboxFusion's


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sandbox",
        help="serve a hardened code sandbox (SandboxFusion's /run_code) for code RL and tool-calling agents",
        **options.examples(
            "npu-rl sandbox serve   # http://127.0.0.1:8080/run_code",
            "npu-rl sandbox serve --host 0.0.0.0 --slots 8 --queue 64   # in its container",
        ),
    )
    ssub = options.subcommands(p, "ACTION")
    s = ssub.add_parser(
        "serve",
        help="serve /run_code, /v1/ping and /health until SIGTERM",
        description="Run each request's code in a bubblewrap jail of its own (no network, no host files, "
        "its own processes, limits), behind SandboxFusion's API; docs/sandbox.md.",
        **options.examples(
            "npu-rl sandbox serve --port 8080",
            "npu-rl sandbox serve --host 0.0.0.0 --slots 8 --queue 64   # in its container",
        ),
    )
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 in its container)")
    s.add_argument("--port", type=port, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT} (SandboxFusion's)")
    s.add_argument("--slots", type=positive_int, default=min(os.cpu_count() or 1, 8), help="executions at once")
    s.add_argument("--queue", type=int, default=None, help="requests waiting for a slot before 503 (default 8 x slots)")
    s.add_argument(
        "--python",
        default=None,
        help=f"the code's interpreter (default ${PYTHON_ENV}, else the checkout's .venv-sandbox: make sandbox-venv)",
    )
    s.add_argument("--max-run-timeout", type=float, default=60.0, help="the most run_timeout a request may ask, s")
    s.add_argument("--memory-mb", type=positive_int, default=1024, help="memory of a request sending -1, MiB")
    s.add_argument("--max-memory-mb", type=positive_int, default=4096, help="the most memory_limit_MB, MiB")
    s.add_argument("--max-procs", type=positive_int, default=64, help="processes of one execution")
    s.add_argument("--disk-mb", type=positive_int, default=64, help="the working directory's and /tmp's size, MiB")
    s.add_argument("--output-kb", type=positive_int, default=1024, help="stdout and stderr each, KiB, then cut")
    s.add_argument("--uid-base", type=positive_int, default=61000, help="host user of slot 0; slot n runs as +n")
    s.set_defaults(func=_serve)


def _python(args: argparse.Namespace) -> str:
    python = args.python or sandbox_python()
    if python is None:
        raise UserError(f"sandbox: no interpreter for the code: make sandbox-venv, or --python PATH (${PYTHON_ENV})")
    return python


def _serve(args: argparse.Namespace) -> int:
    from ..sandbox import jail as jails  # lazy: the job
    from ..sandbox.execute import Executor, running_as  # lazy: the job
    from ..sandbox.probe import isolation_fault  # lazy: the job
    from ..sandbox.request import Caps  # lazy: the job
    from ..sandbox.service import Service, serve  # lazy: the job

    queue = 8 * args.slots if args.queue is None else args.queue
    if queue < 0:
        raise UserError(f"--queue must be 0 or more (got {queue})")
    if not 0 < args.max_run_timeout <= 3600:
        raise UserError(f"--max-run-timeout must be within (0, 3600] s (got {args.max_run_timeout:g})")
    caps = Caps(
        max_run_timeout=args.max_run_timeout,
        default_memory_mb=args.memory_mb,
        max_memory_mb=max(args.max_memory_mb, args.memory_mb),
        max_procs=args.max_procs,
        disk_mb=args.disk_mb,
        output_bytes=args.output_kb << 10,
    )
    python = _python(args)
    if not Path(python).exists():
        raise UserError(f"sandbox: the code's interpreter {python} does not exist")
    try:
        jail = jails.make(python, uid_base=args.uid_base)
    except jails.JailUnavailable as e:
        raise UserError(f"sandbox: {e}") from None

    taken = [jail.uid(slot) for slot in range(args.slots) if running_as(jail.uid(slot))]
    if taken:
        # A slot's user is its alone: the service kills what runs as it after each execution.
        raise UserError(
            f"sandbox: user {taken[0]} of slot {taken[0] - args.uid_base} already runs processes here (another "
            "sandbox service?); give this one users of its own: --uid-base N"
        )
    fault = isolation_fault(jail, caps)
    if fault:
        raise UserError(f"sandbox: no execution can be isolated here, so none is run: {fault}")

    def ready(url: str) -> None:
        print(
            f"npu-rl sandbox: serving {url}/run_code (SandboxFusion's API), /health; {args.slots} slots, "
            f"{queue} queued; code runs with {python} in bubblewrap {jail.bwrap}",
            flush=True,
        )

    service = Service(Executor(jail, caps, args.slots), caps, args.slots, queue)
    code = serve(service, args.host, args.port, ready)
    print(f"npu-rl sandbox: stopped (signal {code - 128}); every execution it started ended", flush=True)
    return code
