"""The jinja2 environment every renderer uses: strict (an unknown variable is an
error, not an empty string) and whitespace-stable, so renderings are reproducible."""

from __future__ import annotations

from collections.abc import Callable

from jinja2 import Environment, PackageLoader, StrictUndefined


def environment(template_dir: str, quote: Callable[[object], str]) -> Environment:
    """Templates under ``npu_rl/render/<template_dir>``; ``quote`` is the ``q`` filter
    that turns a value into a scalar of the target format."""
    env = Environment(
        loader=PackageLoader("npu_rl.render", template_dir),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = quote
    return env
