"""The run's dashboards: TensorBoard and SwanLab (local mode), served from the run's own log folders.

A run directory (``run_files.log_root``) holds ``tensorboard/`` (verl's tensorboard logger,
``TENSORBOARD_DIR``) and ``swanlab/`` (verl's swanlab logger with ``SWANLAB_MODE=local`` and
``SWANLAB_LOG_DIR``, both set by the launcher). ``serve`` starts ``tensorboard --logdir`` and
``swanlab watch`` on them, waits until each page answers, and records each address in
``<run>/.dashboard-<kind>.json`` while it runs (one file per server: the compose services run
one each), so that ``npu-rl report`` can link each finding's
metric to its chart (and links nothing when no dashboard is up). The compose services run the
same command, so they read the same folders.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .cluster.probe import port_free
from .errors import UserError
from .run_files import backend_dir

STATE_PREFIX = ".dashboard-"
DEFAULT_HOST = "127.0.0.1"
PORTS = {"tensorboard": 6006, "swanlab": 5092}
KINDS = tuple(PORTS)


@dataclass(frozen=True)
class Dashboard:
    kind: str  # "tensorboard" | "swanlab"
    logdir: Path
    host: str
    port: int

    @property
    def url(self) -> str:
        # 0.0.0.0 serves every interface; the address to open is still the loopback one.
        host = DEFAULT_HOST if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}/"

    def command(self) -> list[str]:
        exe = _executable(self.kind)
        if self.kind == "tensorboard":
            # --load_fast=false: the Python reader (the Rust one is a separate download).
            return [
                exe,
                "--logdir",
                str(self.logdir),
                "--host",
                self.host,
                "--port",
                str(self.port),
                "--load_fast",
                "false",
                "--reload_interval",
                "5",
            ]
        return [exe, "watch", str(self.logdir), "--host", self.host, "--port", str(self.port), "--log-level", "warning"]


def _executable(kind: str) -> str:
    found = shutil.which(kind) or shutil.which(kind, path=str(Path(sys.executable).parent))
    if not found:
        package = "tensorboard" if kind == "tensorboard" else "'swanlab[dashboard]'"
        raise UserError(f"`{kind}` is not installed: pip install {package} (or 'npu-rl[dashboards]')")
    return found


def logdir(run_dir: Path, kind: str) -> Path:
    """The run's log folder that dashboard ``kind`` reads: where the launcher points that backend."""
    return backend_dir(run_dir, kind)


def state_file(run_dir: Path, kind: str) -> Path:
    return run_dir / f"{STATE_PREFIX}{kind}.json"


def wait_for_logs(run_dir: Path, kinds: tuple[str, ...], *, log=print, poll: float = 5) -> None:
    """Block until every chosen log folder exists (a dashboard started before the run's first step)."""
    missing = [logdir(run_dir, k) for k in kinds if not logdir(run_dir, k).is_dir()]
    if missing:
        log(f"waiting for {', '.join(map(str, missing))} (the run's first logged step)")
    while [p for p in missing if not p.is_dir()]:
        time.sleep(poll)


def plan(run_dir: Path, kinds: tuple[str, ...], host: str, ports: dict[str, int]) -> list[Dashboard]:
    """The dashboards to serve for ``run_dir`` (``kinds`` empty: each whose logs are there); a missing
    log folder or a busy port is the user's error, said before anything starts."""
    if not run_dir.is_dir():
        raise UserError(f"run directory not found: {run_dir}")
    if not kinds:
        kinds = tuple(k for k in KINDS if logdir(run_dir, k).is_dir())
        if not kinds:
            raise UserError(f"no tensorboard/ or swanlab/ logs under {run_dir}")
    out = []
    for kind in kinds:
        folder = logdir(run_dir, kind)
        if not folder.is_dir():
            backend = "tensorboard" if kind == "tensorboard" else "swanlab"
            raise UserError(
                f"no {kind} logs under {run_dir} (expected {folder}; train with logging.backends including {backend})"
            )
        d = Dashboard(kind, folder, host, ports.get(kind, PORTS[kind]))
        if not port_free(d.port, host):
            raise UserError(f"port {d.port} on {host} is in use: pick another with --{kind}-port")
        out.append(d)
    return out


