"""Building and pushing the images through the Docker Engine API (Docker SDK for Python).

The SDK talks to any Docker-compatible API: Docker, or ``podman system service``
(``engine`` starts one when there is no Docker).
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..envs import pipconf
from ..envs.locks import LOCK_DIR
from ..errors import UserError
from . import ascend_standin, base_check
from .base import ensure_base, pull_if_missing
from .engine import DEFAULT_HOST, _one_line, docker_sdk, engine
from .engine import connect as _connect
from .progress import Display, parse_chunk
from .spec import build_args, spec



def connect(host: str | None = None) -> Any:
    """A client for ``host`` (default: DOCKER_HOST, then the local socket) that answered a ping."""
    return _connect(host or os.environ.get("DOCKER_HOST") or DEFAULT_HOST)


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
        print(f"build files: port {FILES_PORT} is taken ({err.strerror}), serving on another: the layers after "
              "the first build argument that names the URL are built again", file=sys.stderr)
        return ThreadingHTTPServer(("127.0.0.1", 0), handler)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


CERT_NAME = "pip-cert.pem"


def local_torch_wheels(root: Path) -> list[Path]:
    """The CPU lock's torch wheel, when this machine's pip has it in a find-links folder."""
    version, _ = pipconf.lock_torch(root / LOCK_DIR / "cpu.txt")
    wheel = pipconf.local_wheel("torch", version.split("+")[0]) if version else None
    return [wheel] if wheel else []


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
                path=str(context), dockerfile=dockerfile, tag=tag, buildargs=buildargs, target=target,
                rm=True, forcerm=True, nocache=nocache, decode=True, network_mode=network_mode,
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


@dataclass(frozen=True)
class Built:
    tag: str
    size_bytes: int
    seconds: float
    base: str


def _present(client: Any, ref: str, *, log=print) -> str:
    """``ref``, here or pulled; one line saying why not otherwise."""
    reason = pull_if_missing(client, ref, log=log)
    if reason is not None:
        raise UserError(f"base image {ref} is not here and cannot be pulled ({reason[:160]}); "
                        "pass --base-image, or --stand-in to build on a stand-in made here")
    return ref


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
    base_image: str | None = None,
    stand_in: bool = False,
    log=print,
) -> Built:
    """``npu-rl image build``: build (and optionally push) one image variant.

    Builds run with host networking: that is how a podman build reaches PyPI here, and how
    it reads the wheels this machine's pip carries (served on 127.0.0.1 for the build).
    An Ascend variant is built only on a base whose Python set is the pinned one
    (:mod:`npu_rl.image.base_check`); ``stand_in`` builds it on the stand-in base
    (:mod:`npu_rl.image.ascend_standin`), tagged ``...-standin``, without MindSpeed (gitee).
    """
    try:
        image = spec(variant, target)
    except ValueError as err:
        raise UserError(str(err)) from None
    if stand_in and (variant == "cpu" or base_image):
        raise UserError("--stand-in is for the a2 and a3 variants, without --base-image")
    tag = tag or image.tag + ("-standin" if stand_in else "")
    args = build_args(variant)
    start = time.monotonic()
    with engine(host) as eng:
        log(f"engine: {eng.name} at {eng.host}")
        if variant == "cpu":
            args["BASE_IMAGE"] = ensure_base(eng.client, base_image, log=log)
        else:
            if stand_in:
                args["BASE_IMAGE"] = ascend_standin.ensure(eng.client, root, nocache=nocache, verbose=verbose,
                                                           log=log)
                args["WITH_MINDSPEED"] = "0"
            else:
                args["BASE_IMAGE"] = _present(eng.client, base_image or args["BASE_IMAGE"], log=log)
            found = base_check.check(eng.client, args["BASE_IMAGE"])
            log(f"base: {args['BASE_IMAGE']} has the pinned Python set (Python {found['python']}, "
                f"{len(found['dists'])} distributions)")
        wheels = local_torch_wheels(root) if variant == "cpu" else []
        cert = pipconf.cert_file()
        files = {w.name: w for w in wheels} | ({CERT_NAME: cert} if cert else {})
        with serve_files(files) as url:
            if wheels:
                log(f"wheels: {', '.join(w.name for w in wheels)} from this machine's pip find-links")
                args["PIP_FIND_LINKS"] = url
                args["TORCH_INDEX_URL"] = ""
            if cert:
                # Fetched and deleted inside the RUN step that installs: it stays out of the layers.
                log(f"certificate: pip's CA bundle {cert}")
                args["PIP_CERT_URL"] = f"{url}{CERT_NAME}"
            build_image(eng.client, context=root, dockerfile=image.dockerfile, tag=tag, buildargs=args,
                        target=image.target, nocache=nocache, verbose=verbose, network_mode="host")
        size = int(eng.client.images.get(tag).attrs.get("Size") or 0)
        if push:
            push_image(eng.client, tag, verbose=verbose)
    return Built(tag, size, time.monotonic() - start, args["BASE_IMAGE"])
