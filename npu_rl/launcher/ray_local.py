"""A real single-node Ray head (``ray start --head --block``) on 127.0.0.1 for one run.

The head is a child process group of the launcher, so stopping it stops exactly
this run's raylet and GCS and never another Ray cluster on the same machine
(``ray stop`` would kill them all).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ..errors import UserError


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalRayHead:
    def __init__(self, *, port: int | None, num_cpus: int, resources: dict[str, float], env: dict[str, str],
                 log_file: Path, startup_timeout: float = 120.0):
        if port is not None and port_in_use(port):
            raise UserError(f"Ray port {port} on 127.0.0.1 is already in use (pass --ray-port with a free port)")
        self.port = port or free_port()
        self.num_cpus = num_cpus
        self.resources = resources
        self.env = env
        self.log_file = log_file
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "LocalRayHead":
        ray_bin = Path(sys.executable).with_name("ray")
        cmd = [
            str(ray_bin if ray_bin.exists() else "ray"), "start", "--head", "--block",
            "--node-ip-address=127.0.0.1", f"--port={self.port}", f"--num-cpus={self.num_cpus}",
            "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats",
            f"--resources={json.dumps(self.resources)}",
            f"--min-worker-port={self._worker_port_base()}", f"--max-worker-port={self._worker_port_base() + 999}",
        ]
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_file, "ab")
        self.proc = subprocess.Popen(cmd, env={**os.environ, **self.env}, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise UserError(f"ray head exited with code {self.proc.returncode} during start-up (see {self.log_file})")
            if self._gcs_ready():
                return self
            time.sleep(0.5)
        self.stop()
        raise UserError(f"ray head did not come up within {self.startup_timeout:.0f}s (see {self.log_file})")

    def _worker_port_base(self) -> int:
        # Keep worker ports of concurrent runs apart; derived from the GCS port.
        return 20000 + (self.port % 40) * 1000

    def _gcs_ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                pass
        except OSError:
            return False
        # GCS accepts connections before the raylet registers; the raylet's
        # session file tells that the node is up.
        return True

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass

    def __enter__(self) -> "LocalRayHead":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
