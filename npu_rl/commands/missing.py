"""What to install when a job needs a Python package this environment lacks."""

from __future__ import annotations

import importlib.metadata
import re

from ..errors import UserError

# Import names whose distribution is called something else.
_DISTRIBUTIONS = {"yaml": "pyyaml", "math_verify": "math-verify", "megatron": "megatron-core", "PIL": "pillow"}


class MissingDependency(UserError):
    """A job's third-party package is not installed: one line naming what to install."""

    def __init__(self, job: str, module: str):
        dist = _DISTRIBUTIONS.get(module, module)
        extra = _extra_of(dist)
        how = f"pip install 'npu-rl[{extra}]'" if extra else f"pip install {dist}"
        super().__init__(f"`npu-rl {job}` needs the Python package {dist}, which is not installed ({how})")


def third_party(err: ModuleNotFoundError) -> str | None:
    """The missing top-level module, or None when a module of npu_rl itself is missing (a broken install)."""
    top = (err.name or "").partition(".")[0]
    return top if top and top != "npu_rl" else None


def _extra_of(dist: str) -> str | None:
    """The npu-rl extra (``pip install 'npu-rl[ops]'``) that brings ``dist``, if one does."""
    try:
        requires = importlib.metadata.requires("npu-rl") or []
    except importlib.metadata.PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
        return None
    for req in requires:
        m = re.match(r"([A-Za-z0-9_.-]+).*;\s*extra\s*==\s*[\"']([^\"']+)[\"']", req)
        if m and m[1].lower().replace("_", "-") == dist.lower().replace("_", "-") and m[2] != "dev":
            return m[2]
    return None
