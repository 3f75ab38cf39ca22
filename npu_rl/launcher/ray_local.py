"""A real single-node Ray head on 127.0.0.1 for one run (`npu-rl train` without a cluster).

It is a :class:`npu_rl.cluster.raynode.RayNode` (``ray start --head --block`` in
its own process group), so stopping it stops exactly this run's daemons and
never another Ray on the same machine, which ``ray stop`` would. A ``--ray-port``
that is in use is refused earlier, by the train preflight (``npu-rl doctor``'s port check).

Like a pod's node it has ports and a temp dir of its own (npu_rl.cluster.rayports), so runs beside
each other on one machine never meet, and a token of its own (npu_rl.cluster.rayauth): while it runs,
this process's environment carries the token's variables, so the verl driver, the stack dumps and any
``ray.init`` of this process reach it and nothing else does.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ..cluster import rayauth, rayports
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
        layout = rayports.layout(head=True, avoid=(self.port,))
        # A token per run, whatever the environment holds: this head is nobody else's.
        token = rayauth.token_dir()
        self.auth = {rayauth.MODE_ENV: "token", rayauth.PATH_ENV: str(rayauth.new_token(token))}
        spec = NodeSpec(npus=npus, node_ip="127.0.0.1", extra_args=[f"--num-cpus={num_cpus}"], layout=layout)
        # inherit=False: ``env`` is the raylet's whole environment, not an addition to this process's.
        node_env = {**(child_env(env) if inherit else dict(env)), **self.auth, **layout.env}
        node_env.pop(rayauth.TOKEN_ENV, None)  # Ray reads it before the file: the outer job's token would win
        self.node = RayNode(
            head_argv(spec, self.port),
            node_env,
            log=log or (lambda line: print(f"npu-rl: {line}")),
            output=output,
            owned=token,
        )
        self._saved: dict[str, str | None] = {}
        self.startup_timeout = startup_timeout

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> LocalRayHead:
        self._saved = {k: os.environ.get(k) for k in (*self.auth, rayauth.TOKEN_ENV)}
        os.environ.pop(rayauth.TOKEN_ENV, None)  # it would win over this head's file
        os.environ.update(self.auth)
        rayauth.observe_in_process()
        try:
            self.node.start()
        except BaseException:
            self.stop()
            raise
        if not self.node.wait_started(Deadline(self.startup_timeout)):
            why = self.node.failure()  # read before stop(): ray start's last lines and the daemons' logs
            self.stop()
            raise UserError(f"ray head on {self.address} did not start: {why}")
        return self

    def stop(self) -> None:
        self.node.stop()
        for k, v in self._saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        rayauth.observe_in_process()

    def __enter__(self) -> LocalRayHead:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
