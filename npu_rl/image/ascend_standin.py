"""The stand-in Ascend base image: ``ascend.base_image``'s Python layer without CANN, built here.

A machine that cannot pull ``quay.io/ascend/vllm-ascend`` (no registry, or no licence for CANN)
can still build both Ascend variants and rehearse them up to the device boundary on this
stand-in: docker/Dockerfile.ascend-standin on the Debian Python 3.11 base the CPU image uses
(:mod:`npu_rl.image.base`), installing the files of :func:`npu_rl.envs.ascend_base.wheelhouse`,
which this module serves to the build on 127.0.0.1. What the stand-in lacks is stated in
:mod:`npu_rl.envs.ascend_base`; the image carries that sentence as ``NPU_RL_STAND_IN``, which
``cann.py ensure`` reads to let the build go on without CANN.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

from .. import versions
from ..envs import ascend_base, interpreter
from ..errors import UserError
from .api import build_image, serve_files
from .base import ensure_base

DOCKERFILE = "docker/Dockerfile.ascend-standin"
NOTE = (
    "stand-in base: the Python layer of {base} without CANN, the NPU kernels or torch_npu's native "
    "library (torch_npu hidden); it rehearses up to the device boundary and cannot train on an NPU"
)


def tag(line: str | None = None) -> str:
    pins = versions.load(stack=line)
    suffix = f"-{line}" if versions.other_line(line) else ""
    return f"localhost/npu-rl-ascend-base:vllm-ascend{versions.get('ascend.vllm_ascend', pins)}{suffix}-standin"


def note(line: str | None = None) -> str:
    return NOTE.format(base=versions.get("ascend.base_image", versions.load(stack=line)))


def build_args(wheels_url: str, debian_base: str, layer_sha256: str, line: str | None = None) -> dict[str, str]:
    pins = versions.load(stack=line)
    return {
        "BASE_LAYER_SHA256": layer_sha256,
        "BASE_IMAGE": debian_base,
        "WHEELS_URL": wheels_url,
        "TORCH_VERSION": str(versions.get("ascend.torch", pins)),
        "TORCHVISION_VERSION": str(versions.get("ascend.torchvision", pins)),
        "TORCH_EXTRA_PINS": " ".join(ascend_base.torch_pins(line)[2:]),
        "VLLM_VERSION": str(versions.get("ascend.vllm", pins)),
        "BASE_NAME": str(versions.get("ascend.base_image", pins)),
        "STAND_IN_PTH": ascend_base.stand_in_pth().strip(),
        "STAND_IN_NOTE": note(line),
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _python_prefix(line: str):
    """Where the line's Python is built on this machine (its prefix), for the Debian base's stand-in."""

    def prefix() -> str:
        try:
            exe = interpreter.find(line)
        except LookupError as err:
            raise UserError(str(err)) from None
        out = subprocess.run([exe, "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True)
        found = Path(out.stdout.strip() or "/")
        version = str(versions.get("common.python", versions.load(stack=line)))
        # A distribution's Python (prefix /usr) shares its tree with everything else there: only a Python
        # built into its own prefix (pyenv's, uv's, a source build's) can be copied into the stand-in.
        if str(found) in ("/", "/usr", "/usr/local") or not (found / "lib" / f"python{version}" / "os.py").is_file():
            raise UserError(
                f"the stand-in of python:{version}-slim-bookworm copies a Python {version} built into its own "
                f"prefix, and {exe} lives in {found}: install one (pyenv install {version}) or name it in LINE_PYTHON"
            )
        return str(found)

    return prefix


def ensure(
    client: Any, root: Path, *, line: str | None = None, nocache: bool = False, verbose: bool = False, log=print
) -> str:
    """The stand-in's tag (of ``line``'s base; the default line's by default), built (again) every time: its
    layers are cached, so a build whose inputs (the lock, the pins, the .pth line, the Dockerfile) are
    unchanged takes seconds, and one whose inputs changed is never served an old base."""
    line = versions.other_line(line)
    ref = tag(line)
    python = str(versions.get("common.python", versions.load(stack=line)))
    debian = ensure_base(client, None, python=python, prefix=_python_prefix(line) if line else None, log=log)
    try:
        files = ascend_base.wheelhouse(line, log=log)
    except (RuntimeError, OSError) as err:
        raise UserError(f"the stand-in base's files could not be fetched: {err}") from None
    log(f"base: building {ref} on {debian} ({DOCKERFILE})")
    with serve_files({p.name: p for p in sorted(files.iterdir()) if not p.name.startswith(".")}) as url:
        assert url is not None
        build_image(
            client,
            context=root,
            dockerfile=DOCKERFILE,
            tag=ref,
            buildargs=build_args(url, debian, _sha256(files / ascend_base.LAYER_FILE), line),
            nocache=nocache,
            verbose=verbose,
            network_mode="host",
        )
    return ref
