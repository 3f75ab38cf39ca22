"""`npu-rl ray head|worker|wait`: bring up Ray across Ascend nodes (called by the pod entrypoint).

On Volcano the rendered job runs, through the image entrypoint::

    head pod:    npu-rl ray head --nodes N --devices D -- npu-rl train --recipe /etc/npu-rl/recipe.yaml
    worker pods: npu-rl ray worker --devices D

The head waits for all N nodes, runs the training with ``RAY_ADDRESS`` set and
exits with its exit code; workers exit once the head is gone. Values not
given as flags come from the launcher's environment (see
npu_rl.cluster.placement), then from ``--recipe``, then (NPUs) from the
``/dev/davinciN`` devices of the pod.
"""

from __future__ import annotations

import argparse
import os
import shlex

from .. import defaults
from ..cluster.probe import Address
from ..cluster.rayports import RANGE_ENV, parse_range
from ..errors import UserError
from . import options


def _common(p: argparse.ArgumentParser) -> None:
    # --port: the spelling rendered Kubernetes jobs use.
    options.add_ray_port(
        p, f"GCS port of the head (default {defaults.RAY_PORT} or ${defaults.RAY_PORT_ENV})", old_spellings=("--port",)
    )
    p.add_argument("--devices", type=int, default=None, help="NPUs per node (default: launcher env, recipe, /dev)")
    options.add_recipe(p, required=False, help="recipe to read resources.nnodes / devices_per_node from")


