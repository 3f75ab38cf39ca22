"""Argument types shared by the subcommands: a bad value is one `npu-rl: error:` line from argparse."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

N = TypeVar("N", int, float)


def _parse(text: str, convert: Callable[[str], N], what: str) -> N:
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def port(text: str) -> int:
    """A TCP port number (0 lets the OS choose where a command allows it)."""
    value = _parse(text, int, "a port number")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is outside 0-65535")
    return value


def positive_int(text: str) -> int:
    value = _parse(text, int, "an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def probability(text: str) -> float:
    value = _parse(text, float, "a number")
    if not 0.0 <= value <= 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{value} is not a probability in [0, 1]")
    return value


def open_fraction(text: str) -> float:
    """A share strictly between 0 and 1 (a split that leaves one side empty is refused)."""
    value = _parse(text, float, "a number")
    if not 0.0 < value < 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{value} is not strictly between 0 and 1")
    return value


def output_dir(text: str) -> Path:
    """A directory to write into: created if missing; an existing file or an unwritable place is refused."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{path} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise argparse.ArgumentTypeError(f"cannot create {path}: {err.strerror}") from None
    if not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"{path} is not writable")
    return path
