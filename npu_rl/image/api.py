"""One image built or pushed through the Docker Engine API (Docker SDK for Python), and this
machine's files served to a build.

npu_rl.image.build builds the variants with it, npu_rl.image.ascend_standin the stand-in base.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ..errors import UserError
from .engine import _one_line, docker_sdk
from .progress import Display, parse_chunk


@contextmanager
def serve_files(files: dict[str, Path]) -> Iterator[str | None]:
    """Serve ``files`` (name -> path) on 127.0.0.1 for the length of a build; the index page is
    a pip find-links page.

    A build cannot see the host's folders; with host networking it can read this page.
    """
    if not files:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="npu-rl-build-files-") as tmp:
        for name, path in files.items():
            (Path(tmp) / name).symlink_to(path)
        handler = partial(_QuietHandler, directory=tmp)
        server = _server(handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/"
        finally:
            server.shutdown()
            server.server_close()


# The served URL is a build arg, and a build arg's value is part of the cache key of every RUN after it:
# a fixed port keeps the layers reusable from one build to the next (any free port when it is taken).
FILES_PORT = 38471


def _server(handler: Any) -> ThreadingHTTPServer:
    try:
        return ThreadingHTTPServer(("127.0.0.1", FILES_PORT), handler)
    except OSError as err:
        print(
            f"build files: port {FILES_PORT} is taken ({err.strerror}), serving on another: the layers after "
            "the first build argument that names the URL are built again",
            file=sys.stderr,
        )
        return ThreadingHTTPServer(("127.0.0.1", 0), handler)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


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
    network_mode: str | None = None,
) -> str:
    """Build ``dockerfile`` (relative to ``context``) as ``tag``; returns the image id."""
    docker = docker_sdk()
    if not (context / dockerfile).is_file():
        raise UserError(f"no {dockerfile} under {context} (run from an npu-rl checkout)")
    with Display(f"building {tag}", verbose=verbose, console=console) as display:
        try:
            stream = client.api.build(
                path=str(context),
                dockerfile=dockerfile,
                tag=tag,
                buildargs=buildargs,
                target=target,
                rm=True,
                forcerm=True,
                nocache=nocache,
                decode=True,
                network_mode=network_mode,
            )
            image_id = _consume(stream, display, f"building {tag}")
        except docker.errors.APIError as err:
            raise UserError(f"building {tag} failed: {_one_line(err)}") from None
        display.finish()
    if image_id is None:
        image_id = client.images.get(tag).id
    return image_id


def push_image(client: Any, tag: str, *, verbose: bool = False, console: Any = None) -> None:
    docker = docker_sdk()
    repository, _, version = tag.rpartition(":")
    if not repository or "/" in version:
        repository, version = tag, "latest"
    with Display(f"pushing {tag}", verbose=verbose, console=console) as display:
        try:
            _consume(client.api.push(repository, tag=version, stream=True, decode=True), display, f"pushing {tag}")
        except docker.errors.APIError as err:
            raise UserError(f"pushing {tag} failed: {_one_line(err)}") from None
        display.finish()
