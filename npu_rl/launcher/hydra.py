"""Python values written in hydra's override grammar (``key=value`` on verl's command line)."""

from __future__ import annotations

import re
from typing import Any

_BARE = re.compile(r"^[A-Za-z0-9_./\-:+@~]+$")


def quoted(text: str) -> str:
    """A string as a quoted hydra value: it stays a string (``'300'``, not 300) whatever it holds."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def hydra_value(value: Any) -> str:
    """Format a Python value with hydra's override grammar."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _BARE.match(text) and text not in ("True", "False", "null", "true", "false"):
        return text
    return quoted(text)
