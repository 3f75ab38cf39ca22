"""`npu-rl` command line. Each job lives in ``npu_rl/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
taking the parsed args and returning an exit code. Shared arguments and the
subcommand layout are in ``npu_rl/commands/options.py``, shared defaults in
``npu_rl/defaults.py``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .commands.missing import MissingDependency, third_party
from .errors import UserError
from .exit_codes import Exit

# One module per job; adding a job means adding its module here.
COMMAND_MODULES = [
    "npu_rl.commands.train",
    "npu_rl.commands.merge",
    "npu_rl.commands.eval",
    "npu_rl.commands.report",
    "npu_rl.commands.dashboard",
    "npu_rl.commands.model",
    "npu_rl.commands.data",
    "npu_rl.commands.prepare",
    "npu_rl.commands.recipe",
    "npu_rl.commands.render",
    "npu_rl.commands.ray",
    "npu_rl.commands.doctor",
    "npu_rl.commands.image",
]


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are the CLI's one line (subcommand parsers inherit the class)."""

    def error(self, message: str):
        print(
            f"npu-rl: error: {self.prog.removeprefix('npu-rl').strip() or 'npu-rl'}: {message} "
            f"(see `{self.prog} --help`)",
            file=sys.stderr,
        )
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="npu-rl", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"npu-rl {__import__('npu_rl').__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            missing = third_party(err)
            if missing is None:
                raise
            # The other jobs still work; this one says what to install instead of vanishing.
            _unavailable(sub, name.rpartition(".")[2], missing)
            continue
        module.register(sub)
    return parser


def _unavailable(sub: argparse._SubParsersAction, job: str, module: str) -> None:
    # No option prefix: whatever follows the job's name is taken as is, and the job says what it needs.
    p = sub.add_parser(job, help=f"(unavailable: needs {module})", add_help=False, prefix_chars="\0")
    p.add_argument("rest", nargs="*")

    def fail(args: argparse.Namespace) -> int:
        raise MissingDependency(job, module)

    p.set_defaults(func=fail)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        try:
            return int(args.func(args) or 0)
        except ModuleNotFoundError as err:
            missing = third_party(err)
            if missing is None:
                raise
            raise MissingDependency(args.command, missing) from None
    except UserError as err:
        print(f"npu-rl: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("npu-rl: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of the output went away (`npu-rl report ... | head`): stop quietly, as a Unix tool
        # does; stdout goes to /dev/null so that the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return Exit.PIPE_CLOSED


if __name__ == "__main__":
    raise SystemExit(main())
