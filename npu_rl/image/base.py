"""The CPU image's base: ``python:<python>-slim-bookworm``, or a stand-in made from Debian's packages.

A machine that reaches PyPI and Debian but no image registry (an air-gapped cluster's
build host, CI here) cannot pull the default base. ``ensure_base`` then builds the same
thing from Debian bookworm with mmdebstrap (Debian's Python 3.11, pip, CA certificates;
``python``/``pip`` on PATH and no externally-managed marker, as in the python image) and
imports it as ``STANDIN``. ``npu-rl image build --base-image REF`` picks any other base.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .. import versions
from ..errors import UserError
from .engine import _one_line, docker_sdk

SUITE = "bookworm"
PACKAGES = ("python3", "python3-pip", "python3-venv", "ca-certificates")


def default_base() -> str:
    return f"python:{versions.get('common.python')}-slim-{SUITE}"


def standin_tag() -> str:
    return f"localhost/npu-rl-base:python{versions.get('common.python')}-{SUITE}"


def mmdebstrap_command(tarball: Path) -> list[str]:
    python = versions.get("common.python")
    hooks = [
        # Debian marks its Python externally managed; the python image does not, and the
        # Dockerfile installs into the system interpreter as it would there.
        f'rm -f "$1/usr/lib/python{python}/EXTERNALLY-MANAGED"',
        'ln -sf /usr/bin/python3 "$1/usr/local/bin/python"',
        'ln -sf /usr/bin/pip3 "$1/usr/local/bin/pip"',
        'rm -rf "$1/var/lib/apt/lists/"* "$1/var/cache/apt/"*',
    ]
    cmd = ["mmdebstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}"]
    for hook in hooks:
        cmd.append(f"--customize-hook={hook}")
    return [*cmd, SUITE, str(tarball)]


def _exists(client: Any, ref: str) -> bool:
    docker = docker_sdk()
    try:
        client.images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def make_standin(client: Any, *, log=print) -> str:
    """Build the stand-in base with mmdebstrap and import it; returns its tag."""
    tag = standin_tag()
    if not shutil.which("mmdebstrap"):
        raise UserError(
            f"cannot pull {default_base()} and mmdebstrap is not installed to make a stand-in: "
            "apt-get install mmdebstrap, or pass --base-image"
        )
    with tempfile.TemporaryDirectory(prefix="npu-rl-base-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        log(f"base: making {tag} from Debian {SUITE} with mmdebstrap ({', '.join(PACKAGES)})")
        proc = subprocess.Popen(
            mmdebstrap_command(tarball), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        tail: list[str] = []
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                line = line.rstrip()
                tail = (tail + [line])[-20:]
                if line.startswith("I: "):  # mmdebstrap's progress lines
                    log(f"base: {line[3:]}")
        finally:
            if proc.poll() is None and tail and not tail[-1].startswith("I: success"):
                proc.terminate()  # stopped (SIGTERM) or failed while reading: no half-made rootfs left running
        if proc.wait() != 0:
            print("\n".join(tail), file=sys.stderr)
            raise UserError(f"mmdebstrap failed (exit {proc.returncode}) making the {default_base()} stand-in")
        # An imported tarball has no config: PATH and the rest are the python image's.
        changes = [
            'CMD ["python3"]',
            "ENV LANG=C.UTF-8",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            f'LABEL org.opencontainers.image.description="stand-in for {default_base()} (mmdebstrap)"',
        ]
        try:
            # The tag rides in the repository name: both APIs take it there (podman ignores `tag`).
            client.api.import_image_from_file(str(tarball), repository=tag, changes=changes)
        except docker_sdk().errors.APIError as err:
            raise UserError(f"importing the base stand-in failed: {_one_line(err)}") from None
    log(f"base: imported {tag}")
    return tag


def pull_if_missing(client: Any, ref: str, *, log=print) -> str | None:
    """None when ``ref`` is here or was pulled; else why it cannot be pulled, in one line."""
    if _exists(client, ref):
        return None
    try:
        log(f"base: pulling {ref}")
        client.images.pull(ref)
        return None
    except docker_sdk().errors.DockerException as err:
        return _one_line(err)


def ensure_base(client: Any, ref: str | None, *, log=print) -> str:
    """The base to build the CPU image on: ``ref`` (default: the python image), present or pulled;
    for the default only, the stand-in when it cannot be pulled."""
    wanted = ref or default_base()
    reason = pull_if_missing(client, wanted, log=log)
    if reason is None:
        return wanted
    if ref and ref != default_base():
        raise UserError(f"cannot pull base image {ref}: {reason}")
    log(f"base: cannot pull {wanted} ({reason[:120]})")
    tag = standin_tag()
    return tag if _exists(client, tag) else make_standin(client, log=log)
