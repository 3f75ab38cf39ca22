"""A real single-node Ray head on 127.0.0.1 for one run (`npu-rl train` without a cluster).

It is a :class:`npu_rl.cluster.raynode.RayNode` (``ray start --head --block`` in
its own process group), so stopping it stops exactly this run's daemons and
never another Ray on the same machine, which ``ray stop`` would. A ``--ray-port``
that is in use is refused earlier, by the train preflight (``npu-rl doctor``'s port check).
"""

from __future__ import annotations

from collections.abc import Callable

from ..cluster.probe import Deadline, free_port
from ..cluster.raynode import NodeSpec, RayNode, child_env, head_argv
from ..errors import UserError


class LocalRayHead:
    def __init__(
        self,
        *,
        port: int | None,
        num_cpus: int,
        npus: int,
        env: dict[str, str],
        startup_timeout: float = 120.0,
        inherit: bool = True,
        log: Callable[[str], None] | None = None,
        output: Callable[[str], None] | None = None,
    ):
        self.port = port or free_port()
        # Ray's client server defaults to port 10001 on every head; a second run on the
        # same machine would collide, so each run takes a free one. Workers too: every raylet hands
        # out worker ports from the same default range (10002-19999), so two runs on one machine race
        # for them ("Failed to start the grpc server. The specified port is 10003"); with the range 0
        # the raylet passes no port and each worker binds one the OS picks (ray 2.46
        # src/ray/raylet/worker_pool.cc, WorkerPool::WorkerPool: free_ports_ only for a non-zero range).
        extra = [
            f"--num-cpus={num_cpus}",
            f"--ray-client-server-port={free_port()}",
            "--min-worker-port=0",
            "--max-worker-port=0",
        ]
        spec = NodeSpec(npus=npus, node_ip="127.0.0.1", dashboard=False, extra_args=extra)
        # inherit=False: ``env`` is the raylet's whole environment, not an addition to this process's.
        self.node = RayNode(
            head_argv(spec, self.port),
            child_env(env) if inherit else dict(env),
            log=log or (lambda line: print(f"npu-rl: {line}")),
            output=output,
        )
        self.startup_timeout = startup_timeout

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> LocalRayHead:
        self.node.start()
        if not self.node.wait_started(Deadline(self.startup_timeout)):
            why = self.node.failure()  # read before stop(): ray start's last lines and the daemons' logs
            self.node.stop()
            raise UserError(f"ray head on {self.address} did not start: {why}")
        return self

    def stop(self) -> None:
        self.node.stop()

    def __enter__(self) -> LocalRayHead:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
