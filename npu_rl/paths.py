"""Where the bundle's own files live, in a checkout and in the images."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def project_root() -> Path:
    """The checkout (or image directory) holding ``configs/``.

    ``NPU_RL_HOME`` wins so that an installed wheel in an image can point at the
    configs copied next to it.
    """
    env = os.environ.get("NPU_RL_HOME")
    if env:
        return Path(env).resolve()
    return PACKAGE_DIR.parent


def config_dir() -> Path:
    return project_root() / "configs"


def recipes_dir() -> Path:
    return config_dir() / "recipes"


def workspace() -> Path:
    """Directory that relative recipe paths (models, data, checkpoints, logs) resolve against."""
    return Path(os.environ.get("NPU_RL_WORKSPACE", os.getcwd())).resolve()


SANDBOX_PYTHON_ENV = "NPU_RL_SANDBOX_PYTHON"


def sandbox_python() -> str | None:
    """The interpreter `npu-rl sandbox serve` runs the code with when none is given: $NPU_RL_SANDBOX_PYTHON,
    else the checkout's .venv-sandbox (`make sandbox-venv`); None where neither is there."""
    given = os.environ.get(SANDBOX_PYTHON_ENV)
    if given:
        return given
    local = project_root() / ".venv-sandbox" / "bin" / "python"
    return str(local) if local.exists() else None
