"""The base image's Python layer (``ascend.base_image``), and the stand-in of it built here.

vllm-ascend v0.9.1's Dockerfile makes ``quay.io/ascend/vllm-ascend:v0.9.1`` on CANN 8.2.RC1's image
(``quay.io/ascend/cann:8.2.rc1-910b-ubuntu22.04-py3.11``): vLLM 0.9.1 from source with ``VLLM_TARGET_DEVICE=empty``
(requirements: ``requirements/common.txt``, ``setup.py`` ``get_requirements``: ``_no_device()``), then
vllm-ascend 0.9.1, which requires ``torch-npu==2.5.1.post1`` on torch 2.5.1. Here that layer is the ``npu-base``
lock (npu_rl.envs.locks) and constrains the npu locks, so nothing npu-rl installs on top replaces a version
vLLM, vllm-ascend or torch_npu asks for; :func:`build` installs it into a venv the same way.

Another stack line's base is made the same way from its own pins and locks (``configs/locks/<line>/``):
for cann9.1-verl0.9, vllm-ascend v0.23.0's Dockerfile (:18, :41-72) on ``quay.io/ascend/cann:9.1.0-910b-
ubuntu22.04-py3.12``: vLLM 0.23.0 from source with the empty target, then vllm-ascend 0.23.0 with its
requirements (torch 2.10.0, torchvision 0.25.0, torchaudio 2.10.0, torch-npu 2.10.0.post4, ...).

What the stand-in lacks (the one place this is stated): CANN, the NPU kernels and torch_npu's native
library, so ``import torch_npu`` fails, and everything that imports it (vllm-ascend's platform, patches,
worker): :func:`stand_in_pth` keeps every process from trying. On x86_64, PyTorch's ``torch==2.5.1+cpu``
(``2.10.0+cpu`` on cann9.1-verl0.9): the one ``pip check`` line allowed (:func:`unexpected_pip_check`).
vLLM's unpinned requirements are as of ``tools.lock_exclude_newer``, not the day Ascend built the image;
its pinned ones (lark, outlines, ...) match. On cann9.1-verl0.9 also:

- triton-ascend 3.2.2, which vllm-ascend 0.23.0 requires and the base image installs from Ascend's own
  index (Dockerfile:70): PyPI has no such release (``ascend.base_only``), so the stand-in has none and its
  ``pip check`` names it (the second allowed line); Triton kernels of vllm-ascend are NPU-only anyway.
- arctic-inference 0.1.1 (a vllm-ascend requirement PyPI has only as an sdist) is a wheel built here from
  the hash-checked sdist (:func:`wheelhouse`), as the base image's pip builds it in place; its CUDA ops are
  not built either way.
- Python: a CPython 3.12 built from python.org's source on this machine (the line's interpreter, pyenv's
  3.12.1) copied into python:3.12-slim-bookworm's stand-in (npu_rl.image.base), where CANN's image has its
  own 3.12 build on Ubuntu 22.04; Debian 12's glibc 2.36 takes vllm-ascend's manylinux_2_34 wheels.
- Not installed: what the base image's Dockerfile adds beside its Python layer: vLLM's ``[audio]`` extra,
  ``modelscope``, ``mooncake-transfer-engine-npu`` (Huawei's mirror) and its own Ray (>=2.47.1,<=2.48.0), which
  the images replace with the pinned Ray 2.60.0 anyway.
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

from packaging.utils import canonicalize_name

from .. import versions
from . import interpreter, locks
from .base_layer import cache_dir, fetch_sdist, sdist_pin, torch_npu_takes_posts

# What the stand-in sets because CANN is absent (stand_in_pth): always; and, unless BOUNDARY_ENV is 1,
# what hides torch_npu.
ALWAYS_ENV = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
HIDING_ENV = {"VLLM_PLUGINS": ""}
HIDDEN_MODULES = ("torch_npu",)
BOUNDARY_ENV = "NPU_RL_STAND_IN_BOUNDARY"
# uv reads no pip or uv configuration of the machine (as the Makefile's installs).
UV_ENV = {"UV_NO_CONFIG": "1"}
PTH_NAME = "npu-rl-stand-in.pth"


def _pins(line: str | None) -> dict:
    return versions.load(stack=line)


def expected_pip_check(line: str | None = None) -> list[re.Pattern[str]]:
    """The ``pip check`` lines the stand-in of ``line``'s base cannot avoid (see :func:`unexpected_pip_check`):
    torch_npu's x86_64 wheel pins the CPU build of torch, which PyPI does not carry; and each package of the
    base image that PyPI does not carry (``ascend.base_only``), left out, which what requires it names."""
    pins = _pins(line)
    torch, torch_npu = (re.escape(str(versions.get(k, pins))) for k in ("ascend.torch", "ascend.torch_npu"))
    post = r"(\.post\d+)?" if torch_npu_takes_posts(pins) else ""  # the base has one of the pin's post releases
    out = [
        re.compile(rf"^torch-npu {torch_npu}{post} has requirement torch=={torch}\+cpu, but you have torch {torch}\.$")
    ]
    for name in versions.get("ascend", pins).get("base_only", ()):
        out.append(re.compile(rf"^\S+ \S+ requires {re.escape(name)}, which is not installed\.$"))
    return out


def stand_in_torch(torch_version: str | None = None, machine: str | None = None, line: str | None = None) -> bool:
    """Whether PyPI's torch stands in for the base image's CPU build (x86_64, a torch without a local
    label); by default of this interpreter's environment."""
    if torch_version is None:
        try:
            torch_version = metadata.version("torch")
        except metadata.PackageNotFoundError:
            return False
    return (machine or platform.machine()) == "x86_64" and torch_version == str(
        versions.get("ascend.torch", _pins(line))
    )


