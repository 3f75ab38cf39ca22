"""`npu-rl image build`: one image variant built (and pushed) through the Docker Engine API.

The SDK talks to any Docker-compatible API: Docker, or ``podman system service``
(``engine`` starts one when there is no Docker); one build or push is npu_rl.image.api's.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import versions
from ..envs import pipconf
from ..envs.locks import LOCK_DIR
from ..errors import UserError
from . import ascend_standin, base_check
from .api import build_image, push_image, serve_files
from .base import ensure_base, pull_if_missing
from .engine import DEFAULT_HOST, engine
from .engine import connect as _connect
from .spec import CPU_LOCKS, build_args, cpu_suite, spec


def connect(host: str | None = None) -> Any:
    """A client for ``host`` (default: DOCKER_HOST, then the local socket) that answered a ping."""
    return _connect(host or os.environ.get("DOCKER_HOST") or DEFAULT_HOST)


CERT_NAME = "pip-cert.pem"


def local_torch_wheels(root: Path) -> list[Path]:
    """The CPU lock's torch wheel, when this machine's pip has it in a find-links folder."""
    version, _ = pipconf.lock_torch(root / LOCK_DIR / "cpu.txt")
    wheel = pipconf.local_wheel("torch", version.split("+")[0]) if version else None
    return [wheel] if wheel else []


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
        raise UserError(
            f"base image {ref} is not here and cannot be pulled ({reason[:160]}); "
            "pass --base-image, or --stand-in to build on a stand-in made here"
        )
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
    stack: str | None = None,
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
        image = spec(variant, target, stack)
    except ValueError as err:
        raise UserError(str(err)) from None
    except KeyError as err:
        raise UserError(str(err.args[0])) from None
    if stand_in and (variant in CPU_LOCKS or base_image):
        raise UserError("--stand-in is for the a2 and a3 variants, without --base-image")
    pins = versions.load(stack=image.line)
    tag = tag or image.tag + ("-standin" if stand_in else "")
    args = build_args(variant, pins)
    if variant not in CPU_LOCKS and not stand_in and not args["MINDSPEED_COMMIT"]:
        raise UserError(
            f"stack line {image.line} pins MindSpeed to the branch {versions.get('ascend.mindspeed.branch', pins)}, "
            f"not a commit: resolve it (git ls-remote {args['MINDSPEED_GIT_URL']} "
            f"{versions.get('ascend.mindspeed.branch', pins)}) into ascend.mindspeed.commit of "
            f"configs/stacks/{image.line}.yaml, or build --stand-in (without MindSpeed)"
        )
    start = time.monotonic()
    with engine(host) as eng:
        log(f"engine: {eng.name} at {eng.host}")
        if variant in CPU_LOCKS:
            args["BASE_IMAGE"] = ensure_base(eng.client, base_image, cpu_suite(variant), log=log)
        else:
            if stand_in:
                args["BASE_IMAGE"] = ascend_standin.ensure(
                    eng.client, root, line=image.line, nocache=nocache, verbose=verbose, log=log
                )
                args["WITH_MINDSPEED"] = "0"
            else:
                args["BASE_IMAGE"] = _present(eng.client, base_image or args["BASE_IMAGE"], log=log)
            found = base_check.check(eng.client, args["BASE_IMAGE"], pins)
            log(
                f"base: {args['BASE_IMAGE']} has the pinned Python set (Python {found['python']}, "
                f"{len(found['dists'])} distributions)"
            )
        wheels = local_torch_wheels(root) if variant == "cpu" else []
        cert = pipconf.cert_file()
        files = {w.name: w for w in wheels} | ({CERT_NAME: cert} if cert else {})
        with serve_files(files) as url:
            if wheels:
                if url is None:  # serve_files serves whenever it is given a file
                    raise RuntimeError("wheels to serve, but no URL to serve them at")
                log(f"wheels: {', '.join(w.name for w in wheels)} from this machine's pip find-links")
                args["PIP_FIND_LINKS"] = url
                args["TORCH_INDEX_URL"] = ""
            if cert:
                # Fetched and deleted inside the RUN step that installs: it stays out of the layers.
                log(f"certificate: pip's CA bundle {cert}")
                args["PIP_CERT_URL"] = f"{url}{CERT_NAME}"
            build_image(
                eng.client,
                context=root,
                dockerfile=image.dockerfile,
                tag=tag,
                buildargs=args,
                target=image.target,
                nocache=nocache,
                verbose=verbose,
                network_mode="host",
            )
        size = int(eng.client.images.get(tag).attrs.get("Size") or 0)
        if push:
            push_image(eng.client, tag, verbose=verbose)
    return Built(tag, size, time.monotonic() - start, args["BASE_IMAGE"])
