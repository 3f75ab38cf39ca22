"""One `ray start --block` child process: its command line, start-up and shutdown.

``--block`` keeps Ray's own supervisor in the foreground: it exits when any
Ray daemon of this node dies, and on SIGTERM it stops exactly the daemons it
started (``ray stop`` would stop every Ray on the machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..console import noise
from ..versions import VERL_0_6_1
from . import proctree, raylogs
from .probe import Address, Deadline
from .rayports import NodeLayout

STARTED_MARKER = "Ray runtime started."


@dataclass(frozen=True)
class NodeSpec:
    npus: int
    node_ip: str
    dashboard: bool = False
    extra_args: Sequence[str] = field(default_factory=tuple)
    # Ports and temp dir of its own (npu_rl.cluster.rayports); the empty layout leaves them to Ray.
    layout: NodeLayout = field(default_factory=lambda: NodeLayout({}, None, ()))


def beside_python(name: str) -> str:
    """The ``name`` console script of this interpreter's environment (a venv need not be on PATH), else PATH's."""
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else (shutil.which(name) or name)


def ray_executable() -> str:
    return beside_python("ray")


def registered_resources(npus: int) -> dict[str, float]:
    """The custom resources a node started by npu-rl registers (besides the CPUs Ray counts itself).

    NPUs are a custom resource in Ray; registering them explicitly makes the count
    independent of Ray's device autodetection (which needs CANN's acl). verl asks
    for ``{"NPU": 1}`` per NPU worker (verl 0.6.1 ``RayResourcePool.get_placement_groups``).
    """
    return {"NPU": npus}


def logical_cpus(workers: int, verl_release: str) -> int:
    """The CPUs a Ray node registers for ``workers`` CPU worker processes of a recipe on ``verl_release`` (logical:
    Ray schedules by them, the kernel does not). verl 0.6.1 needs one per worker plus its TaskRunner. verl 0.9's
    workers each take a bundle of 3 (ResourcePoolManager's max_colocate_count, single_controller/ray/base.py:146,
    :192), and its agent-loop, reward-loop, rollout-server and TransferQueue actors one each: TransferQueue's
    controller and every storage unit start before any worker (transfer_queue 0.1.8 controller.py:935,
    storage/simple_storage.py:137; 8 units unless the launch says fewer), so a rehearsal's Ray must offer them
    too. A 2-core host counts 2, which holds no verl 0.9 worker."""
    return workers + 2 if verl_release == VERL_0_6_1 else 3 * workers + 10


def _common(spec: NodeSpec) -> list[str]:
    return [
        "--block",
        "--disable-usage-stats",
        f"--node-ip-address={spec.node_ip}",
        f"--resources={json.dumps(registered_resources(spec.npus))}",
        "--num-gpus=0",
        *spec.layout.argv(),
    ]


def head_argv(spec: NodeSpec, port: int) -> list[str]:
    argv = [ray_executable(), "start", "--head", f"--port={port}", *_common(spec)]
    if spec.dashboard:
        # Only this host reaches it (an SSH tunnel or `kubectl port-forward` for a person), and with the
        # token on it answers 401 without it (ray 2.60 dashboard/http_server_head.py).
        argv += ["--include-dashboard=true", "--dashboard-host=127.0.0.1"]
    else:
        argv += ["--include-dashboard=false"]
    return argv + list(spec.extra_args)


def worker_argv(spec: NodeSpec, head: Address) -> list[str]:
    return [ray_executable(), "start", f"--address={head}", *_common(spec), *spec.extra_args]


def kuberay_argv(
    generated: str, node_ip: str, layout: NodeLayout | None = None, extra: Sequence[str] = ()
) -> list[str]:
    """KubeRay's generated `ray start` (from rayStartParams), pinned to the chosen interface, then this
    node's own ports and temp dir, then the user's ``--ray-args`` (the last value of an option wins)."""
    argv = shlex.split(generated)
    if not any(a.startswith("--node-ip-address") for a in argv):
        argv.append(f"--node-ip-address={node_ip}")
    if "--block" not in argv:
        argv.append("--block")
    return argv + (layout.argv() if layout else []) + list(extra)


class RayNode:
    """A running `ray start --block`; its output is forwarded line by line with a prefix."""

    def __init__(
        self,
        argv: list[str],
        env: Mapping[str, str],
        log: Callable[[str], None],
        output: Callable[[str], None] | None = None,
        owned: Path | None = None,
    ):
        self.argv = argv
        # A directory of npu-rl's own (the token of a head that made one), removed once the node stopped;
        # the node's Ray temp dir stays, with Ray's logs of what happened.
        self.owned = owned
        self.env = dict(env)
        self.log = log
        # Where Ray's own lines go ("[ray] ..." on stderr unless told otherwise: `npu-rl train` keeps them
        # in the run's console.log).
        self.output = output or _to_stderr
        self.proc: subprocess.Popen[str] | None = None
        self.started_at = time.time()
        # ray start's report of dead daemons: its first lines from the report's heading on (ray 2.60 follows
        # them with up to 200 lines of each dead daemon's log, which would push them out of a tail).
        self.said: list[str] = []
        self._started = threading.Event()
        self._reader: threading.Thread | None = None

    def start(self) -> RayNode:
        self.log("running: " + shlex.join(self.argv))
        self.started_at = time.time()
        # A session of its own: every Ray daemon of this node inherits its process group,
        # so stop() can sweep stragglers (agents outlive a raylet whose GCS is gone).
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._forward, name="ray-start-output", daemon=True)
        self._reader.start()
        return self

    def _forward(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if STARTED_MARKER in line:
                self._started.set()
            if (self.said or raylogs.EXIT_REPORT in line) and len(self.said) < 40:
                self.said.append(line)
            self.output(line)
        self.output("")

    def wait_started(self, deadline: Deadline) -> bool:
        """True once Ray reports it is up; False if it exited first, a daemon of it logged its death (``ray
        start`` itself would wait 30 s more) or the deadline passed."""
        assert self.proc is not None
        checked = time.monotonic()
        while not deadline.passed():
            if self._started.wait(timeout=min(0.2, max(0.01, deadline.left()))):
                return True
            if self.proc.poll() is not None:
                return self._started.is_set()
            if time.monotonic() - checked >= 1.0:
                checked = time.monotonic()
                if self.fatal():
                    return False
        return self._started.is_set()

    def fatal(self) -> str | None:
        """The fatal line a daemon of this node logged, as one clause (None: none so far)."""
        return raylogs.fatal_line(raylogs.temp_dir(self.argv, self.env), self.started_at, self.argv)

    def failure(self) -> str:
        """Why this node is down, in one clause: a daemon's own fatal line, else ray start's report."""
        if self._reader is not None and self.proc is not None and self.proc.poll() is not None:
            self._reader.join(timeout=2)  # its last lines name the daemons that exited
        fatal = self.fatal()
        if fatal:
            return fatal
        exited = raylogs.exited_daemons(list(self.said))
        if exited:
            return "Ray's " + ", ".join(exited) + " exited"
        code = self.poll()
        return f"ray start exited with code {code}" if code is not None else "ray start did not report up"

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM ``ray start --block`` (it stops the daemons it started), then end whatever of
        its tree is left (agents outlive a raylet whose GCS is gone; daemons re-parent)."""
        if self.proc is None:
            self._forget()
            return None
        code = proctree.stop(self.proc, grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self._reader is not None:
            self._reader.join(timeout=5)
        self._forget()
        return code

    def _forget(self) -> None:
        if self.owned is not None:
            shutil.rmtree(self.owned, ignore_errors=True)


_QUIET = noise.Tracebacks()  # one `ray start` per npu-rl process writes to its stderr


def _to_stderr(line: str) -> None:
    """A pod's log: Ray's lines less the listed noise (npu_rl.console.noise); "" ends the stream."""
    for kept in _QUIET.feed(line) if line else _QUIET.flush():
        sys.stderr.write("[ray] " + kept)
    sys.stderr.flush()


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    return {**os.environ, **extra}