def unexpected_pip_check(
    output: str, stand_in: bool, line: str | None = None, stand_in_base: bool | None = None
) -> list[str]:
    """The lines of ``pip check`` output that the stand-in's known differences do not explain (allowed only
    where PyPI's torch stands in, :func:`stand_in_torch`); on a real base image nothing is allowed.

    torch_npu for x86_64 requires the CPU build of its torch (``torch==2.5.1+cpu``), which only PyTorch's own
    index serves (unreachable here): PyPI's torch stands in, with the CUDA wheels and triton PyPI's build
    depends on, and ``pip check`` prints exactly that line (:func:`expected_pip_check`). The base image's
    Dockerfile uninstalls triton, which its CPU torch does not need; the stand-in keeps it because its
    torch does. On aarch64 PyPI's torch is the CPU build and there is no such line. A line whose base image
    holds packages PyPI lacks (``ascend.base_only``: triton-ascend on cann9.1-verl0.9) adds one line each."""
    torch, *base_only = expected_pip_check(line)
    # What PyPI lacks is missing from every stand-in base, aarch64's too (whose PyPI torch is the CPU build).
    stand_in_base = stand_in if stand_in_base is None else stand_in_base
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith("No broken requirements")]
    return [
        text
        for text in lines
        if not (stand_in and torch.match(text)) and not (stand_in_base and any(e.match(text) for e in base_only))
    ]


def pip_check(line: str | None = None) -> list[str]:
    """``pip check`` of this interpreter's environment, less the stand-in's expected lines."""
    proc = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=600)
    # NPU_RL_STAND_IN: set by the stand-in base image (docker/Dockerfile.ascend-standin).
    stand_in_base = stand_in_torch(line=line) or bool(os.environ.get("NPU_RL_STAND_IN"))
    return unexpected_pip_check(proc.stdout + proc.stderr, stand_in_torch(line=line), line, stand_in_base)


