"""The container engine the images are built and run with: any Docker-compatible API.

``engine()`` answers with Docker when one is reachable (``--host``, ``DOCKER_HOST``, the
local socket). Without one, but with podman installed, it starts ``podman system
service`` on a private socket for as long as it is needed, so ``make image-cpu``, the
docker SDK and ``docker-compose`` all work on a machine that has only podman.

The podman service gets a containers.conf of its own (``CONTAINERS_CONF``): podman's
default open-files limit is above what an unprivileged or sandboxed host allows, and
every container start then fails with ``setrlimit: Operation not permitted``; the
limits here are the host's own hard limits.
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError

DEFAULT_HOST = "unix:///var/run/docker.sock"
# Open files / processes per container: enough for Ray (raylet, workers, gRPC threads); lowered to
# the host's hard limit (sandboxes refuse more; nproc=65536 was refused here under a 96363 hard limit).
NOFILE = 16384
NPROC = 16384


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def docker_sdk() -> Any:
    try:
        import docker  # lazy: the ops extra, named when missing
    except ImportError:
        raise UserError("the docker Python package is missing: pip install 'npu-rl[ops]'") from None
    return docker


@dataclass
class Engine:
    client: Any
    host: str  # what DOCKER_HOST must say for docker-compose and the docker CLI to reach it
    name: str  # "docker" or "podman"


def _ping(host: str) -> bool:
    if not host.startswith("unix://"):
        return True  # tcp/ssh: left to the client
    path = host[len("unix://") :]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(path)
            s.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n")
            return b"OK" in s.recv(4096)
    except OSError:
        return False


def connect(host: str) -> Any:
    """A client for ``host`` that answered a ping."""
    docker = docker_sdk()
    try:
        client = docker.DockerClient(base_url=host, timeout=600)
        client.ping()
    except docker.errors.DockerException as err:
        raise UserError(
            f"no Docker daemon reachable at {host}: start Docker or point DOCKER_HOST/--host at one ({_one_line(err)})"
        ) from None
    return client


def containers_conf(directory: Path) -> Path:
    """A containers.conf with ulimits the host allows and the runc runtime when installed."""

    def capped(limit: int, kind: int) -> int:
        hard = resource.getrlimit(kind)[1]
        return limit if hard == resource.RLIM_INFINITY else min(limit, hard)

    nofile = capped(NOFILE, resource.RLIMIT_NOFILE)
    nproc = capped(NPROC, resource.RLIMIT_NPROC)
    lines = ["[containers]", f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]']
    if shutil.which("runc"):
        lines += ["[engine]", 'runtime = "runc"']
    path = directory / "containers.conf"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@contextmanager
def podman_service(storage: list[str] | None = None, *, timeout: float = 30) -> Iterator[str]:
    """Run ``podman system service`` on a private socket; yields its ``unix://`` address."""
    exe = shutil.which("podman")
    if not exe:
        raise UserError("no Docker daemon and no podman: install Docker or podman (apt-get install podman)")
    with tempfile.TemporaryDirectory(prefix="npu-rl-podman-") as tmp:
        sock = Path("/tmp") / f"npu-rl-podman-{uuid.uuid4().hex[:8]}.sock"
        log = Path(tmp) / "service.log"
        env = {**os.environ, "CONTAINERS_CONF": str(containers_conf(Path(tmp)))}
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [exe, *(storage or []), "system", "service", "--time=0", f"unix://{sock}"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        host = f"unix://{sock}"
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and proc.poll() is None and not _ping(host):
                time.sleep(0.2)
            if proc.poll() is not None or not _ping(host):
                tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
                raise UserError(f"podman system service did not start: {tail[0]}")
            yield host
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
            sock.unlink(missing_ok=True)


@contextmanager
def engine(host: str | None = None) -> Iterator[Engine]:
    """Docker at ``host``/DOCKER_HOST/the local socket, else a podman service started for the block."""
    wanted = host or os.environ.get("DOCKER_HOST")
    if wanted:
        yield Engine(connect(wanted), wanted, "docker")
        return
    if _ping(DEFAULT_HOST):
        yield Engine(connect(DEFAULT_HOST), DEFAULT_HOST, "docker")
        return
    if not shutil.which("podman"):
        raise UserError(
            f"no Docker daemon reachable at {DEFAULT_HOST} and no podman: start Docker, point "
            "DOCKER_HOST/--host at one, or install podman"
        )
    with podman_service() as address:
        yield Engine(connect(address), address, "podman")
