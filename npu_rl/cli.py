"""`npu-rl` command line. Each job lives in ``npu_rl/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` to a callable
taking the parsed args and returning an exit code."""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import UserError

# One module per job; adding a job means adding its module here.
COMMAND_MODULES = [
    "npu_rl.commands.train",
    "npu_rl.commands.merge",
    "npu_rl.commands.eval",
    "npu_rl.commands.report",
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
        print(f"npu-rl: error: {self.prog.removeprefix('npu-rl').strip() or 'npu-rl'}: {message} "
              f"(see `{self.prog} --help`)", file=sys.stderr)
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
            # A job whose module is not installed in this image (e.g. image build without docker SDK)
            # should not take the whole CLI down.
            if err.name and err.name.startswith("npu_rl"):
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as err:
        print(f"npu-rl: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("npu-rl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