def _run(cmd: list[str], *, log, env: dict | None = None) -> None:
    log("+ " + " ".join(cmd))
    proc = subprocess.run(cmd, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited with {proc.returncode}")


def torch_pins(line: str | None = None) -> list[str]:
    """The base image's torch and its companions (torchaudio where the line's vllm-ascend requires it)."""
    ascend = versions.get("ascend", _pins(line))
    return [f"{name}=={ascend[name]}" for name in ("torch", "torchvision", "torchaudio") if name in ascend]


def _python_for(line: str | None) -> str:
    """The interpreter pip downloads with: this one when it is the line's Python (``common.python``), else
    the line's found on this machine (npu_rl.envs.interpreter), since pip picks files for the Python it
    runs in."""
    python = str(versions.get("common.python", _pins(line)))
    if "{}.{}".format(*sys.version_info[:2]) == python:
        return sys.executable
    if line is None:
        raise RuntimeError(
            f"the base layer's files are fetched with Python {python} (common.python), "
            f"this is {platform.python_version()}"
        )
    try:
        return interpreter.find(line)
    except LookupError as err:
        raise RuntimeError(str(err)) from None


def _python_version(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"{python} did not start: {(out.stderr.strip().splitlines() or ['no output'])[-1]}")
    return out.stdout.strip()


def wheelhouse(line: str | None = None, *, log=print) -> Path:
    """Every file the base image's Python layer installs, downloaded once into a folder of this machine's
    cache: torch and its companions with their dependencies, the npu-base lock (hash-checked) and vLLM's
    sdist; of the default stack line, or of ``line``.

    ``make npu-stack`` installs .venv-npu from it, and the stand-in base image's build reads it over
    127.0.0.1 (npu_rl.image.ascend_standin), so the two stand-ins install the same files. A folder per
    set of inputs (the lock, the pins, this platform); a lock file keeps two builds from filling it at once.
    """
    pins = _pins(line)
    python = _python_for(line)
    lock = locks.get(locks.lock_name(line, "npu-base")).path
    key = hashlib.sha256(
        "\n".join(
            [
                lock.read_text(encoding="utf-8"),
                *torch_pins(line),
                *sdist_pin(pins),
                platform.machine(),
                # The Python the files are for: the version of the interpreter that fetches them.
                _python_version(python),
            ]
        ).encode()
    ).hexdigest()[:16]
    folder = cache_dir().parent / "wheels" / f"ascend-base-{key}"
    done = folder / ".complete"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if not done.is_file():
            download = [python, "-m", "pip", "download", "--progress-bar", "off", "--dest", str(folder)]
            log(f"wheels: the base layer's files into {folder}")
            _run(download + torch_pins(line), log=log)
            _run(download + ["--no-deps", "--require-hashes", "-r", str(lock)], log=log)
            built = _wheels_of_sdists(folder, lock, python, log=log)
            sdist = fetch_sdist(*sdist_pin(pins), log=log)
            # A copy, not a link: the folder stays whole when the sdist cache is cleaned.
            shutil.copyfile(sdist, folder / sdist.name)
            (folder / LAYER_FILE).write_text(_layer_requirements(lock, built), encoding="utf-8")
            done.write_text("\n".join(sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))) + "\n")
        elif not (folder / LAYER_FILE).is_file():  # a folder filled before the layer file was written
            (folder / LAYER_FILE).write_text(lock.read_text(encoding="utf-8"), encoding="utf-8")
    return folder


# The base layer's requirements as the stand-ins install them (in the wheelhouse): the npu-base lock, each
# package PyPI has only as an sdist pinned to the wheel built here from that hash-checked sdist.
LAYER_FILE = "base-layer.txt"


