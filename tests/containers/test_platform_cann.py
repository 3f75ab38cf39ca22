import subprocess
import sys
from pathlib import Path

import pytest

from npu_rl.platform import cann


def _toolkit(root: Path, version: str, kernels: str | None = "ascend910b", nnal: bool = True) -> Path:
    info = root / "ascend-toolkit" / "latest" / "aarch64-linux" / "ascend_toolkit_install.info"
    info.parent.mkdir(parents=True)
    info.write_text(f"package_name=Ascend-cann-toolkit\nversion={version}\ninnerversion=V100R001C22\n")
    (root / "ascend-toolkit" / "set_env.sh").write_text("export ASCEND_TOOLKIT_HOME=x\n")
    if kernels:
        (root / "ascend-toolkit/latest/opp/built-in/op_impl/ai_core/tbe/kernel" / kernels).mkdir(parents=True)
    if nnal:
        (root / "nnal" / "atb").mkdir(parents=True)
        (root / "nnal" / "atb" / "set_env.sh").write_text("")
    return root


def test_reads_toolkit_and_driver_versions(tmp_path):
    root = _toolkit(tmp_path / "Ascend", "8.2.RC1")
    (root / "driver").mkdir()
    (root / "driver" / "version.info").write_text("Version=24.1.rc2\nascendhal_version=7.35.23\n")
    assert cann.toolkit_version(root) == "8.2.RC1"
    assert cann.driver_version(root) == "24.1.rc2"
    assert cann.toolkit_version(tmp_path / "none") is None
    assert cann.driver_version(tmp_path / "none") is None


def test_plan_keeps_a_matching_base_and_installs_what_the_chip_lacks(tmp_path):
    a2_base = _toolkit(tmp_path / "a2", "8.2.RC1")
    assert cann.plan(a2_base, "8.2.rc1", "a2") == []
    # The same base lacks the A3 kernels; an older toolkit needs everything.
    assert cann.plan(a2_base, "8.2.RC1", "a3") == ["kernels"]
    assert cann.plan(_toolkit(tmp_path / "old", "8.1.RC1"), "8.2.RC1", "a2") == ["toolkit", "kernels", "nnal"]
    assert cann.plan(_toolkit(tmp_path / "nonnal", "8.2.RC1", nnal=False), "8.2.RC1", "a2") == ["nnal"]
    with pytest.raises(cann.CannError, match="unknown chip"):
        cann.plan(a2_base, "8.2.RC1", "a5")


def test_ensure_names_the_missing_packages(tmp_path):
    root = _toolkit(tmp_path / "Ascend", "8.2.RC1")
    pkgs = tmp_path / "pkgs"
    pkgs.mkdir()
    with pytest.raises(cann.CannError) as err:
        cann.ensure(root, "8.2.RC1", "a3", pkgs, arch="aarch64")
    assert "Atlas-A3-cann-kernels_8.2.RC1_linux-aarch64.run" in str(err.value)
    assert "docker/cann/" in str(err.value)


def test_ensure_runs_the_installers_in_order(tmp_path):
    root = tmp_path / "Ascend"
    pkgs = tmp_path / "pkgs"
    pkgs.mkdir()
    log = tmp_path / "installed.log"
    files = cann.package_files("8.2.RC1", "a3", "aarch64")
    # Fake .run installers: the toolkit one lays down the tree the real one would.
    (pkgs / files["toolkit"]).write_text(
        "#!/bin/bash\nset -e\nroot=${3#--install-path=}\n"
        "mkdir -p $root/ascend-toolkit/latest/aarch64-linux\n"
        "echo version=8.2.RC1 > $root/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info\n"
        "echo 'export TOOLKIT_ENV=1' > $root/ascend-toolkit/set_env.sh\n"
        f"echo toolkit $@ >> {log}\n"
    )
    (pkgs / files["kernels"]).write_text(f"#!/bin/bash\necho kernels env=$TOOLKIT_ENV >> {log}\n")
    (pkgs / files["nnal"]).write_text(f"#!/bin/bash\necho nnal env=$TOOLKIT_ENV >> {log}\n")
    done = cann.ensure(root, "8.2.RC1", "a3", pkgs, arch="aarch64")
    assert done == ["toolkit", "kernels", "nnal"]
    lines = log.read_text().splitlines()
    assert lines[0] == f"toolkit --install --quiet --install-path={root}"
    # Kernels and NNAL install with the new toolkit's environment loaded.
    assert lines[1:] == ["kernels env=1", "nnal env=1"]


def test_ensure_fails_when_an_installer_fails(tmp_path):
    root = _toolkit(tmp_path / "Ascend", "8.2.RC1", nnal=False)
    pkgs = tmp_path / "pkgs"
    pkgs.mkdir()
    (pkgs / cann.package_files("8.2.RC1", "a2", "aarch64")["nnal"]).write_text("#!/bin/bash\nexit 3\n")
    with pytest.raises(cann.CannError, match="installing Ascend-cann-nnal.*failed"):
        cann.ensure(root, "8.2.RC1", "a2", pkgs, arch="aarch64")


def test_runs_standalone_as_in_the_image_build(tmp_path):
    # The Dockerfile copies only this file and runs it before npu_rl is installed.
    script = tmp_path / "cann.py"
    script.write_text(Path(cann.__file__).read_text())
    root = _toolkit(tmp_path / "Ascend", "8.2.RC1")
    ok = subprocess.run(
        [
            sys.executable,
            "-I",
            str(script),
            "ensure",
            "--version",
            "8.2.RC1",
            "--chip",
            "a2",
            "--packages",
            str(tmp_path),
            "--root",
            str(root),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert ok.returncode == 0, ok.stderr
    assert "already has CANN 8.2.RC1" in ok.stdout
    bad = subprocess.run(
        [
            sys.executable,
            "-I",
            str(script),
            "ensure",
            "--version",
            "8.2.RC1",
            "--chip",
            "a3",
            "--packages",
            str(tmp_path),
            "--root",
            str(root),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert bad.returncode == 1
    assert bad.stderr.startswith("cann: error:") and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("stand_in", ["", "stand-in base: no CANN"])
def test_only_a_declared_stand_in_base_builds_without_any_cann(tmp_path, stand_in):
    """No CANN at all passes only where the base says it is the stand-in; a wrong toolkit never does."""
    script = tmp_path / "cann.py"
    script.write_text(Path(cann.__file__).read_text())
    env = {"PATH": "/usr/bin:/bin", cann.STAND_IN_MARKER: stand_in}

    def ensure(root: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-I",
                str(script),
                "ensure",
                "--version",
                "8.2.RC1",
                "--chip",
                "a3",
                "--packages",
                str(tmp_path),
                "--root",
                str(root),
            ],
            capture_output=True,
            text=True,
            env=env,
        )

    empty = ensure(tmp_path / "none")
    if stand_in:
        assert empty.returncode == 0, empty.stderr
        assert empty.stdout.strip() == f"cann: no CANN, and none installed: {stand_in}"
    else:
        assert empty.returncode == 1 and "needs toolkit, kernels, nnal" in empty.stderr
    other = ensure(_toolkit(tmp_path / "Ascend", "8.1.RC1"))
    assert other.returncode == 1 and "base image has toolkit 8.1.RC1" in other.stderr
