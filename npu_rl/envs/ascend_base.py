"""The base image's Python layer (``ascend.base_image``), and the stand-in of it built here.

vllm-ascend v0.9.1's Dockerfile makes ``quay.io/ascend/vllm-ascend:v0.9.1`` on CANN 8.2.RC1's image
(``quay.io/ascend/cann:8.2.rc1-910b-ubuntu22.04-py3.11``): vLLM 0.9.1 from source with ``VLLM_TARGET_DEVICE=empty``
(requirements: ``requirements/common.txt``, ``setup.py`` ``get_requirements``: ``_no_device()``), then
vllm-ascend 0.9.1, which requires ``torch-npu==2.5.1.post1`` on torch 2.5.1. Here that layer is the ``npu-base``
lock (npu_rl.envs.locks) and constrains the npu locks, so nothing npu-rl installs on top replaces a version
vLLM, vllm-ascend or torch_npu asks for; :func:`build` installs it into a venv the same way.

What the stand-in lacks (the one place this is stated): CANN, the NPU kernels and torch_npu's native
library, so ``import torch_npu`` fails, and everything that imports it (vllm-ascend's platform, patches,
worker): :func:`stand_in_pth` keeps every process from trying. On x86_64, PyTorch's ``torch==2.5.1+cpu``:
the one ``pip check`` line allowed (:func:`unexpected_pip_check`). vLLM's unpinned requirements are as of
``tools.lock_exclude_newer``, not the day Ascend built the image; its pinned ones (lark, outlines, ...) match.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from .. import versions
from . import locks
from .base_layer import cache_dir, fetch_sdist, sdist_pin

# What the stand-in sets because CANN is absent (stand_in_pth): always; and, unless BOUNDARY_ENV is 1,
# what hides torch_npu.
ALWAYS_ENV = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
HIDING_ENV = {"VLLM_PLUGINS": ""}
HIDDEN_MODULES = ("torch_npu",)
BOUNDARY_ENV = "NPU_RL_STAND_IN_BOUNDARY"
PTH_NAME = "npu-rl-stand-in.pth"
# torch_npu's x86_64 wheel pins the CPU build of torch, which PyPI does not carry (see above).
EXPECTED_PIP_CHECK = re.compile(
    r"^torch-npu 2\.5\.1\.post1 has requirement torch==2\.5\.1\+cpu, "
    r"but you have torch 2\.5\.1\.$"
)


def stand_in_torch(torch_version: str | None = None, machine: str | None = None) -> bool:
    """Whether PyPI's torch stands in for the base image's CPU build (x86_64, a torch without a local
    label); by default of this interpreter's environment."""
    if torch_version is None:
        try:
            torch_version = metadata.version("torch")
        except metadata.PackageNotFoundError:
            return False
    return (machine or platform.machine()) == "x86_64" and torch_version == str(versions.get("ascend.torch"))


def unexpected_pip_check(output: str, stand_in: bool) -> list[str]:
    """The lines of ``pip check`` output that the stand-in's one known difference does not explain:
    torch_npu's pin of the CPU torch build, allowed only where PyPI's torch stands in for it
    (:func:`stand_in_torch`). On a real base image (torch 2.5.1+cpu) nothing is allowed.

    torch_npu 2.5.1.post1 for x86_64 requires ``torch==2.5.1+cpu``, which only PyTorch's own index serves
    (unreachable here): PyPI's torch 2.5.1 stands in, with the CUDA wheels and triton PyPI's build depends
    on, and ``pip check`` prints exactly that one line (:data:`EXPECTED_PIP_CHECK`). The base image's
    Dockerfile uninstalls triton, which its CPU torch does not need; the stand-in keeps it because its
    torch does. On aarch64 PyPI's torch 2.5.1 is the CPU build and there is no such line."""
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith("No broken requirements")]
    return [line for line in lines if not (stand_in and EXPECTED_PIP_CHECK.match(line))]


def pip_check() -> list[str]:
    """``pip check`` of this interpreter's environment, less the stand-in's one expected line."""
    proc = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=600)
    return unexpected_pip_check(proc.stdout + proc.stderr, stand_in_torch())


def _run(cmd: list[str], *, log, env: dict | None = None) -> None:
    log("+ " + " ".join(cmd))
    proc = subprocess.run(cmd, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited with {proc.returncode}")


def torch_pins() -> list[str]:
    return [f"torch=={versions.get('ascend.torch')}", f"torchvision=={versions.get('ascend.torchvision')}"]


def wheelhouse(*, log=print) -> Path:
    """Every file the base image's Python layer installs, downloaded once into a folder of this machine's
    cache: torch and torchvision with their dependencies, the npu-base lock (hash-checked) and vLLM's sdist.

    ``make npu-stack`` installs .venv-npu from it, and the stand-in base image's build reads it over
    127.0.0.1 (npu_rl.image.ascend_standin), so the two stand-ins install the same files. A folder per
    set of inputs (the lock, the pins, this platform); a lock file keeps two builds from filling it at once.
    """
    python = str(versions.get("common.python"))
    if "{}.{}".format(*sys.version_info[:2]) != python:
        # pip downloads for the interpreter it runs in; the base image's is the pinned one.
        raise RuntimeError(
            f"the base layer's files are fetched with Python {python} (common.python), "
            f"this is {platform.python_version()}"
        )
    lock = locks.get("npu-base").path
    key = hashlib.sha256(
        "\n".join(
            [
                lock.read_text(encoding="utf-8"),
                *torch_pins(),
                *sdist_pin(),
                platform.machine(),
                platform.python_version(),
            ]
        ).encode()
    ).hexdigest()[:16]
    folder = cache_dir().parent / "wheels" / f"ascend-base-{key}"
    done = folder / ".complete"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if done.is_file():
            return folder
        download = [sys.executable, "-m", "pip", "download", "--progress-bar", "off", "--dest", str(folder)]
        log(f"wheels: the base layer's files into {folder}")
        _run(download + torch_pins(), log=log)
        _run(download + ["--no-deps", "--require-hashes", "-r", str(lock)], log=log)
        sdist = fetch_sdist(*sdist_pin(), log=log)
        # A copy, not a link: the folder stays whole when the sdist cache is cleaned.
        shutil.copyfile(sdist, folder / sdist.name)
        done.write_text("\n".join(sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))) + "\n")
    return folder