def _wheels_of_sdists(folder: Path, lock: Path, python: str, *, log) -> dict[str, Path]:
    """Build a wheel from each sdist of the lock in ``folder`` (pip's build isolation, on this machine):
    the base image's pip builds them the same way when it installs them (vllm-ascend 0.23.0 asks for
    arctic-inference 0.1.1, which PyPI has only as an sdist), while the stand-in's build has no index to
    take the build requirements from. By canonical name."""
    wanted = {p.name for p in locks.parse(lock.read_text(encoding="utf-8"))}
    built: dict[str, Path] = {}
    for sdist in sorted(folder.glob("*.tar.gz")):
        project, version = sdist.name[: -len(".tar.gz")].rsplit("-", 1)
        name = canonicalize_name(project)
        if name not in wanted:
            continue
        log(f"wheels: building {sdist.name} (PyPI has no wheel of it)")
        stem = f"{project.replace('-', '_')}-{version}"
        for old in folder.glob(f"{stem}-*.whl"):  # an earlier, interrupted fill's
            old.unlink()
        _run(
            [python, "-m", "pip", "wheel", "--no-deps", "--progress-bar", "off", "-w", str(folder), str(sdist)], log=log
        )
        wheels = sorted(folder.glob(f"{stem}-*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"building {sdist.name} left {len(wheels)} wheels named {stem}-*.whl in {folder}")
        built[name] = wheels[0]
    return built


def _layer_requirements(lock: Path, built: dict[str, Path]) -> str:
    """The lock's text with each built package's block pinned to its wheel's hash."""
    text = lock.read_text(encoding="utf-8")
    for package in locks.parse(text):
        if package.name in built:
            wheel = built[package.name]
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            block = (
                f"{package.name}=={package.version} \\\n    --hash=sha256:{digest}\n"
                f"    # built here from its sdist: {wheel.name}"
            )
            text = text.replace(package.text, block)
    return text


def build(venv: Path, *, log=print) -> None:
    """Install the base image's Python layer into ``venv`` (made if missing) from the :func:`wheelhouse`, the
    files its Dockerfile installs in its order: torch, the npu-base lock, then vLLM built from its sdist with the
    empty target (``make npu-stack``; ``python -m npu_rl.envs.ascend_base build VENV``).

    uv installs them here, hash-checked and from the wheelhouse only (measured: 256 s with pip, about 30 s with
    uv, the same 326 distributions at the same versions). pip installs the same files in the stand-in base image
    (docker/Dockerfile.ascend-standin), as the base's own Dockerfile does: that is where pip meets them."""
    files = wheelhouse(log=log)
    python = venv / "bin" / "python"
    uv = Path(sys.executable).with_name("uv")  # .venv's pinned uv (tools.uv), as every environment's install
    if not python.is_file():
        # Seeded with pip: the tests run the image build's `pip check` in it.
        _run([str(uv), "venv", "-q", "--seed", "--python", sys.executable, str(venv)], log=log, env=UV_ENV)
    install = [str(uv), "pip", "install", "-q", "--python", str(python), "--compile-bytecode", "--no-index"]
    install += ["--find-links", str(files)]
    log("[1/3] torch and torchvision, the base image's (PyPI's builds stand in)")
    _run(install + torch_pins(), log=log, env=UV_ENV)
    log("[2/3] vLLM's requirements, vllm-ascend and torch_npu (configs/locks/npu-base.txt)")
    _run(install + ["--no-deps", "--require-hashes", "-r", str(files / LAYER_FILE)], log=log, env=UV_ENV)
    _stand_in_pth(python, log=log)
    log("[3/3] vLLM from its sdist with VLLM_TARGET_DEVICE=empty, on the torch above")
    name, version, _ = sdist_pin()
    _run(
        install + ["--no-deps", "--no-build-isolation", str(files / f"{name}-{version}.tar.gz")],
        log=log,
        env={**UV_ENV, "VLLM_TARGET_DEVICE": "empty", "MAX_JOBS": "1"},
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
    line = None
    if len(argv) >= 2 and argv[-2] == "--stack":
        line, argv = argv[-1] or None, argv[:-2]
    if argv == ["pip-check"]:
        # The image build's and the NPU stack test's check: every requirement of every installed
        # package holds, but the one the stand-in cannot meet (unexpected_pip_check).
        problems = pip_check(line)
        for line in problems:
            print(line, file=sys.stderr)
        if problems:
            print(f"npu-rl: error: pip check: {len(problems)} broken requirement(s) above", file=sys.stderr)
            return 1
        print(
            "pip check: every requirement holds"
            + (" (but what the stand-in lacks: npu_rl.envs.ascend_base)" if stand_in_torch(line=line) else "")
        )
        return 0
    if argv == ["sdist"]:
        print(fetch_sdist(*sdist_pin()))
        return 0
    if argv == ["wheelhouse"]:
        try:
            print(wheelhouse(line, log=lambda text: print(text, file=sys.stderr)))
        except (RuntimeError, OSError) as err:
            print(f"npu-rl: error: {err}", file=sys.stderr)
            return 1
        return 0
    print(
        "usage: python -m npu_rl.envs.ascend_base build VENV | pip-check [--stack LINE] | sdist "
        "| wheelhouse [--stack LINE]",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
