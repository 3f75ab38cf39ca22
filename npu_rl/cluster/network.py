"""Which network interface this node talks to the head on, and the variables that
pin HCCL, Gloo and TensorPipe to it.

Ascend hosts carry several interfaces (management, RoCE for HCCL, container
bridges); letting each library pick its own leads to rendezvous on an
unreachable address, which hangs rather than fails. The interface is the one
the kernel routes to the head through, unless given.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

import psutil

from ..errors import UserError

# A route lookup needs some destination; nothing is sent to it.
_DEFAULT_ROUTE_PROBE = "8.8.8.8"

IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME")


@dataclass(frozen=True)
class Interface:
    name: str
    ip: str
    why: str = field(default="", compare=False)  # how it was chosen, for the node's log


def resolve(host: str) -> str:
    """IPv4 address of ``host``; raises OSError while DNS does not know it yet."""
    sockaddr = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4]
    return str(sockaddr[0])  # an AF_INET sockaddr is (address, port): typeshed's union also has int-first ones


def route_source_ip(dest_ip: str) -> str:
    """The local address the kernel would send from to reach ``dest_ip`` (UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((dest_ip, 9))
        return s.getsockname()[0]


def interface_of(ip: str) -> str | None:
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == ip for a in addrs):
            return name
    return None


def address_of(ifname: str) -> str:
    addrs = psutil.net_if_addrs()
    if ifname not in addrs:
        raise UserError(f"network interface {ifname!r} not found (have: {', '.join(sorted(addrs))})")
    for a in addrs[ifname]:
        if a.family == socket.AF_INET:
            return a.address
    raise UserError(f"network interface {ifname!r} has no IPv4 address")


def select_interface(
    head_ip: str | None = None, ifname: str | None = None, environ: Mapping[str, str] | None = None
) -> Interface:
    """The given interface, else one a socket variable of ``environ`` names (the recipe's or the pod's
    ``HCCL_SOCKET_IFNAME``...), else the one routing to ``head_ip``, else the default route's."""
    if ifname:
        return Interface(ifname, address_of(ifname), f"given by --ifname/NPU_RL_IFNAME {ifname}")
    # Only a variable that is exactly one of this host's interfaces names it: HCCL and Gloo also take
    # prefixes, lists and exclusions (eth, eth0,eth1, ^docker), which say nothing about this node's address.
    here = psutil.net_if_addrs()
    named = next(((var, (environ or {})[var]) for var in IFNAME_VARS if (environ or {}).get(var) in here), None)
    if named:
        return Interface(named[1], address_of(named[1]), f"named by {named[0]}={named[1]}")
    try:
        ip = route_source_ip(head_ip or _DEFAULT_ROUTE_PROBE)
        why = (
            f"the route to the head {head_ip} leaves through it"
            if head_ip
            else "the default route leaves through it (no head address to route to)"
        )
    except OSError:
        # No default route (air-gapped host): fall back to what the host name resolves to.
        ip = resolve(socket.gethostname())
        why = f"no route to {head_ip or 'a default gateway'}; it carries this host name's address"
    name = interface_of(ip)
    if name is None:
        raise UserError(
            f"no local interface carries {ip} (the route to {head_ip or 'the default gateway'}); pass --ifname"
        )
    return Interface(name, ip, f"{why}; no --ifname, NPU_RL_IFNAME or socket variable names one")


def network_env(iface: Interface, environ: Mapping[str, str]) -> dict[str, str]:
    """Variables to export before `ray start` so that every process Ray spawns inherits them.

    Values already set in ``environ`` (pod spec, recipe) win: an operator who
    pinned HCCL to a RoCE interface knows better than the route table.
    """
    wanted = {
        # verl/vllm-ascend place NPUs themselves; Ray must not rewrite ASCEND_RT_VISIBLE_DEVICES.
        "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES": "1",
        "HCCL_IF_IP": iface.ip,
        **{name: iface.name for name in IFNAME_VARS},
    }
    return {k: environ.get(k) or v for k, v in wanted.items()}