def _starts_ray(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ifname",
        default=os.environ.get("NPU_RL_IFNAME"),
        help="network interface for Ray/HCCL/Gloo (default: the one routing to the head)",
    )
    p.add_argument(
        "--cpus",
        type=int,
        default=None,
        help="logical CPUs this node registers with Ray (default: Ray counts the host's); rendered for CPU pods "
        "of recipes whose verl needs more than a small host has",
    )
    p.add_argument(
        "--ray-args",
        default=os.environ.get("NPU_RL_RAY_ARGS", ""),
        help="extra `ray start` arguments, one shell-quoted string (default $NPU_RL_RAY_ARGS); a port or "
        "--temp-dir given here is used instead of the node's own",
    )
    p.add_argument(
        "--ray-ports",
        metavar="LO-HI",
        default=os.environ.get(RANGE_ENV),
        help="choose this node's Ray ports inside LO-HI (a firewall's range; default: free ports below the "
        f"kernel's ephemeral range, or ${RANGE_ENV})",
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "ray",
        help="start a Ray head or worker on this node, or wait for the cluster",
        **options.examples(
            "npu-rl ray head --nodes 2 --devices 16 -- npu-rl train --recipe /etc/npu-rl/recipe.yaml",
            "npu-rl ray worker --devices 16",
        ),
    )
    rsub = options.subcommands(p, "ROLE")

    h = rsub.add_parser(
        "head",
        help="start the Ray head; with `-- COMMAND`, run it once all nodes joined",
        **options.examples(
            "npu-rl ray head --nodes 2 --devices 16 -- npu-rl train --recipe /etc/npu-rl/recipe.yaml",
            "npu-rl ray head --recipe deepseek_r1_671b_a3 --ifname eth0 --ray-ports 30000-30999",
        ),
    )
    _common(h)
    _starts_ray(h)
    h.add_argument("--nodes", type=int, default=None, help="nodes to wait for, head included")
    h.add_argument(
        "--wait-timeout",
        type=float,
        default=float(defaults.NODES_TIMEOUT_S),
        help=f"seconds to wait for all nodes (default {defaults.NODES_TIMEOUT_S})",
    )
    h.add_argument(
        "--start-timeout",
        type=float,
        default=float(defaults.RAY_START_TIMEOUT_S),
        help=f"seconds for `ray start` to come up (default {defaults.RAY_START_TIMEOUT_S})",
    )
    dash = h.add_mutually_exclusive_group()
    dash.add_argument(
        "--dashboard", action="store_true", help="serve the Ray dashboard on 127.0.0.1 (it asks for the Ray token)"
    )
    dash.add_argument("--no-dashboard", action="store_true", help=argparse.SUPPRESS)  # the default; old spelling
    h.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND",
        help="the job to run on the head; its exit code becomes this command's",
    )
    h.set_defaults(func=_head)

    w = rsub.add_parser(
        "worker",
        help="join the head (retrying) and exit when the head is gone",
        **options.examples(
            "npu-rl ray worker --devices 16   # the head from the launcher environment (MASTER_ADDR)",
            "npu-rl ray worker --address 10.0.0.1:6379 --devices 16 --ifname eth0",
        ),
    )
    _common(w)
    _starts_ray(w)
    w.add_argument("--address", default=None, help="head HOST[:PORT] (default: from the launcher environment)")
    w.add_argument(
        "--join-timeout",
        type=float,
        default=float(defaults.NODES_TIMEOUT_S),
        help=f"seconds to keep trying to join (default {defaults.NODES_TIMEOUT_S})",
    )
    w.add_argument(
        "--head-lost-after",
        type=float,
        default=float(defaults.HEAD_LOST_AFTER_S),
        help="seconds the head may be unreachable before this worker exits",
    )
    w.add_argument(
        "--probe-interval", type=float, default=float(defaults.PROBE_INTERVAL_S), help="seconds between head probes"
    )
    w.add_argument(
        "--max-backoff",
        type=float,
        default=float(defaults.MAX_BACKOFF_S),
        help="longest pause between ray start attempts (and between lines while the head is awaited)",
    )
    w.set_defaults(func=_worker)

    t = rsub.add_parser(
        "wait",
        help="wait until all nodes and NPUs joined; fail naming what is missing",
        **options.examples(
            "npu-rl ray wait --nodes 16 --devices 16 --wait-timeout 1800",
            "npu-rl ray wait --recipe deepseek_r1_671b_a3 --address 10.0.0.1:6379",
        ),
    )
    _common(t)
    t.add_argument("--address", default=None, help="head HOST[:PORT] (default: launcher env, else this node)")
    t.add_argument("--nodes", type=int, default=None, help="nodes expected, head included")
    # --timeout: the spelling rendered KubeRay jobs use.
    t.add_argument(
        "--wait-timeout",
        "--timeout",
        dest="wait_timeout",
        type=float,
        default=float(defaults.RAY_WAIT_TIMEOUT_S),
        help=f"seconds to wait (default {defaults.RAY_WAIT_TIMEOUT_S})",
    )
    t.set_defaults(func=_wait)


def _port(args: argparse.Namespace) -> int:
    if args.ray_port is not None:
        return args.ray_port
    raw = os.environ.get(defaults.RAY_PORT_ENV, str(defaults.RAY_PORT))
    if not raw.isdigit():
        raise UserError(f"{defaults.RAY_PORT_ENV}={raw!r} is not a port number")
    return int(raw)


def _recipe_resources(args: argparse.Namespace):
    recipe = options.load(args)
    return recipe.resources if recipe else None


def _positive(value: int | None, what: str) -> int | None:
    if value is not None and value < 1:
        raise UserError(f"{what} must be >= 1 (got {value})")
    return value


def resolve_counts(args: argparse.Namespace, placement) -> tuple[int | None, int]:
    """(nodes, NPUs per node): flags first, then the launcher's environment, the recipe, the pod's devices."""
    from ..platform.devices import discover  # lazy: the job

    res = _recipe_resources(args)
    nodes = _positive(getattr(args, "nodes", None), "--nodes") or placement.nnodes or (res.nnodes if res else None)
    devices = (
        _positive(args.devices, "--devices")
        or placement.devices_per_node
        or (res.devices_per_node if res else None)
        or len(discover())
    )
    if not devices:
        raise UserError("cannot tell how many NPUs this node has: no /dev/davinciN devices; pass --devices")
    return nodes, devices


