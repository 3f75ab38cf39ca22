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


def test_the_default_line_pins_the_installed_verl():
    assert versions.get("verl.version") == metadata.version("verl").split("+")[0]


def test_pins_are_read_from_the_file_given(tmp_path):
    path = tmp_path / "versions.yaml"
    path.write_text("verl:\n  version: 1.2.3\n")
    assert versions.get("verl.version", versions.load(str(path))) == "1.2.3"


def test_cli_prints_one_pin():
    out = subprocess.run(
        [sys.executable, "-m", "npu_rl.versions", "get", "common.ray"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == versions.get("common.ray")


def test_unknown_pin_is_a_clear_error():
    with pytest.raises(KeyError, match="nope.missing"):
        versions.get("nope.missing")
