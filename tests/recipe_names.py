"""The shipped recipes by name, and which stack line each runs on: a test in .venv (the default line's verl)
takes the default line's; a line's own recipes run through that line's environment or image."""

from __future__ import annotations

from npu_rl import versions
from npu_rl.paths import recipes_dir
from npu_rl.recipe import load_recipe

ALL = sorted(p.stem for p in recipes_dir().glob("*.yaml"))


def line_of(name: str) -> str:
    return load_recipe(name).stack or versions.default_line()


# Those of the default line, whose verl .venv has.
HERE = [name for name in ALL if line_of(name) == versions.default_line()]