def _extra(args: argparse.Namespace) -> list[str]:
    # --cpus first: a --num-cpus in --ray-args comes later and wins (Ray takes an option's last value).
    cpus = [f"--num-cpus={_positive(args.cpus, '--cpus')}"] if args.cpus is not None else []
    try:
        return cpus + shlex.split(args.ray_args)
    except ValueError as err:
        raise UserError(f"--ray-args: {err}") from None


def _kuberay_flag(cmd: str | None, name: str) -> str | None:
    for arg in shlex.split(cmd or ""):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


def _address(text: str, port: int):
    try:
        return Address.parse(text, port)
    except ValueError as err:
        raise UserError(f"--address: {err}") from None


def _range(args: argparse.Namespace) -> tuple[int, int] | None:
    return parse_range(args.ray_ports) if args.ray_ports else None


def _head(args: argparse.Namespace) -> int:
    from ..cluster.placement import detect  # lazy: the job
    from ..cluster.supervisor import HeadOptions, run_head  # lazy: the job

    placement = detect(os.environ, role="head")
    if placement.is_head is False:
        raise UserError(f"this node is not the head ({placement.describe()}); run `npu-rl ray worker`")
    nodes, devices = resolve_counts(args, placement)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if command and not nodes:
        raise UserError("how many nodes to wait for? pass --nodes or --recipe")
    port = int(_kuberay_flag(placement.ray_start_cmd, "port") or _port(args))
    return run_head(
        HeadOptions(
            nnodes=nodes or 1,
            npus=devices,
            port=port,
            ifname=args.ifname,
            head_host=placement.head_host,
            dashboard=args.dashboard,
            extra_args=_extra(args),
            port_range=_range(args),
            start_timeout=args.start_timeout,
            wait_timeout=args.wait_timeout,
            command=command,
            kuberay_cmd=placement.ray_start_cmd,
        )
    )


def _worker(args: argparse.Namespace) -> int:
    from ..cluster.placement import detect  # lazy: the job
    from ..cluster.supervisor import WorkerOptions, run_worker  # lazy: the job

    placement = detect(os.environ, role="worker")
    if placement.is_head and not args.address:
        raise UserError(f"this node is the head ({placement.describe()}); run `npu-rl ray head`")
    text = args.address or _kuberay_flag(placement.ray_start_cmd, "address") or placement.head_host
    if not text:
        raise UserError("no head address: pass --address HOST[:PORT] or set MASTER_ADDR")
    _, devices = resolve_counts(args, placement)
    return run_worker(
        WorkerOptions(
            head=_address(text, _port(args)),
            npus=devices,
            ifname=args.ifname,
            extra_args=_extra(args),
            port_range=_range(args),
            join_timeout=args.join_timeout,
            head_lost_after=args.head_lost_after,
            probe_interval=args.probe_interval,
            max_backoff=args.max_backoff,
            kuberay_cmd=placement.ray_start_cmd,
        )
    )


def _wait(args: argparse.Namespace) -> int:
    from ..cluster.membership import Expectation  # lazy: the job
    from ..cluster.network import select_interface  # lazy: the job
    from ..cluster.placement import detect  # lazy: the job
    from ..cluster.supervisor import run_wait  # lazy: the job

    placement = detect(os.environ)
    nodes, devices = resolve_counts(args, placement)
    if not nodes:
        raise UserError("how many nodes to wait for? pass --nodes or --recipe")
    ray_address = os.environ.get("RAY_ADDRESS", "")
    if ray_address == "auto" or "://" in ray_address:  # not a GCS host:port
        ray_address = ""
    text = args.address or ray_address or placement.head_host or select_interface().ip
    return run_wait(_address(text, _port(args)), Expectation(nodes, devices), args.wait_timeout)
