"""The ports and the session directory of one Ray node that npu-rl starts.

The rendered pods run with ``hostNetwork: true`` (HCCL needs the hosts' interfaces), so two pods of one
job on one node, or two jobs on one 8-NPU node, share every port. Left to Ray, every node takes the
same fixed ports (node manager, object manager, metrics, the dashboard agent's two, the runtime env
agent, the client server, and worker ports from one shared range) and ``/tmp/ray``: the second raylet
dies with "bind: Address already in use". Each node npu-rl starts therefore gets:

* every fixed port of its own, chosen free when it starts: below the kernel's ephemeral range (a port
  from that range is what any bind to port 0 gets, Ray's own exporters among them, between this choice
  and the raylet's bind), or inside the job's range (``NPU_RL_RAY_PORTS=LO-HI``, ``--ray-ports``) where a
  firewall between the nodes admits only that range;
* worker ports from the OS (``--min-worker-port=0 --max-worker-port=0``: the raylet passes no port and
  each worker binds one the kernel picks; ray 2.60 ``src/ray/raylet/worker_pool.cc``, the free port list
  only for a non-zero range), so two raylets never hand out the same one;
* a temp dir of its own (Ray 2.60 takes ``--temp-dir`` per node: ``ray/scripts/scripts.py``, the option's
  help "Can be specified per node"; a driver attaching to the node reads the node's own from the GCS,
  ``ray/_private/node.py`` ``_init_temp``), owner-only, which also holds the job's Ray token
  (npu_rl.cluster.rayauth).

Options the user passes in ``--ray-args`` win: a port or temp dir given there is not chosen again.

A port chosen free is bound by Ray only seconds later, and another node starting on the host meanwhile may
choose it too (seen: a head's client-server port chosen again as its worker's metrics port, whose dashboard
agent then died with "Address already in use", and the raylet with it). Each choice is therefore claimed
host-wide for as long as the process that chose it lives (``CLAIMS``: a file per port naming its pid and
start time, created exclusively), and a port another live process claims is not chosen.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import socket
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError

# Every port a raylet listens on besides the workers' (ray 2.60 `ray start` options).
NODE_PORT_FLAGS = (
    "--node-manager-port",
    "--object-manager-port",
    "--metrics-export-port",
    "--dashboard-agent-grpc-port",
    "--dashboard-agent-listen-port",
    "--runtime-env-agent-port",
)
# The head's besides its GCS port (given as --port).
HEAD_PORT_FLAGS = ("--dashboard-port", "--ray-client-server-port")
# The head's two Prometheus exporters, fixed at 44217 and 44227 unless these variables say otherwise (ray 2.60
# python/ray/autoscaler/_private/constants.py 106, python/ray/dashboard/consts.py 67).
HEAD_PORT_ENV = ("AUTOSCALER_METRIC_PORT", "DASHBOARD_METRIC_PORT")
WORKER_PORTS = ("--min-worker-port=0", "--max-worker-port=0")
RANGE_ENV = "NPU_RL_RAY_PORTS"
TMPDIR_ENV = "NPU_RL_RAY_TMPDIR"
# One file per claimed port, holding the claiming process's pid; sticky like /tmp, for every user's nodes.
CLAIMS = Path(tempfile.gettempdir()) / "npu-rl-port-claims"
_LOWEST = 20000  # above the fixed ports of well-known services and Ray's own defaults (6379, 8265, 10001-19999)


def ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def parse_range(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition("-")
    try:
        first, last = int(lo), int(hi)
    except ValueError:
        raise UserError(f"bad Ray port range {text!r} (expected LO-HI, e.g. 30000-30999)") from None
    if not sep or not 1024 <= first < last <= 65535:
        raise UserError(f"bad Ray port range {text!r} (expected LO-HI with 1024 <= LO < HI <= 65535)")
    return first, last


def default_range() -> tuple[int, int]:
    low = ephemeral_low()
    # A host whose ephemeral range starts low (tuned to 1024-65535) leaves nothing below it: take a fixed
    # range then, where a bind to port 0 may race for a port (a collision ends the node in one line).
    return (_LOWEST, low - 1) if low - 1 - _LOWEST >= 100 else (_LOWEST, _LOWEST + 9999)


def choose_ports(
    n: int, port_range: tuple[int, int] | None = None, host: str = "", avoid: Sequence[int] = ()
) -> list[int]:
    """``n`` distinct ports free right now, held bound together while choosing so that none repeats;
    never one of ``avoid`` (the GCS port, still free until the head's GCS binds it)."""
    first, last = port_range or default_range()
    candidates = [p for p in range(first, last + 1) if p not in avoid]
    random.shuffle(candidates)  # two pods starting at once rarely try the same port first
    chosen: list[int] = []
    with contextlib.ExitStack() as held:
        for port in candidates:
            if len(chosen) == n:
                break
            s = held.enter_context(socket.socket())
            try:
                s.bind((host, port))
            except OSError:
                continue
            if not claim(port):
                continue
            chosen.append(port)
    if len(chosen) < n:
        raise UserError(f"only {len(chosen)} of the {n} Ray ports this node needs are free in {first}-{last}")
    return chosen


def _started(pid: int) -> str:
    """When ``pid`` started (clock ticks since boot, /proc/<pid>/stat's 22nd field); "" where it is gone. With
    the pid it names one process: a pid is used again once its process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _alive(owner: str) -> bool:
    """Whether the claim's process (``pid start``) still runs."""
    pid, _, started = owner.partition(" ")
    if not pid.isdigit():
        return False
    now = _started(int(pid))
    return bool(now) and (not started or now == started)


def claim(port: int, pid: int | None = None) -> bool:
    """Whether ``port`` is now this process's (``pid``) on this host: claimed anew, already its own, or taken
    over from a process that is gone. Without a writable claims directory every port counts as claimed."""
    pid = os.getpid() if pid is None else pid
    path = CLAIMS / str(port)
    try:
        CLAIMS.mkdir(mode=0o1777, exist_ok=True)
        with contextlib.suppress(PermissionError):
            CLAIMS.chmod(0o1777)
    except OSError:
        return True
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                owner = path.read_text().strip()
            except OSError:
                owner = ""
            if owner == _identity(pid):
                return True
            if owner and _alive(owner):
                return False
            with contextlib.suppress(OSError):
                path.unlink()  # its process is gone: claim it again
            continue
        except OSError:
            return True
        with os.fdopen(fd, "w") as f:
            f.write(_identity(pid))
        if pid == os.getpid():
            _mine.append(path)
            if len(_mine) == 1:
                atexit.register(_release)
        return True
    return False


_mine: list[Path] = []


def _identity(pid: int) -> str:
    return f"{pid} {_started(pid)}"


def _release() -> None:
    """This process's claims, withdrawn as it exits (a killed one's are taken over by the next chooser)."""
    me = _identity(os.getpid())
    for path in _mine:
        with contextlib.suppress(OSError):
            if path.read_text().strip() == me:
                path.unlink()


def _given(extra: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in extra)


@dataclass(frozen=True)
class NodeLayout:
    """A node's own ports and temp dir, as ``ray start`` options."""

    ports: dict[str, int]
    temp_dir: Path | None  # None: the user's --ray-args name one (kept after the node: Ray's logs)
    worker_ports: tuple[str, ...] = WORKER_PORTS  # (): the user's --ray-args set a range
    env: dict[str, str] = field(default_factory=dict)  # the ports Ray reads from variables

    def argv(self) -> list[str]:
        args = [f"{flag}={port}" for flag, port in self.ports.items()]
        if self.temp_dir is not None:
            args.append(f"--temp-dir={self.temp_dir}")
        return [*args, *self.worker_ports]


def layout(
    head: bool,
    extra: Sequence[str] = (),
    port_range: tuple[int, int] | None = None,
    environ: Mapping[str, str] = os.environ,
    keep: Sequence[str] = (),
    avoid: Sequence[int] = (),
) -> NodeLayout:
    """Choose this node's ports and make its temp dir (0700, short: Ray's socket paths are limited to 107
    characters), skipping what ``extra`` (the user's own ``ray start`` options) or the environment sets and
    the flags in ``keep`` (ports others must find: the dashboard a person or KubeRay's submitter reaches)."""
    flags = [
        f for f in (*NODE_PORT_FLAGS, *(HEAD_PORT_FLAGS if head else ())) if not _given(extra, f) and f not in keep
    ]
    names = [v for v in (HEAD_PORT_ENV if head else ()) if v not in environ]
    chosen = choose_ports(len(flags) + len(names), port_range, avoid=avoid)
    ports = dict(zip(flags, chosen))
    env = {name: str(port) for name, port in zip(names, chosen[len(flags) :])}
    temp = None
    if not _given(extra, "--temp-dir"):
        base = environ.get(TMPDIR_ENV) or "/tmp"
        temp = Path(tempfile.mkdtemp(prefix="npu-rl-ray-", dir=base))
    own_range = any(_given(extra, f) for f in ("--min-worker-port", "--max-worker-port", "--worker-port-list"))
    return NodeLayout(ports, temp, () if own_range else WORKER_PORTS, env)
