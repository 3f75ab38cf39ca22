"""Version and signature guards shared by every verl patch.

Each patch names the verl version it was written for and the functions it
replaces; applying it to anything else fails loudly instead of half-working.
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Any, Callable

from .. import versions


class PatchVersionError(RuntimeError):
    pass


def installed_verl_version() -> str:
    import verl

    return getattr(verl, "__version__", "unknown")


def pinned_verl_version() -> str:
    return str(versions.get("verl.version"))


def require_verl(patch_name: str, written_for: str | None = None) -> None:
    want = written_for or pinned_verl_version()
    have = installed_verl_version()
    if have != want:
        raise PatchVersionError(
            f"npu_rl patch {patch_name!r} was written for verl {want} but verl {have} is installed; "
            f"install verl=={want} (configs/versions.yaml) or port the patch"
        )


def source_fingerprint(obj: Callable[..., Any] | type) -> str:
    """sha256 (first 16 hex) of an object's source, to detect upstream changes."""
    src = inspect.getsource(obj)
    return hashlib.sha256(src.encode()).hexdigest()[:16]
