"""Is the head's GCS port reachable: a plain TCP connect, retried with backoff until a deadline.

A TCP probe costs nothing on the head and needs no Ray client, so workers use
it both to wait for the head to appear and to notice that it has gone.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .rayports import choose_ports


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str, default_port: int) -> Address:
        host, sep, port = text.rpartition(":")
        if not sep:
            return cls(text, default_port)
        if not port.isdigit() or not host:
            raise ValueError(f"bad address {text!r} (expected HOST or HOST:PORT)")
        return cls(host, int(port))


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` right now, from below the kernel's ephemeral range (rayports.default_range):
    a port from that range is what any bind to port 0 gets, so another process could take it before the
    caller binds it."""
    return choose_ports(1, host=host)[0]


def port_free(port: int, host: str = "0.0.0.0") -> bool:
    """Whether ``port`` can be bound on ``host`` now (a listener, Ray's or another's, makes it busy)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def port_open(addr: Address, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((addr.host, addr.port), timeout=timeout):
            return True
    except OSError:  # refused, unreachable, or a host name DNS does not know yet
        return False


def backoff(initial: float = 0.5, factor: float = 2.0, cap: float = 15.0) -> Iterator[float]:
    delay = initial
    while True:
        yield delay
        delay = min(cap, delay * factor)


class Deadline:
    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self.start = clock()
        self.end = self.start + seconds

    def left(self) -> float:
        return max(0.0, self.end - self._clock())

    def elapsed(self) -> float:
        return self._clock() - self.start

    def passed(self) -> bool:
        return self.left() <= 0


def wait_for_port(
    addr: Address,
    deadline: Deadline,
    delays: Iterator[float],
    progress: Callable[[str], None],
    what: str = "head",
    poll: float = 1.0,
) -> bool:
    """Poll until ``addr`` accepts connections (True) or the deadline passes (False).

    The port is tried every ``poll`` seconds (a TCP connect costs the head nothing); ``delays`` only space the
    progress lines, so that a head minutes away (image pulls) says so a few times, not every second. Spacing
    the tries themselves with the backoff had workers join up to 15 s after the head's port opened."""
    next_line = time.monotonic()
    while True:
        if port_open(addr, timeout=min(2.0, max(0.1, deadline.left()))):
            return True
        if deadline.passed():
            return False
        if time.monotonic() >= next_line:
            progress(
                f"{what} {addr} not reachable yet ({deadline.elapsed():.0f}s, {deadline.left():.0f}s left); "
                f"trying it every {poll:g}s"
            )
            next_line = time.monotonic() + next(delays)
        time.sleep(min(poll, deadline.left()))
