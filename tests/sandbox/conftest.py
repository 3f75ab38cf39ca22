"""A running `npu-rl sandbox serve`, started as its users start it, and clients of its HTTP API.

``drill(off)`` starts the same command with named mechanisms of the jail switched off
(npu_rl.sandbox.jail.MECHANISMS; tests only, through ``drill_server.py``), to show that an attack the
real server contains gets through without them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from needs import missing_setup
from sandbox_attacks import Client

from npu_rl.paths import project_root

HERE = Path(__file__).parent
SANDBOX_PYTHON = project_root() / ".venv-sandbox" / "bin" / "python"
UID_BASE = 61000
SLOTS = 3
# In the server's environment: no execution may ever see it (test_hostile.py).
CANARY = ("NPU_RL_TEST_CANARY", "canary-7f3a")


def _needs() -> None:
    if shutil.which("bwrap") is None:
        missing_setup("bubblewrap", "apt-get install bubblewrap (.ci/apt-packages.txt)")
    if not SANDBOX_PYTHON.exists():
        missing_setup("the sandbox's interpreter", "make sandbox-venv")


class Server(Client):
    def __init__(self, argv: list[str]):
        env = {**os.environ, CANARY[0]: CANARY[1]}
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if "serving http://" not in line:
            self.proc.kill()
            raise AssertionError(f"the sandbox did not start: {line}{self.proc.stderr.read()[-2000:]}")
        super().__init__(line.split("serving ")[1].split("/run_code")[0])

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        finally:
            self.proc.kill() if self.proc.poll() is None else None


def serve_argv(*extra: str) -> list[str]:
    return [sys.executable, "-m", "npu_rl", "sandbox", "serve", "--port", "0", "--slots", str(SLOTS), *extra]


def sandbox_processes(base: int = UID_BASE) -> list[psutil.Process]:
    """Processes of the slots' users still alive (none may outlive its execution). A zombie runs nothing: the
    service reaps the jails' orphans itself; a drill's, whose server reaps none, its parent's death hands to
    the host's init."""
    left = []
    for p in psutil.process_iter(["uids", "status"]):
        uids = p.info["uids"]
        if uids and base <= uids.real < base + SLOTS and p.info["status"] != psutil.STATUS_ZOMBIE:
            left.append(p)
    return left


def wait_no_sandbox_processes(base: int = UID_BASE, timeout: float = 10.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while (left := sandbox_processes(base)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def module_uid_base(request) -> int:
    """A module's own slot users (``UID_BASE`` in it): xdist runs modules side by side, and RLIMIT_NPROC and
    the leftover checks count per user."""
    return getattr(request.module, "UID_BASE", UID_BASE)


@pytest.fixture(scope="module")
def server(request):
    _needs()
    s = Server(serve_argv("--max-run-timeout", "20", "--uid-base", str(module_uid_base(request))))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def drill(request):
    """``drill(*off, **options)``: a server whose jail runs without the mechanisms ``off``."""
    _needs()
    base = module_uid_base(request)
    started: list[Server] = []

    def start(*off: str, shared_dir: str | None = None) -> Server:
        argv = [sys.executable, str(HERE / "drill_server.py"), ",".join(off), shared_dir or ""]
        # Runs that share a directory run as one slot's user: an interpreter under /tmp (a checkout there) is
        # bound over the shared /tmp, and the mount points bwrap makes in it are the first run's user's.
        one_slot = ["--slots", "1"] if shared_dir else []
        s = Server(argv + serve_argv("--uid-base", str(base), *one_slot)[3:])
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
    # A drill without the PID namespace leaves what escaped it: gone before the next test.
    for p in sandbox_processes(base):
        p.kill()


@pytest.fixture
def beside_a_run(tmp_path_factory):
    """What a training run beside the sandbox keeps on the node, world-readable as a careless volume is:
    a Ray session's token and a checkpoint (under /var/tmp: the jail's own /tmp would hide /tmp)."""
    root = Path(os.path.realpath("/var/tmp")) / f"npu-rl-run-{os.getpid()}"
    (root / "ray").mkdir(parents=True, exist_ok=True)
    (root / "checkpoints/global_step_1").mkdir(parents=True, exist_ok=True)
    (root / "ray/auth_token").write_text("ray-token-SECRET")
    (root / "checkpoints/global_step_1/model.pt").write_text("weights-SECRET")
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def shared_dir():
    """A host directory every execution of a ``tmpfs`` drill writes to (where the slots' users reach it)."""
    path = Path(tempfile.mkdtemp(prefix="npu-rl-shared-", dir=os.path.realpath("/var/tmp")))
    path.chmod(0o777)
    yield str(path)
    shutil.rmtree(path, ignore_errors=True)
