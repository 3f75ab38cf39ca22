"""Atlas hosts are Kunpeng (aarch64): every lock meant for Ascend hosts installs there with its line's Python.

pip resolves each lock for the target (`pip install --dry-run --report --platform ...`: no emulation)
and every line must come as a wheel built for aarch64 (or for any platform) or as an sdist that builds
a pure-Python wheel; a base image's layer (npu-base) may hold a compiled sdist, which that image's own
build compiles (arctic-inference on cann9.1-verl0.9: npu_rl.envs.ascend_base). pip evaluates environment
markers against the machine it runs on, not the target, so the lines are first chosen with aarch64's
markers (a universal lock pins some packages per platform).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from packaging.markers import Marker

from npu_rl import versions
from npu_rl.envs import locks

pytestmark = pytest.mark.slow

# The patch level decides some pins (python_full_version markers): the lines' interpreters here.
FULL = {"3.11": "3.11.7", "3.12": "3.12.1"}
AARCH64 = {
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "aarch64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}
# The base image is Ubuntu 22.04 (glibc 2.35): every manylinux level up to it.
PLATFORMS = [f"manylinux_2_{minor}_aarch64" for minor in range(35, 16, -1)] + ["manylinux2014_aarch64"]
ASCEND_LOCKS = [name for name, env in sorted(locks.envs().items()) if env.platform is None]


def _markers(env: locks.Env) -> dict[str, str]:
    return {**AARCH64, "python_version": env.python, "python_full_version": FULL[env.python]}


def _aarch64_lines(env: locks.Env) -> str:
    return (
        "\n".join(
            p.text.split(" ;")[0].rstrip(" \\") + " \\\n" + "\n".join(p.text.splitlines()[1:])
            for p in locks.read(env)
            if not p.marker or Marker(p.marker).evaluate(_markers(env))
        )
        + "\n"
    )


def test_the_ascend_locks_are_the_universal_ones():
    lines = [f"{line}/" for line in versions.line_names() if line != versions.default_line()]
    assert set(ASCEND_LOCKS) == {"npu", "npu-base", "npu-eval"} | {
        f"{p}{n}" for p in lines for n in ("npu", "npu-base")
    }


@pytest.mark.parametrize("name", ASCEND_LOCKS)
def test_every_line_of_an_ascend_lock_installs_on_aarch64(name, tmp_path):
    env = locks.get(name)
    reqs = tmp_path / f"{name.replace('/', '-')}-aarch64.txt"
    reqs.write_text(_aarch64_lines(env), encoding="utf-8")
    report = tmp_path / "report.json"
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--no-deps",
        "--require-hashes",
        # An sdist's metadata from the build tools here: isolated, pip would first install each sdist's build
        # requirements for this machine (arctic-inference's: torch 2.7.0 and a backtrack through grpcio-tools,
        # a minute of downloads and gigabytes on disk, which once failed CI midway); the wheel that the
        # files' names are checked for is the image's build's, not this.
        "--no-build-isolation",
        "--quiet",
        "--report",
        str(report),
        "--python-version",
        FULL[env.python],
        "--implementation",
        "cp",
        "--abi",
        "cp" + env.python.replace(".", ""),
        "--abi",
        "abi3",
        "--abi",
        "none",
        "-r",
        str(reqs),
    ]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, "\n".join(x for x in run.stderr.splitlines() if "is ignored" not in x)[-3000:]
    chosen = {
        locks.canonicalize_name(item["metadata"]["name"]): item["download_info"]["url"].rsplit("/", 1)[-1]
        for item in json.loads(report.read_text())["install"]
    }
    expected = {p.name for p in locks.read(env) if not p.marker or Marker(p.marker).evaluate(_markers(env))}
    assert len(chosen) == len(expected), sorted(expected ^ set(chosen))
    wrong = [f for f in chosen.values() if f.endswith(".whl") and not f.endswith("-any.whl") and "aarch64" not in f]
    assert not wrong, f"{name}: wheels for another machine: {wrong}"
    # An sdist must build a wheel for every platform: a compiled one would need a compiler on the host. The
    # base layer's are the base image's to build (it has the compilers: vllm-ascend's Dockerfile:26-33).
    if env.base_layer == "is" and env.line:
        return
    for filename in sorted(f for f in chosen.values() if not f.endswith(".whl")):
        project, version = filename[: -len(".tar.gz")].rsplit("-", 1)
        out = tmp_path / "wheels" / project
        built = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                "-w",
                str(out),
                f"{project}=={version}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert built.returncode == 0, built.stderr[-2000:]
        wheels = [w.name for w in out.glob("*.whl")]
        assert wheels and all(w.endswith("-none-any.whl") for w in wheels), f"{filename} builds {wheels}"
