"""The three node programs behind `npu-rl ray head|worker|wait`.

head
    Export the network variables, ``ray start --head --block`` with ``NPU`` resources; given a command, wait
    until every node and NPU has joined, run it with ``RAY_ADDRESS`` at this head, stop Ray and exit with its
    exit code (so the pod's, and the Volcano job's, result is the training's); else serve until Ray or the pod ends.
worker
    Retry reaching the head's GCS port with backoff until a deadline, then ``ray start --address``
    (retried if it exits before joining). Once joined, probe the head; when it stays unreachable for
    ``head_lost_after`` seconds (its job ended, or it died), stop Ray and exit non-zero: no pod hangs.
wait
    Block until the cluster holds the expected nodes and NPUs, or fail naming what is missing.

Exit codes other than the head command's own are listed in :class:`npu_rl.exit_codes.Exit`.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .. import defaults
from ..errors import UserError
from ..exit_codes import Exit
from . import network, proctree, rayauth, rayports
from .membership import ClusterTimeout, Expectation, wait_for_cluster
from .probe import Address, Deadline, backoff, port_free, port_open, wait_for_port
from .raynode import NodeSpec, RayNode, child_env, head_argv, kuberay_argv, worker_argv


class ClusterError(UserError):
    """A launcher failure printed as one line, with the exit code of :class:`Exit`."""


def log(msg: str) -> None:
    print(f"npu-rl ray: {msg}", file=sys.stderr, flush=True)


@dataclass
class HeadOptions:
    nnodes: int
    npus: int
    port: int = defaults.RAY_PORT
    ifname: str | None = None
    head_host: str | None = None
    dashboard: bool = False
    extra_args: Sequence[str] = field(default_factory=tuple)
    port_range: tuple[int, int] | None = None
    start_timeout: float = defaults.RAY_START_TIMEOUT_S
    wait_timeout: float = defaults.NODES_TIMEOUT_S
    command: Sequence[str] = field(default_factory=tuple)
    kuberay_cmd: str | None = None


@dataclass
class WorkerOptions:
    head: Address
    npus: int
    ifname: str | None = None
    extra_args: Sequence[str] = field(default_factory=tuple)
    port_range: tuple[int, int] | None = None
    join_timeout: float = defaults.NODES_TIMEOUT_S
    head_lost_after: float = defaults.HEAD_LOST_AFTER_S
    probe_interval: float = defaults.PROBE_INTERVAL_S
    max_backoff: float = defaults.MAX_BACKOFF_S
    kuberay_cmd: str | None = None


def _local_interface(head_host: str | None, ifname: str | None) -> network.Interface:
    head_ip = None
    if head_host and not ifname:
        with contextlib.suppress(OSError):  # the head's DNS record may not exist yet
            head_ip = network.resolve(head_host)
    return network.select_interface(head_ip, ifname, os.environ)


def _env_for(iface: network.Interface, auth: dict[str, str]) -> dict[str, str]:
    extra = network.network_env(iface, os.environ)
    log(f"interface {iface.name} ({iface.ip}): {iface.why}")
    log(" ".join(f"{k}={v}" for k, v in sorted(extra.items())))
    return child_env({**extra, **auth})


def _layout(
    head: bool, kuberay: bool, extra: Sequence[str], port_range, dashboard: bool = False, gcs: int | None = None
) -> rayports.NodeLayout:
    # KubeRay's generated command fixes some ports (--metrics-export-port=8080, --dashboard-agent-listen-port=52365:
    # kuberay v1.5.1 ray-operator/controllers/ray/common/pod.go setMissingRayStartParams); the node's own
    # come after it and win (click keeps an option's last value). Its head keeps the dashboard and client
    # ports the head Service publishes for the job submitter; a --dashboard head keeps Ray's 8265.
    keep: tuple[str, ...] = ("--dashboard-port", "--ray-client-server-port") if head and kuberay else ()
    keep += ("--dashboard-port",) if dashboard else ()
    return rayports.layout(head, extra, port_range, keep=keep, avoid=(gcs,) if gcs else ())


def run_head(opts: HeadOptions) -> int:
    auth = rayauth.given(os.environ)  # before anything else: a missing or bad token is one line
    if auth is None and opts.nnodes > 1:
        raise ClusterError(f"a head that workers join needs the job's Ray token: {rayauth.HOW}", Exit.BAD_INPUT)
    iface = _local_interface(opts.head_host, opts.ifname)
    if not port_free(opts.port, iface.ip):  # at once, not after --start-timeout
        raise ClusterError(
            f"port {opts.port} on {iface.ip} is in use; pass another --port or stop what listens there", Exit.RAY_FAILED
        )
    layout = _layout(True, bool(opts.kuberay_cmd), opts.extra_args, opts.port_range, opts.dashboard, opts.port)
    owned = None
    if auth is None:
        owned = rayauth.token_dir()
        auth = {rayauth.MODE_ENV: "token", rayauth.PATH_ENV: str(rayauth.new_token(owned))}
        log(f"no Ray token given: made one for this head in {auth[rayauth.PATH_ENV]} (drivers need {rayauth.PATH_ENV})")
    os.environ.update(auth)  # this process's own ray.init (waiting for the nodes) needs the token too
    env = {**_env_for(iface, auth), **layout.env}
    spec = NodeSpec(
        npus=opts.npus, node_ip=iface.ip, dashboard=opts.dashboard, extra_args=opts.extra_args, layout=layout
    )
    argv = (
        kuberay_argv(opts.kuberay_cmd, iface.ip, layout, opts.extra_args)
        if opts.kuberay_cmd
        else head_argv(spec, opts.port)
    )
    address = Address(iface.ip, opts.port)
    node = RayNode(argv, env, log, owned=owned)
    job: subprocess.Popen | None = None
    with proctree.reaped(), proctree.signals_raise():
        try:
            node.start()
            if not node.wait_started(Deadline(opts.start_timeout)):
                raise ClusterError(f"Ray did not start on this head: {node.failure()}", Exit.RAY_FAILED)
            log(f"head up at {address} with {opts.npus} NPU; expecting {opts.nnodes} nodes")
            if not opts.command:
                if node.proc is None:  # node.start() above set it
                    raise RuntimeError("ray head process was not started")
                node.proc.wait()
                raise ClusterError(f"Ray on this head exited on its own: {node.failure()}", Exit.RAY_FAILED)
            _wait_for_nodes(node, address, Expectation(opts.nnodes, opts.npus), Deadline(opts.wait_timeout))
            log("running: " + " ".join(opts.command))
            job = subprocess.Popen(list(opts.command), env={**env, "RAY_ADDRESS": str(address)})
            while (code := _poll(job, 0.5)) is None:
                if node.poll() is not None:
                    # The job would notice in its own time (verl waits on actors whose node is gone).
                    why = node.failure()
                    log(f"Ray on this head died; stopping the job ({why})")
                    proctree.stop(job, grace=RAY_DIED_JOB_GRACE_S)
                    raise ClusterError(f"Ray on this head died under the job: {why}", Exit.RAY_FAILED)
            log(f"job exited with code {code}; stopping Ray")
            return code
        except proctree.Terminated as stop:
            log(f"{stop}; stopping the job and Ray")
            if job is not None:
                # The job (npu-rl train) stops its verl driver in an orderly way; give it time.
                proctree.stop(job, grace=60.0)
            return stop.exit_code
        finally:
            node.stop()


# What `npu-rl ray head` allows the job when Ray under it died: the whole exit stays within 30 s.
RAY_DIED_JOB_GRACE_S = 20.0


def _poll(proc: subprocess.Popen, timeout: float) -> int | None:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def _wait_for_nodes(node: RayNode | None, address: Address, want: Expectation, deadline: Deadline) -> None:
    """wait_for_cluster, given up at the deadline or as soon as Ray on this ``node`` dies: ray.init has no
    deadline of its own and waits for a dead GCS for minutes, so it runs in a thread the caller can leave."""
    outcome: dict = {}

    def wait() -> None:
        try:
            wait_for_cluster(address, want, deadline, log)
        except BaseException as err:  # noqa: BLE001 - handed to the main thread
            outcome["error"] = err

    waiter = threading.Thread(target=wait, name="ray-wait", daemon=True)
    waiter.start()
    give_up = time.monotonic() + deadline.left() + defaults.RAY_CONNECT_GRACE_S
    while waiter.is_alive():
        waiter.join(timeout=0.5)
        if node is not None and node.poll() is not None:
            raise ClusterError(f"Ray on this head died while waiting for the nodes: {node.failure()}", Exit.RAY_FAILED)
        if time.monotonic() >= give_up:
            raise ClusterError(
                f"no Ray cluster answered at {address} within {deadline.end - deadline.start:.0f}s "
                "(is it a Ray head's GCS port?)",
                Exit.CLUSTER_TIMEOUT,
            )
    err = outcome.get("error")
    if isinstance(err, ClusterTimeout):
        raise ClusterError(str(err), Exit.CLUSTER_TIMEOUT) from None
    if err is not None:
        raise err


def _join(opts: WorkerOptions, node_factory: Callable[[], RayNode], deadline: Deadline) -> RayNode:
    delays = backoff(cap=opts.max_backoff)
    attempt = 0
    while True:
        attempt += 1
        if not wait_for_port(opts.head, deadline, delays, log):
            raise ClusterError(
                f"head {opts.head} not reachable after {deadline.elapsed():.0f}s "
                f"({attempt} attempts); is the head pod running?",
                Exit.JOIN_TIMEOUT,
            )
        node = node_factory().start()
        if node.wait_started(deadline):
            return node
        fatal = node.fatal()
        code = node.stop()
        if fatal:  # a daemon of this node died: a retry would die the same way
            raise ClusterError(f"Ray did not start on this worker: {fatal}", Exit.RAY_FAILED)
        if deadline.passed():
            raise ClusterError(
                f"could not join head {opts.head} within {deadline.elapsed():.0f}s (ray start exit code {code})",
                Exit.JOIN_TIMEOUT,
            )
        delay = min(next(delays), deadline.left())
        log(f"ray start exited with code {code} before joining; retrying in {delay:.1f}s")
        time.sleep(delay)


def _watch_head(node: RayNode, opts: WorkerOptions) -> int:
    last_seen = time.monotonic()
    while True:
        code = node.poll()
        if code is not None:
            if not port_open(opts.head):
                raise ClusterError(
                    f"head {opts.head} is gone and Ray on this node exited (code {code})", Exit.HEAD_LOST
                )
            raise ClusterError(f"Ray on this worker died while the head is up: {node.failure()}", Exit.RAY_FAILED)
        if port_open(opts.head, timeout=opts.probe_interval):
            last_seen = time.monotonic()
        elif time.monotonic() - last_seen >= opts.head_lost_after:
            node.stop()
            raise ClusterError(
                f"head {opts.head} unreachable for {opts.head_lost_after:.0f}s "
                "(its job ended or it died); stopped this worker",
                Exit.HEAD_LOST,
            )
        time.sleep(opts.probe_interval)


def run_worker(opts: WorkerOptions) -> int:
    deadline = Deadline(opts.join_timeout)

    auth = rayauth.required(os.environ, "a Ray worker")  # at once, not after the join timeout

    @functools.cache
    def prepared() -> tuple[network.Interface, dict[str, str]]:
        # The route to the head is only known once its name resolves, i.e. after the first probe succeeds.
        iface = _local_interface(opts.head.host, opts.ifname)
        return iface, _env_for(iface, auth)

    def make_node() -> RayNode:
        iface, env = prepared()
        # Fresh ports per attempt: a port another process took since is not tried again.
        layout = _layout(False, bool(opts.kuberay_cmd), opts.extra_args, opts.port_range)
        spec = NodeSpec(npus=opts.npus, node_ip=iface.ip, extra_args=opts.extra_args, layout=layout)
        if opts.kuberay_cmd:
            argv = kuberay_argv(opts.kuberay_cmd, iface.ip, layout, opts.extra_args)
        else:
            argv = worker_argv(spec, opts.head)
        return RayNode(argv, env, log)

    node: RayNode | None = None
    with proctree.reaped(), proctree.signals_raise():
        try:
            node = _join(opts, make_node, deadline)
            log(f"joined head {opts.head} with {opts.npus} NPU after {deadline.elapsed():.0f}s")
            return _watch_head(node, opts)
        except proctree.Terminated as stop:
            log(f"{stop}; stopping Ray")
            return stop.exit_code
        finally:
            if node is not None:
                node.stop()


def run_wait(head: Address, want: Expectation, timeout: float) -> int:
    os.environ.update(rayauth.required(os.environ, "npu-rl ray wait"))
    import ray  # noqa: F401  # lazy: ray; imported before the deadline starts, not counted against the head

    deadline = Deadline(timeout)
    if not wait_for_port(head, deadline, backoff(), log):
        raise ClusterError(
            f"head {head} not reachable after {deadline.elapsed():.0f}s; {want.nnodes} of {want.nnodes} nodes missing",
            Exit.CLUSTER_TIMEOUT,
        )
    # ray.init rewrites 127.0.0.1 to the node's address, and a port that answers but is not Ray would hang it.
    _wait_for_nodes(None, head, want, deadline)
    return 0
