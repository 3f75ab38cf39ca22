"""The locks under configs/locks/: fresh against their sources, consistent with them, and what .venv has."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from npu_rl.envs import locks

REPO = Path(__file__).resolve().parents[2]
ENVS = sorted(locks.envs())
# Marker environment of the CPU locks' platform (x86_64 Linux, Python 3.11).
CPU_MARKERS = {
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "python_version": "3.11",
    "python_full_version": "3.11.7",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}
AARCH64_MARKERS = {**CPU_MARKERS, "platform_machine": "aarch64"}


@pytest.mark.parametrize("name", ENVS)
def test_every_lock_is_fresh(name):
    assert locks.stale(locks.get(name)) is None, "run `make lock`"


def test_check_names_the_locks_a_moved_pin_makes_stale(tmp_path):
    home = tmp_path / "home"
    shutil.copytree(REPO / "configs", home / "configs")
    shutil.copy(REPO / "pyproject.toml", home / "pyproject.toml")
    pins = home / "configs" / "stacks" / "cann8.2-verl0.6.yaml"  # the default line's
    pins.write_text(pins.read_text().replace('pyarrow: "23.0.1"', 'pyarrow: "22.0.0"'))
    out = subprocess.run(
        [sys.executable, "-m", "npu_rl.envs.locks", "check"],
        capture_output=True,
        text=True,
        env={**os.environ, "NPU_RL_HOME": str(home)},
        timeout=120,
    )
    assert out.returncode == 1
    stale = {line.split()[2].split("/")[-1].rstrip(":") for line in out.stderr.splitlines()}
    # pyarrow is pinned in the CPU (both) and NPU sets and dev follows cpu; the eval sets pin it too.
    assert stale == {"cpu.txt", "dev.txt", "eval.txt", "npu.txt", "npu-eval.txt", "vllm-cpu.txt"}, out.stderr
    assert all(line.startswith("npu-rl: error: ") for line in out.stderr.splitlines())


def _pins(env: locks.Env) -> dict[str, locks.Locked]:
    return {p.name: p for p in locks.read(env)}


def _markers(env: locks.Env, machine: str) -> dict[str, str]:
    full = {"3.11": "3.11.7", "3.12": "3.12.1"}[env.python]
    return {**CPU_MARKERS, "platform_machine": machine, "python_version": env.python, "python_full_version": full}


@pytest.mark.parametrize("name", ENVS)
def test_lock_satisfies_every_requirement_and_constraint(name):
    env = locks.get(name)
    pins = _pins(env)
    provided = {canonicalize_name(p) for p in env.provided}
    # Over a base layer: what the base's lock has is there already (a requirement both ask for stays
    # out of this lock when only the base's packages need it besides).
    base = _pins(locks.get(f"{env.line}/npu-base" if env.line else "npu-base")) if env.base_layer == "over" else {}
    machines = ["x86_64"] if env.platform else ["x86_64", "aarch64"]
    for markers in [_markers(env, m) for m in machines]:
        # A requirement must be in the lock; a constraint only binds what is there.
        for line, required in [*((r, True) for r in env.requirements), *((c, False) for c in env.constraints)]:
            req = Requirement(line)
            if req.marker and not req.marker.evaluate(markers):
                continue
            key = canonicalize_name(req.name)
            if key in provided:
                assert key not in pins, f"{req.name} is the base image's and must not be in {name}.txt"
                continue
            if not required and key not in pins:
                continue
            if key not in pins and key in base:
                assert req.specifier.contains(base[key].version, prereleases=True), (line, base[key].version)
                continue
            assert key in pins, f"{name}.txt lacks {req.name}"
            assert req.specifier.contains(pins[key].version, prereleases=True), (line, pins[key].version)


@pytest.mark.parametrize("name", ENVS)
def test_every_package_is_pinned_with_hashes(name):
    for p in locks.read(locks.get(name)):
        assert "--hash=sha256:" in p.text, p.name


@pytest.mark.parametrize("name", ["npu", "npu-eval"])
def test_ascend_locks_leave_the_base_image_packages_out(name):
    pins = _pins(locks.get(name))
    for base in ("torch", "torch-npu", "torchvision", "triton"):
        assert base not in pins
    assert not [p for p in pins if p.startswith("nvidia-cu")], "torch's CUDA wheels came in with it"
    # numpy and pyarrow, the pair that must import together (the NPU stack test imports them).
    assert pins["numpy"].version.startswith("1.")
    assert pins["pyarrow"].version == str(locks.versions.get("common.pyarrow"))


def test_dropping_provided_packages_keeps_what_others_need():
    text = "\n".join(
        [
            "torch==2.5.1 \\",
            "    --hash=sha256:aa",
            "    # via -r -",
            "nvidia-cublas-cu12==12.4.5.8 \\",
            "    --hash=sha256:bb",
            "    # via",
            "    #   nvidia-cudnn-cu12",
            "    #   torch",
            "nvidia-cudnn-cu12==9.1.0.70 \\",
            "    --hash=sha256:cc",
            "    # via torch",
            "sympy==1.13.1 \\",
            "    --hash=sha256:dd",
            "    # via",
            "    #   -r -",
            "    #   torch",
            "filelock==3.0 \\",
            "    --hash=sha256:ee",
            "    # via",
            "    #   datasets",
            "    #   torch",
            "datasets==5.0.1 \\",
            "    --hash=sha256:ff",
            "    # via -r -",
        ]
    )
    kept = [p.name for p in locks._drop_provided(locks.parse(text), ("torch",))]
    assert kept == ["sympy", "filelock", "datasets"]


def test_the_venv_is_installed_from_the_cpu_and_dev_locks():
    """`make venv` installs the locks as they are: every locked package is there at its pin."""
    if Path(sys.prefix).name != ".venv":
        pytest.skip("not the checkout's .venv")
    # The venv's own site-packages: Ray puts its vendored copies (psutil, ...) on sys.path once imported.
    site = [sysconfig.get_paths()["purelib"]]
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions(path=site)}
    wrong = []
    for name in ("cpu", "dev"):
        for p in locks.read(locks.get(name)):
            if p.marker and not Requirement(f"x; {p.marker}").marker.evaluate():
                continue
            have = installed.get(p.name)
            if have != p.version:
                wrong.append(f"{p.name}: locked {p.version}, installed {have}")
    assert not wrong, wrong[:10]


@pytest.mark.parametrize("name", ["cpu", "npu"])  # a platform lock and a universal one
def test_make_lock_regenerates_a_lock_as_it_is(tmp_path, name):
    """`make lock`'s own command on a copy of the checkout: uv keeps the lock's pins where they still fit
    (releases that appeared in the index since would otherwise move unrelated packages), and the package
    overridden away is not written."""
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    out = subprocess.run(
        [sys.executable, "-m", "npu_rl.envs.locks", "compile", name],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NPU_RL_HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / locks.LOCK_DIR / f"{name}.txt").read_text() == locks.get(name).path.read_text()


@pytest.mark.parametrize("name", ENVS)
def test_no_lock_installs_what_every_ray_process_would_pay_seconds_to_import(name):
    """jsonschema imports rfc3987-syntax whenever it is installed, and that builds an Earley parser at
    import (2.5-5 s of CPU here); Ray imports jsonschema in every process it starts."""
    assert "rfc3987-syntax" not in {p.name for p in locks.read(locks.get(name))}


def test_a_ray_process_does_not_load_rfc3987_syntax():
    if Path(sys.prefix).name != ".venv":
        pytest.skip("not the checkout's .venv")
    probe = "import sys, ray; print('jsonschema' in sys.modules, 'rfc3987_syntax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["True", "False"], out.stdout + out.stderr


def _pins_on(env: locks.Env, markers: dict) -> dict[str, locks.Locked]:
    """The pins of a universal lock that hold on one platform (it may pin a package per Python)."""
    return {
        p.name: p for p in locks.read(env) if not p.marker or Requirement(f"x; {p.marker}").marker.evaluate(markers)
    }


@pytest.fixture(scope="module")
def base_layer_requirements(tmp_path_factory) -> list[str]:
    """What the base image's layer requires of the packages around it: vLLM's requirements (read from
    its pinned sdist, as the lock was resolved) and vllm-ascend's and torch_npu's (their wheels' own
    metadata, downloaded with pip: not what the lock module says of them)."""
    from npu_rl import versions
    from npu_rl.envs import base_layer

    sdist = base_layer.fetch_sdist(*base_layer.sdist_pin())
    out = base_layer.vllm_requirements(sdist, build=False)
    folder = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "--platform",
            "manylinux2014_x86_64",
            "--python-version",
            "3.11",
            "-d",
            str(folder),
            f"vllm-ascend=={versions.get('ascend.vllm_ascend')}",
            f"torch-npu=={versions.get('ascend.torch_npu')}.*",
        ],
        check=True,
        timeout=600,
    )
    wheels = sorted(folder.glob("*.whl"))
    assert len(wheels) == 2, wheels
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            out += [
                line.split(":", 1)[1].strip()
                for line in z.read(meta).decode().splitlines()
                if line.startswith("Requires-Dist:")
            ]
    return out


@pytest.mark.parametrize("name", ["npu", "npu-eval"])
def test_ascend_locks_keep_every_version_the_base_layer_requires(name, base_layer_requirements):
    """Installed with --no-deps over the base image, a lock must not replace a version vLLM, vllm-ascend
    or torch_npu asks for (vLLM 0.9.1 pins lark 1.2.2); the chip's own packages must match them too."""
    from npu_rl import versions

    env = locks.get(name)
    chip = {"torch": versions.get("ascend.torch"), "torchvision": versions.get("ascend.torchvision")}
    broken = []
    for markers in (CPU_MARKERS, AARCH64_MARKERS):
        pins = _pins_on(env, markers)
        for line in base_layer_requirements:
            req = Requirement(line)
            if req.marker and not req.marker.evaluate(markers):
                continue
            key = canonicalize_name(req.name)
            have = pins[key].version if key in pins else chip.get(key)
            # torch_npu's x86_64 wheel asks for torch 2.5.1+cpu: the base image's, whatever the lock says.
            if have is None or (key == "torch" and "+" in str(req.specifier)):
                continue
            if not req.specifier.contains(str(have), prereleases=True):
                broken.append(
                    f"{name}.txt has {key}=={have}, the base layer requires {line!r} ({markers['platform_machine']})"
                )
    assert not broken, "\n".join(sorted(set(broken)))
    assert len(base_layer_requirements) > 40  # vLLM's common requirements were read
