"""Every deployment file committed in the repo, re-rendered by `npu-rl render all`
(and compared with the committed copies by the drift tests)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .compose import render_compose
from .k8s import render_committed as render_k8s_committed

# (directory under the project root, renderer writing into it and returning the paths).
RENDERERS: list[tuple[str, Callable[[Path], list[Path]]]] = [
    ("compose", render_compose),
    ("k8s", render_k8s_committed),
]


def render_all(project_root: Path) -> list[Path]:
    written: list[Path] = []
    for subdir, render in RENDERERS:
        written += render(project_root / subdir)
    return written