# The dashboards are local: never ask them through an http_proxy the environment may name.
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def answers(url: str, timeout: float = 2.0) -> bool:
    try:
        with _LOCAL.open(url, timeout=timeout) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


@contextmanager
def serve(
    run_dir: Path, dashboards: list[Dashboard], *, log=print, ready_timeout: float = 90
) -> Iterator[list[subprocess.Popen]]:
    """Run the dashboards until the block ends (yields their processes); state files name them meanwhile."""
    procs: list[subprocess.Popen] = []
    states = [state_file(run_dir, d.kind) for d in dashboards]
    try:
        for d in dashboards:
            try:
                out = open(run_dir / f".{d.kind}.log", "wb")
            except OSError as err:
                raise UserError(f"cannot write into the run directory {run_dir}: {err.strerror}") from None
            procs.append(
                subprocess.Popen(
                    d.command(),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env={**os.environ, "SWANLAB_MODE": "local"},
                )
            )
        deadline = time.monotonic() + ready_timeout
        for d, proc in zip(dashboards, procs):
            while not answers(d.url) and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
            # Our own server must be the one answering (not another one on the port).
            if proc.poll() is not None or not answers(d.url):
                raise UserError(f"{d.kind} did not start at {d.url}: {log_tail(run_dir, d.kind)}")
            log(f"{d.kind:<11} {d.url}  ({d.logdir})")
        for d, state in zip(dashboards, states):
            state.write_text(json.dumps({"kind": d.kind, "url": d.url}, indent=2), encoding="utf-8")
        yield procs
    finally:
        for state in states:
            state.unlink(missing_ok=True)
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def log_tail(run_dir: Path, kind: str, lines: int = 3) -> str:
    try:
        tail = (run_dir / f".{kind}.log").read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        tail = []
    return " | ".join(tail) or "no output"


def swanlab_charts_url(url: str) -> str:
    """The charts page of the newest experiment SwanLab lists (its web app's /experiment/<id>/chart)."""
    try:
        with _LOCAL.open(f"{url}api/v1/project", timeout=5) as r:
            experiments = json.load(r)["data"]["experiments"]
        newest = max(experiments, key=lambda e: e["id"])
        return f"{url}experiment/{newest['id']}/chart"
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
        return url


def running(run_dir: Path) -> dict[str, str]:
    """{kind: url} of the dashboards serving ``run_dir`` now (a stale state file counts for nothing)."""
    up: dict[str, str] = {}
    for kind in KINDS:
        try:
            record = json.loads(state_file(run_dir, kind).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        url = record.get("url") if isinstance(record, dict) else None
        if isinstance(url, str) and answers(url, timeout=1):
            up[kind] = url
            if kind == "swanlab":
                # Asked now, not at start: a dashboard started before the run's first step has none yet.
                up["swanlab_charts"] = swanlab_charts_url(url)
    return up


def chart_links(urls: dict[str, str], tag: str) -> dict[str, str]:
    """Where each running dashboard shows ``tag``'s chart."""
    links = {}
    if "tensorboard" in urls:
        # TensorBoard's time-series view filters its cards by the tagFilter query parameter (a regex).
        query = urllib.parse.urlencode({"tagFilter": f"^{tag}$"})
        links["TensorBoard"] = f"{urls['tensorboard']}?{query}#timeseries"
    if "swanlab" in urls:
        # SwanLab's web app takes no chart filter in its address: the experiment's charts page.
        links["SwanLab"] = urls.get("swanlab_charts", urls["swanlab"])
    return links
