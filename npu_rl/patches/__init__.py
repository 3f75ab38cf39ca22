"""Patches that make verl do what the recipes need, on the releases the stack lines pin (0.6.1 and 0.9.0).
Each lives in its own module as a ``guard.Patch`` naming the releases it supports, with the fingerprints of
the verl code it relies on in each (checked as the patched modules are imported; any other release is
refused); ``NPU_RL_PATCHES`` (comma-separated names) selects which ones a run installs, in every process
(see boot/sitecustomize.py).

Every Python process of a run imports the selected patch modules, reward workers included, so importing one
loads no verl, torch, ray, vllm, megatron, omegaconf, transformers, psutil nor the recipe schema (pydantic):
each is imported inside the function that runs once verl's modules are there (``# lazy: ...``).
cpu_rollout, which verl itself imports for the CPU rollout, is the exception."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from .guard import APPLIED
from .registry import PATCHES

BOOT_DIR = Path(__file__).resolve().parent / "boot"

_installed: set[str] = set()


def install(names: list[str]) -> None:
    for name in names:
        if name in _installed:
            continue
        if name not in PATCHES:
            raise ValueError(f"unknown npu-rl patch {name!r} (known: {', '.join(PATCHES)})")
        importlib.import_module(PATCHES[name]).PATCH.install()
        _installed.add(name)


def selected(environ=os.environ) -> list[str]:
    """The patch names a process was asked to install (``NPU_RL_PATCHES``)."""
    return [n.strip() for n in environ.get("NPU_RL_PATCHES", "").split(",") if n.strip()]


def installed() -> list[str]:
    """The patches this process has installed, in the order of PATCHES."""
    return [n for n in PATCHES if n in _installed]


def applied() -> dict[str, list[str]]:
    """The patches that have changed code in this process so far, each with the functions that did."""
    return {n: list(APPLIED[n]) for n in PATCHES if n in APPLIED}


def install_from_env() -> None:
    install(selected())


def env_for(names: list[str]) -> dict[str, str]:
    """Environment that makes every child Python process install ``names``."""
    pythonpath = os.pathsep.join(p for p in (str(BOOT_DIR), os.environ.get("PYTHONPATH", "")) if p)
    return {"NPU_RL_PATCHES": ",".join(names), "PYTHONPATH": pythonpath}
