"""What this machine's pip is configured to read, so that other installers (uv, image builds) can read it too.

A machine can carry wheels that its index does not (the CPU torch wheel, here in a
``find-links`` folder); an image build or uv does not see pip's configuration unless it is
handed over, which is all this module does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _config_values(key: str) -> list[str]:
    """Values of one pip option from the environment (PIP_<KEY>) and ``pip config list``."""
    values: list[str] = []
    env = os.environ.get("PIP_" + key.upper().replace("-", "_"))
    if env:
        values += env.split()
    try:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    for line in out.splitlines():
        name, _, value = line.partition("=")
        if name.split(".")[-1] == key:
            values += value.strip().strip("'\"").split()
    return list(dict.fromkeys(values))


def find_links_dirs() -> list[Path]:
    """The local folders among pip's ``find-links`` (URLs are left to pip itself)."""
    dirs = []
    for value in _config_values("find-links"):
        path = Path(value.removeprefix("file://"))
        if not value.startswith(("http://", "https://")) and path.is_dir():
            dirs.append(path)
    return dirs


def cert_file() -> Path | None:
    """The CA bundle pip is told to trust (``cert``), when it is a file here.

    A machine behind a TLS-inspecting proxy trusts the proxy's CA through it; a container
    built there needs the same bundle to reach PyPI.
    """
    for value in _config_values("cert"):
        if Path(value).is_file():
            return Path(value)
    return None


def local_wheel(name: str, version: str, dirs: list[Path] | None = None) -> Path | None:
    """A wheel of ``name==version`` (any local label, e.g. ``+cpu``) in the find-links folders."""
    stem = name.replace("-", "_")
    for folder in find_links_dirs() if dirs is None else dirs:
        for wheel in sorted(folder.glob(f"{stem}-{version}*.whl")):
            rest = wheel.name[len(stem) + 1 + len(version) :]
            if rest.startswith(("-", "+")):
                return wheel
    return None


def lock_torch(lock: Path) -> tuple[str | None, str | None]:
    """(torch version, torch index) that a lock file names, from its pin and header."""
    version = index = None
    for line in lock.read_text(encoding="utf-8").splitlines():
        if line.startswith("# torch-index: "):
            index = line.split(":", 1)[1].strip()
        elif line.startswith("torch=="):
            version = line.split("==", 1)[1].split()[0].split(";")[0]
    return version, index


def uv_torch_args(lock: Path) -> list[str]:
    """uv's arguments that let ``uv pip install -r lock`` find its CPU torch wheel.

    uv reads no pip configuration (the Makefile runs it with ``UV_NO_CONFIG``), so a local find-links
    folder of this machine's pip that holds the wheel is named to it (the index would only be asked, and
    may not be reachable); else the CPU wheel index, searched beside PyPI.
    """
    version, index = lock_torch(lock)
    if not version or not index:
        return []
    wheel = local_wheel("torch", version.split("+")[0])
    if wheel:
        return ["--find-links", str(wheel.parent)]
    # uv takes a package from the first index that lists it, and the torch index lists some of torch's own
    # requirements (numpy, pillow, fsspec...) without the versions the lock pins: every pin is looked for in
    # both, as pip does; --require-hashes keeps what is installed the lock's.
    return ["--extra-index-url", index, "--index-strategy", "unsafe-best-match"]


def pinned(lock: Path, name: str) -> str:
    """One package's entry of a lock, pin and hashes, as a requirements file of its own.

    pip installs uv from it with ``--require-hashes`` before uv installs the rest of the
    lock: the bootstrap is as strict as the install it starts.
    """
    lines = lock.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"{name}=="):
            entry = [line]
            while entry[-1].rstrip().endswith("\\"):
                entry.append(lines[i + len(entry)])
            return "\n".join(entry) + "\n"
    raise SystemExit(f"npu-rl: error: {lock} pins no {name}; fix: make lock")


USAGE = "usage: python -m npu_rl.envs.pipconf {uv-torch-args|pinned NAME} LOCK"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "uv-torch-args":
        print(" ".join(uv_torch_args(Path(argv[1]))))
        return 0
    if len(argv) == 3 and argv[0] == "pinned":
        sys.stdout.write(pinned(Path(argv[2]), argv[1]))
        return 0
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