def build(venv: Path, *, log=print) -> None:
    """Install the base image's Python layer into ``venv`` (made if missing), as its Dockerfile does,
    from the :func:`wheelhouse` (the stand-in base image installs the same files the same way:
    docker/Dockerfile.ascend-standin): torch, the npu-base lock, then vLLM built from its sdist with the
    empty target (``make npu-stack``; ``python -m npu_rl.envs.ascend_base build VENV``)."""
    files = wheelhouse(log=log)
    python = venv / "bin" / "python"
    if not python.is_file():
        _run([sys.executable, "-m", "venv", str(venv)], log=log)
    _run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], log=log)
    pip = [str(python), "-m", "pip", "install", "--progress-bar", "off", "--no-index", "--find-links", str(files)]
    log("[1/3] torch and torchvision, the base image's (PyPI's builds stand in)")
    _run(pip + torch_pins(), log=log)
    log("[2/3] vLLM's requirements, vllm-ascend and torch_npu (configs/locks/npu-base.txt)")
    _run(pip + ["--no-deps", "--require-hashes", "-r", str(locks.get("npu-base").path)], log=log)
    _stand_in_pth(python, log=log)
    log("[3/3] vLLM from its sdist with VLLM_TARGET_DEVICE=empty, on the torch above")
    name, version, _ = sdist_pin()
    _run(
        pip + ["--no-deps", "--no-build-isolation", str(files / f"{name}-{version}.tar.gz")],
        log=log,
        env={"VLLM_TARGET_DEVICE": "empty", "MAX_JOBS": "1"},
    )


def stand_in_pth() -> str:
    """The stand-in's one ``.pth`` line: site runs it in every interpreter start (it is in the venv and
    in the stand-in image's site-packages), so every process has it.

    Without CANN, torch_npu's native library cannot load, and torch 2.5 loads every installed device
    backend when it is imported (its ``torch.backends`` entry points): ``import torch`` itself fails, so
    the line sets ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``. transformers, vLLM and verl import torch_npu
    whenever it is installed, so it also hides it (``sys.modules["torch_npu"] = None``: what a host
    without torch_npu sees, so verl's device is the CPU) and leaves vllm-ascend's platform plugin out
    (``VLLM_PLUGINS=""``). ``NPU_RL_STAND_IN_BOUNDARY=1`` leaves the last two off to show where the real
    imports stop (tests/envs/test_npu_stack.py). A real base image loads torch_npu."""
    always = "".join(f"os.environ.setdefault({k!r}, {v!r}); " for k, v in ALWAYS_ENV.items())
    hiding = [f"os.environ.setdefault({k!r}, {v!r})" for k, v in HIDING_ENV.items()]
    hiding += [f"sys.modules.setdefault({m!r}, None)" for m in HIDDEN_MODULES]
    return f"import os, sys; {always}os.environ.get({BOUNDARY_ENV!r}) == '1' or ({', '.join(hiding)})\n"


def _stand_in_pth(python: Path, *, log) -> None:
    """The stand-in's ``.pth`` in the venv, as the stand-in base image writes it into its site-packages."""
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / PTH_NAME).write_text(stand_in_pth(), encoding="utf-8")
    log(
        f"stand-in: {', '.join(f'{k}={v!r}' for k, v in {**ALWAYS_ENV, **HIDING_ENV}.items())}, "
        f"{', '.join(HIDDEN_MODULES)} hidden (no CANN for torch_npu to load)"
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] == "build":
        try:
            build(Path(argv[1]))
        except (RuntimeError, OSError) as err:
            print(f"npu-rl: error: {err}", file=sys.stderr)
            return 1
        return 0
    if argv == ["pip-check"]:
        # The image build's and the NPU stack test's check: every requirement of every installed
        # package holds, but the one the stand-in cannot meet (unexpected_pip_check).
        problems = pip_check()
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            print(f"npu-rl: error: pip check: {len(problems)} broken requirement(s) above", file=sys.stderr)
            return 1
        print(
            "pip check: every requirement holds"
            + (" (but torch_npu's torch==2.5.1+cpu: the stand-in's PyPI torch)" if stand_in_torch() else "")
        )
        return 0
    if argv == ["sdist"]:
        print(fetch_sdist(*sdist_pin()))
        return 0
    if argv == ["wheelhouse"]:
        try:
            print(wheelhouse(log=lambda line: print(line, file=sys.stderr)))
        except (RuntimeError, OSError) as err:
            print(f"npu-rl: error: {err}", file=sys.stderr)
            return 1
        return 0
    print("usage: python -m npu_rl.envs.ascend_base build VENV | pip-check | sdist | wheelhouse", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
