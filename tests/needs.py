"""What a test does when the set-up it needs beyond `.venv` is missing (`.venv-eval`, `.venv-npu`, an
image, podman, chromium): outside CI it skips and names what provides it; under CI (CI=true), whose
`.ci/run` provides every one, it fails, so CI can never pass by skipping."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def missing_setup(what: str, provider: str) -> NoReturn:
    """``what`` is not here; ``provider`` says how to get it (a make target, a Debian package)."""
    message = f"{what}: {provider}"
    if in_ci():
        pytest.fail(f"{message} (CI provides it: .ci/run)")
    pytest.skip(message)
