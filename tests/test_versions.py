"""configs/versions.yaml is the one place for pins, and the environment follows it."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest
from packaging.requirements import Requirement

from npu_rl import versions


def test_installed_cpu_environment_satisfies_the_pins():
    for line in versions.cpu_constraints():
        req = Requirement(line)
        installed = metadata.version(req.name).split("+")[0]
        assert req.specifier.contains(installed, prereleases=True), f"{req.name} {installed} does not match {line}"


def test_verl_pin_is_the_v0_6_1_release_commit():
    assert versions.get("verl.version") == "0.6.1"
    assert versions.get("verl.commit") == "d62da4950573d7a4b7ef2362337952e7ab59e78d"
    assert versions.get("ascend.base_image") == "quay.io/ascend/vllm-ascend:v0.9.1"
    assert versions.get("ascend.cann") == "8.2.RC1"


def test_cli_prints_one_pin():
    out = subprocess.run([sys.executable, "-m", "npu_rl.versions", "get", "common.ray"], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == versions.get("common.ray")


def test_unknown_pin_is_a_clear_error():
    with pytest.raises(KeyError, match="nope.missing"):
        versions.get("nope.missing")
