"""The base image's Python layer as requirements, read from the pinned vLLM source release.

vLLM's requirements with the empty target (``requirements/common.txt``; with ``build``, also what
building it from its sdist needs), vllm-ascend and torch_npu: what ``configs/locks/npu-base.txt`` is
resolved from (npu_rl.envs.locks) and what npu_rl.envs.ascend_base installs. The sdist is fetched
from the package index once, checked against its pinned sha256 and cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import urllib.request
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from .. import versions

SIMPLE_INDEX = "https://pypi.org/simple"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "npu-rl" / "sdists"


def sdist_pin(pins: dict | None = None) -> tuple[str, str, str]:
    """(name, version, sha256) of the vLLM source release the base image is built from (of the stack
    line whose ``pins`` are given; the default line's by default)."""
    return "vllm", str(versions.get("ascend.vllm", pins)), str(versions.get("ascend.vllm_sdist_sha256", pins))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_sdist(name: str, version: str, sha256: str, *, log=print) -> Path:
    """The release's sdist from the package index, checked against its pinned sha256 and cached.

    pip cannot fetch it (``pip download`` prepares its metadata, which for vLLM means building
    against torch 2.7), so it is read from the index's JSON page (PEP 691).
    """
    filename = f"{name.replace('-', '_')}-{version}.tar.gz"
    target = cache_dir() / filename
    if target.is_file() and _sha256(target) == sha256:
        return target
    request = urllib.request.Request(
        f"{SIMPLE_INDEX}/{canonicalize_name(name)}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        files = json.load(response)["files"]
    entry = next((f for f in files if f["filename"] == filename), None)
    if entry is None:
        raise RuntimeError(f"{SIMPLE_INDEX} has no {filename}")
    log(f"fetching {filename} ({entry.get('size', 0) / 1e6:.1f} MB)")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    urllib.request.urlretrieve(entry["url"], partial)
    got = _sha256(partial)
    if got != sha256:
        partial.unlink()
        raise RuntimeError(f"{filename} has sha256 {got}, configs/versions.yaml pins {sha256}")
    partial.replace(target)
    return target


def _member(sdist: Path, relative: str) -> str:
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        member = tar.extractfile(f"{top}/{relative}")
        if member is None:
            raise RuntimeError(f"{sdist.name} has no {relative}")
        return member.read().decode("utf-8")


def _requirement_lines(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].split("\t#", 1)[0].strip()
        if line and not line.startswith(("#", "-")):
            out.append(str(Requirement(line)))
    return out


def vllm_requirements(sdist: Path, *, build: bool) -> list[str]:
    """What installing vLLM with the empty target requires (``requirements/common.txt``) and, with
    ``build``, what building it from its sdist without build isolation needs (``[build-system]
    requires``) but torch: the base image's is the one it is built on."""
    runtime = _requirement_lines(_member(sdist, "requirements/common.txt"))
    if not build:
        return runtime
    tools = tomllib.loads(_member(sdist, "pyproject.toml"))["build-system"]["requires"]
    tools = [str(Requirement(r)) for r in tools if canonicalize_name(Requirement(r).name) != "torch"]
    return list(dict.fromkeys(runtime + tools))


def torch_npu_takes_posts(pins: dict | None = None) -> bool:
    """Whether the torch_npu pin takes any post release of itself: Ascend publishes post releases of a pin
    without one (2.5.1 -> 2.5.1.post1); a pin with one (2.10.0.post4) is that release."""
    return ".post" not in str(versions.get("ascend.torch_npu", pins))


def torch_npu_spec(pins: dict | None = None) -> str:
    """torch_npu's requirement (:func:`torch_npu_takes_posts`)."""
    pin = str(versions.get("ascend.torch_npu", pins))
    return f"torch-npu=={pin}.*" if torch_npu_takes_posts(pins) else f"torch-npu=={pin}"


def base_requirements(sdist: Path, *, build: bool = False, pins: dict | None = None) -> list[str]:
    """The base image's Python layer above torch: vLLM's requirements, vllm-ascend, torch_npu;
    with ``build``, also what the stand-in needs to build vLLM in place (the base image builds
    it in pip's isolated build environment, which does not stay)."""
    return vllm_requirements(sdist, build=build) + [
        f"vllm-ascend=={versions.get('ascend.vllm_ascend', pins)}",
        torch_npu_spec(pins),
    ]
