"""docker-compose against the engine npu-rl builds with (Docker, or the podman service it starts), with the
compose file users run, a host workspace volume and a project of the test's own; `down` when done."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from needs import missing_setup

from npu_rl.image.engine import engine

COMPOSE_FILE = Path(__file__).resolve().parents[1] / "compose" / "docker-compose.yml"


def require_compose() -> str:
    """docker-compose's path, and podman where no Docker answers; skips (fails in CI) without them."""
    tools = ["docker-compose"]
    if not os.environ.get("DOCKER_HOST") and not Path("/var/run/docker.sock").exists():
        tools.append("podman")
    for tool in tools:
        if not shutil.which(tool):
            missing_setup(f"{tool} not found", f"apt-get install {tool}")
    return str(shutil.which("docker-compose"))


@dataclass(frozen=True)
class Compose:
    base: list[str]
    env: dict[str, str]

    def __call__(self, *args: str, timeout: int) -> subprocess.CompletedProcess:
        return subprocess.run([*self.base, *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def up(self, service: str, timeout: int = 1500) -> subprocess.CompletedProcess:
        """The service's own command, until it exits (its exit code is compose's)."""
        return self("up", "--no-build", "--abort-on-container-exit", "--exit-code-from", service, service,
                    timeout=timeout)  # fmt: skip


@contextmanager
def compose_project(
    profile: str, workspace: Path, project: str, file: Path = COMPOSE_FILE, **variables: str
) -> Iterator[Compose]:
    """Compose's ``profile`` of ``file`` with WORKSPACE_DIR=``workspace`` and ``variables``
    (compose/.env.example's)."""
    tool = require_compose()
    with engine() as eng:
        env = {
            **os.environ,
            "DOCKER_HOST": eng.host,
            "WORKSPACE_DIR": str(workspace),
            "COMPOSE_PROJECT_NAME": f"{project}{os.getpid()}",
            **variables,
        }
        compose = Compose([tool, "-f", str(file), "--profile", profile], env)
        try:
            yield compose
        finally:
            compose("down", timeout=300)
