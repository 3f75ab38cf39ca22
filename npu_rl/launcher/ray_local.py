"""A real single-node Ray head on 127.0.0.1 for one run (`npu-rl train` without a cluster).

It is a :class:`npu_rl.cluster.raynode.RayNode` (``ray start --head --block`` in
its own process group), so stopping it stops exactly this run's daemons and
never another Ray on the same machine, which ``ray stop`` would.
"""

from __future__ import annotations

import socket

from ..cluster.probe import Deadline
from ..cluster.raynode import NodeSpec, RayNode, child_env, head_argv
from ..errors import UserError


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
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
    def __init__(self, *, port: int | None, num_cpus: int, npus: int, env: dict[str, str],
                 startup_timeout: float = 120.0):
        if port is not None and port_in_use(port):
            raise UserError(f"Ray port {port} on 127.0.0.1 is already in use (pass --ray-port with a free port)")
        self.port = port or free_port()
        # Ray's client server defaults to port 10001 on every head; a second run on the
        # same machine would collide, so each run takes a free one.
        extra = [f"--num-cpus={num_cpus}", f"--ray-client-server-port={free_port()}"]
        spec = NodeSpec(npus=npus, node_ip="127.0.0.1", dashboard=False, extra_args=extra)
        self.node = RayNode(head_argv(spec, self.port), child_env(env), log=lambda line: print(f"npu-rl: {line}"))
        self.startup_timeout = startup_timeout

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "LocalRayHead":
        self.node.start()
        if not self.node.wait_started(Deadline(self.startup_timeout)):
            code = self.node.stop()
            raise UserError(f"ray head on {self.address} did not start (exit code {code}); see the [ray] lines above")
        return self

    def stop(self) -> None:
        self.node.stop()

    def __enter__(self) -> "LocalRayHead":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
