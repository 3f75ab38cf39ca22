"""CANN toolkit, kernels, NNAL and driver as installed under the Ascend root.

Standard library only and no package-relative imports: the Ascend Dockerfile
copies this one file into the image and runs ``python3 cann.py ensure ...``
before the rest of npu_rl is installed, so the image build and ``npu-rl doctor``
read the versions the same way.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

DEFAULT_ROOT = "/usr/local/Ascend"
DOWNLOAD_URL = "https://www.hiascend.com/developer/download/community/result?module=cann"

# The binary kernels package is chip-specific; its operator directory tells
# whether the kernels for a chip are already installed.
CHIPS = {
    "a2": {"kernels": "Ascend-cann-kernels-910b_{version}_linux-{arch}.run", "kernel_dir": "ascend910b"},
    "a3": {"kernels": "Atlas-A3-cann-kernels_{version}_linux-{arch}.run", "kernel_dir": "ascend910_93"},
}
TOOLKIT = "Ascend-cann-toolkit_{version}_linux-{arch}.run"
NNAL = "Ascend-cann-nnal_{version}_linux-{arch}.run"
INSTALL_ORDER = ("toolkit", "kernels", "nnal")

# Set by the stand-in base image (npu_rl.image.ascend_standin) to what it lacks: no CANN at all.
STAND_IN_MARKER = "NPU_RL_STAND_IN"

# Sourced by entrypoints/entrypoint.sh at run time, in this order, when present.
SET_ENV_SCRIPTS = ("ascend-toolkit/set_env.sh", "nnal/atb/set_env.sh", "nnal/asdsip/set_env.sh")


class CannError(Exception):
    """A missing or mismatched CANN component; the message says what to do."""


def ascend_root() -> Path:
    return Path(os.environ.get("ASCEND_INSTALL_ROOT", DEFAULT_ROOT))


def read_kv(path: Path) -> dict[str, str]:
    """``key=value`` lines (the format of CANN's *install.info and the driver's version.info)."""
    out: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            out[key.strip().lower()] = value.strip()
    return out


def toolkit_version(root: Path) -> str | None:
    """Version of the CANN toolkit that ``ascend-toolkit/latest`` points at, or None."""
    latest = root / "ascend-toolkit" / "latest"
    for info in sorted(latest.glob("*/ascend_toolkit_install.info")):
        version = read_kv(info).get("version")
        if version:
            return version
    return None


def driver_version(root: Path) -> str | None:
    info = read_kv(root / "driver" / "version.info")
    return info.get("version") or info.get("package_version")


def kernels_installed(root: Path, chip: str) -> bool:
    kernel_dir = CHIPS[chip]["kernel_dir"]
    base = root / "ascend-toolkit" / "latest"
    return any(base.glob(f"opp/built-in/op_impl/ai_core/tbe/kernel/{kernel_dir}")) or any(
        base.glob(f"*/opp/built-in/op_impl/ai_core/tbe/kernel/{kernel_dir}")
    )


def nnal_installed(root: Path) -> bool:
    return (root / "nnal" / "atb" / "set_env.sh").is_file()


def same_version(a: str | None, b: str) -> bool:
    return a is not None and a.strip().lower() == b.strip().lower()


def package_files(version: str, chip: str, arch: str | None = None) -> dict[str, str]:
    arch = arch or platform.machine()
    fmt = {"version": version, "arch": arch}
    return {
        "toolkit": TOOLKIT.format(**fmt),
        "kernels": CHIPS[chip]["kernels"].format(**fmt),
        "nnal": NNAL.format(**fmt),
    }


def plan(root: Path, version: str, chip: str) -> list[str]:
    """Components to install so that ``root`` holds CANN ``version`` for ``chip``.

    A new toolkit brings its own (empty) operator and NNAL trees, so replacing
    the toolkit means installing all three.
    """
    if chip not in CHIPS:
        raise CannError(f"unknown chip {chip!r} (expected one of: {', '.join(CHIPS)})")
    if not same_version(toolkit_version(root), version):
        return list(INSTALL_ORDER)
    needed = []
    if not kernels_installed(root, chip):
        needed.append("kernels")
    if not nnal_installed(root):
        needed.append("nnal")
    return needed


Runner = Callable[[list[str]], int]


def _run(cmd: list[str]) -> int:
    return subprocess.call(cmd)


def ensure(
    root: Path, version: str, chip: str, packages: Path, arch: str | None = None, run: Runner = _run
) -> list[str]:
    """Install the missing components from the user's ``.run`` packages; returns what was installed."""
    needed = plan(root, version, chip)
    if not needed:
        return []
    if needed == list(INSTALL_ORDER) and toolkit_version(root) is None and os.environ.get(STAND_IN_MARKER):
        return []  # a stand-in base without any CANN (main() says so); a wrong toolkit is still refused
    files = package_files(version, chip, arch)
    absent = [files[c] for c in needed if not (packages / files[c]).is_file()]
    if absent:
        have = toolkit_version(root) or "none"
        raise CannError(
            f"CANN {version} for {chip.upper()} needs {', '.join(needed)} (base image has toolkit {have}); "
            f"download {', '.join(absent)} from {DOWNLOAD_URL} into docker/cann/ and build again"
        )
    set_env = root / "ascend-toolkit" / "set_env.sh"
    for component in needed:
        pkg = packages / files[component]
        pkg.chmod(0o755)
        install = f"{shlex.quote(str(pkg))} --install --quiet --install-path={shlex.quote(str(root))}"
        # Kernels and NNAL installers look for the toolkit through its environment.
        prefix = f"source {shlex.quote(str(set_env))} && " if component != "toolkit" else ""
        if run(["bash", "-c", prefix + install]) != 0:
            raise CannError(f"installing {pkg.name} failed (see the installer output above)")
    installed = toolkit_version(root)
    if not same_version(installed, version):
        raise CannError(f"after installing, ascend-toolkit/latest reports CANN {installed}, not {version}")
    return needed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check or install CANN for an image build.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("ensure", help="install missing CANN components from .run packages")
    e.add_argument("--version", required=True)
    e.add_argument("--chip", required=True, choices=sorted(CHIPS))
    e.add_argument("--packages", type=Path, required=True, help="directory holding the .run packages")
    e.add_argument("--root", type=Path, default=None)
    sub.add_parser("versions", help="print the installed toolkit and driver versions")
    args = parser.parse_args(argv)
    root = getattr(args, "root", None) or ascend_root()
    if args.cmd == "versions":
        print(f"toolkit={toolkit_version(root)} driver={driver_version(root)}")
        return 0
    try:
        done = ensure(root, args.version, args.chip, args.packages)
    except CannError as err:
        print(f"cann: error: {err}", file=sys.stderr)
        return 1
    if done:
        print(f"cann: installed {', '.join(done)}")
    elif toolkit_version(root) is None:
        print(f"cann: no CANN, and none installed: {os.environ[STAND_IN_MARKER]}")
    else:
        print(f"cann: base image already has CANN {args.version}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
