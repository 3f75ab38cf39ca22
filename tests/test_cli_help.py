"""`npu-rl --help` describes the tool to its user, and every command's `--help` ends with examples
that the CLI itself accepts (parsed only: nothing runs)."""

from __future__ import annotations

import argparse
import shlex

import pytest

from npu_rl.cli import build_parser


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, parser) of the top-level parser and every command and sub-command under it."""
    yield path, parser
    if parser._subparsers is None:
        return
    for action in parser._subparsers._group_actions:
        for name, child in action.choices.items():
            if child.add_help:  # not a job whose package is missing (it parses whatever follows)
                yield from _parsers(child, (*path, name))


def _is_leaf(parser: argparse.ArgumentParser) -> bool:
    return parser._subparsers is None


def _examples(help_text: str) -> list[str]:
    """The command lines of the examples section that ends a help text ([] without one)."""
    head, sep, tail = help_text.rpartition("\nexamples:\n")
    if not sep:
        return []
    return [line.strip() for line in tail.splitlines() if line.strip()]


PARSERS = list(_parsers(build_parser()))


def test_the_top_level_help_is_for_a_user():
    text = build_parser().format_help()
    assert "npu_rl/commands" not in text and "``" not in text
    assert "GRPO" in text and "Ascend" in text and "CPU" in text
    assert "prepare" in text and "merge" in text and "report" in text
    assert "examples" in text and _examples(text)


def test_every_command_is_walked():
    leaves = {" ".join(path) for path, p in PARSERS if _is_leaf(p)}
    assert {"train", "merge", "eval", "report", "doctor", "prepare", "dashboard"} <= leaves
    assert {"ray head", "ray worker", "ray wait", "recipe explain", "render k8s", "image build"} <= leaves
    assert {"model tiny", "model fetch", "model fp8-cast", "data math", "data deepscaler"} <= leaves


@pytest.mark.parametrize("path,parser", PARSERS, ids=[" ".join(path) or "npu-rl" for path, _ in PARSERS])
def test_help_ends_with_examples_the_cli_accepts(path, parser, tmp_path, monkeypatch):
    # Some options make their output directory when parsed: let them make it here.
    monkeypatch.chdir(tmp_path)
    text = parser.format_help()
    lines = _examples(text)
    if _is_leaf(parser):
        assert 1 <= len(lines) <= 2, f"`npu-rl {' '.join(path)} --help` should end with one or two examples"
    else:
        assert lines, f"`npu-rl {' '.join(path)} --help` has no examples"
    assert text.rstrip().endswith(lines[-1])
    for line in lines:
        argv = shlex.split(line, comments=True)
        assert argv[0] == "npu-rl", line
        assert tuple(argv[1 : 1 + len(path)]) == path, f"an example of another command: {line}"
        try:
            args = build_parser().parse_args(argv[1:])
        except SystemExit as exc:
            pytest.fail(f"the example is refused by the CLI ({exc.code}): {line}")
        assert callable(args.func), line


@pytest.mark.parametrize("path,parser", PARSERS[1:], ids=[" ".join(path) for path, _ in PARSERS[1:]])
def test_every_command_says_what_it_does_under_its_usage(path, parser):
    usage, _, rest = parser.format_help().partition("\n\n")
    assert rest.strip() and not rest.lstrip().startswith(("options:", "positional arguments:", "examples:")), rest
