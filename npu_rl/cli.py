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
from .commands.options import examples
from .console.noise import quiet_warnings
from .errors import UserError
from .exit_codes import Exit
from .paths import recipes_dir

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
    "npu_rl.commands.sandbox",
]

# `npu-rl --help`: what the tool is for, to its user (the module docstring above is for developers).
DESCRIPTION = """\
Reinforcement-learning (GRPO) training of LLMs with verl on Huawei Ascend NPUs (Atlas A2, A3),
and on the CPU for trying it out. A recipe says which model, data, algorithm and hardware a run
uses, and `npu-rl recipe explain` documents every field. Recipes shipped in configs/recipes:
  {recipes}
or give the path of a YAML file of your own.

The usual flow for a recipe R (each command takes --recipe R):
  prepare   fetch the model, convert the data (and weights) where missing
  train     GRPO on verl; re-running resumes from the latest checkpoint
  merge     turn a checkpoint into a Hugging Face model
  eval      score the base model and a trained step on MATH, as one table
  report    the run's training health (exit 0 healthy, 1 warnings, 2 critical)

Every command's --help ends with examples."""


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
    parser = _Parser(
        prog="npu-rl",
        description=DESCRIPTION.format(recipes=", ".join(sorted(p.stem for p in recipes_dir().glob("*.yaml")))),
        **examples(
            "npu-rl model tiny --out models/tiny-qwen2   # on the CPU: first a tiny random model,",
            "npu-rl train --recipe tiny_math_cpu --prepare   # then GRPO on the bundled MATH sample",
            "npu-rl train --recipe qwen2_5_1_5b_math_a2_1card --prepare   # Qwen2.5-1.5B on MATH, one Atlas A2 NPU",
        ),
    )
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
    _describe(parser)
    return parser


def _describe(parser: argparse.ArgumentParser) -> None:
    """A job's own --help opens with the line its parent's list shows for it, unless it has its own."""
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        helps = {a.dest: a.help for a in getattr(action, "_choices_actions", [])}
        for name, child in getattr(action, "choices", {}).items():
            if child.description is None and helps.get(name):
                child.description = helps[name][0].upper() + helps[name][1:] + "."
            _describe(child)


def _unavailable(sub: argparse._SubParsersAction, job: str, module: str) -> None:
    # No option prefix: whatever follows the job's name is taken as is, and the job says what it needs.
    p = sub.add_parser(job, help=f"(unavailable: needs {module})", add_help=False, prefix_chars="\0")
    p.add_argument("rest", nargs="*")

    def fail(args: argparse.Namespace) -> int:
        raise MissingDependency(job, module)

    p.set_defaults(func=fail)


def main(argv: list[str] | None = None) -> int:
    quiet_warnings()
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
