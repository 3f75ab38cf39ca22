"""Building and pushing the images through the Docker Engine API (Docker SDK for Python).

The SDK talks to any Docker-compatible API: Docker, or ``podman system service``
(what the tests use).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Iterable

from ..errors import UserError
from .progress import Display, parse_chunk
from .spec import build_args, spec

DEFAULT_HOST = "unix:///var/run/docker.sock"


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _docker() -> Any:
    try:
        import docker
    except ImportError:
        raise UserError("the docker Python package is missing: pip install 'npu-rl[ops]'") from None
    return docker


def connect(host: str | None = None) -> Any:
    """A client for ``host`` (default: DOCKER_HOST, then the local socket) that answered a ping."""
    docker = _docker()
    where = host or os.environ.get("DOCKER_HOST") or DEFAULT_HOST
    try:
        client = docker.DockerClient(base_url=host) if host else docker.from_env()
        client.ping()
    except docker.errors.DockerException as err:
        raise UserError(
            f"no Docker daemon reachable at {where}: start Docker or point DOCKER_HOST/--host at one "
            f"({_one_line(err)})"
        ) from None
    return client


def _consume(chunks: Iterable[dict[str, Any]], display: Display, what: str) -> str | None:
    """Feed the stream to the display; return the built image id (builds) or None."""
    image_id = None
    for chunk in chunks:
        display.feed(parse_chunk(chunk))
        if display.errors:
            break
        aux = chunk.get("aux") or {}
        image_id = aux.get("ID", image_id)
    if display.errors:
        where = ""
        if display.step:
            n, total, instruction = display.step
            where = f" at step {n}/{total} ({instruction[:60]})"
        for line in display.tail:
            print(line, file=sys.stderr)
        raise UserError(f"{what} failed{where}: {display.errors[-1]}")
    return image_id


def build_image(
    client: Any,
    *,
    context: Path,
    dockerfile: str,
    tag: str,
    buildargs: dict[str, str],
    target: str | None = None,
    nocache: bool = False,
    verbose: bool = False,
    console: Any = None,
) -> str:
    """Build ``dockerfile`` (relative to ``context``) as ``tag``; returns the image id."""
    docker = _docker()
    if not (context / dockerfile).is_file():
        raise UserError(f"no {dockerfile} under {context} (run from an npu-rl checkout)")
    with Display(f"building {tag}", verbose=verbose, console=console) as display:
        try:
            stream = client.api.build(
                path=str(context), dockerfile=dockerfile, tag=tag, buildargs=buildargs, target=target,
                rm=True, forcerm=True, nocache=nocache, decode=True,
            )
            image_id = _consume(stream, display, f"building {tag}")
        except docker.errors.APIError as err:
            raise UserError(f"building {tag} failed: {_one_line(err)}") from None
        display.finish()
    if image_id is None:
        image_id = client.images.get(tag).id
    return image_id


def push_image(client: Any, tag: str, *, verbose: bool = False, console: Any = None) -> None:
    docker = _docker()
    repository, _, version = tag.rpartition(":")
    if not repository or "/" in version:
        repository, version = tag, "latest"
    with Display(f"pushing {tag}", verbose=verbose, console=console) as display:
        try:
            _consume(client.api.push(repository, tag=version, stream=True, decode=True), display, f"pushing {tag}")
        except docker.errors.APIError as err:
            raise UserError(f"pushing {tag} failed: {_one_line(err)}") from None
        display.finish()


def build_variant(
    variant: str,
    *,
    root: Path,
    target: str | None = None,
    tag: str | None = None,
    push: bool = False,
    host: str | None = None,
    nocache: bool = False,
    verbose: bool = False,
) -> str:
    """``npu-rl image build``: build (and optionally push) one image variant; returns its tag."""
    try:
        image = spec(variant, target)
    except ValueError as err:
        raise UserError(str(err)) from None
    tag = tag or image.tag
    client = connect(host)
    build_image(client, context=root, dockerfile=image.dockerfile, tag=tag, buildargs=build_args(variant),
                target=image.target, nocache=nocache, verbose=verbose)
    if push:
        push_image(client, tag, verbose=verbose)
    return tag
