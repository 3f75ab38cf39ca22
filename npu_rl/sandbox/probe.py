"""Can an execution be isolated on this host: the jail made and one execution run through it, as
`npu-rl sandbox serve` does before it serves and `npu-rl doctor` does for a recipe whose sandbox runs here.
What a refusal means, and the host or container setting that lifts it (docs/sandbox.md), comes with it."""

from __future__ import annotations

import asyncio

from . import jail as jails
from .execute import Executor
from .request import Caps, RunCodeRequest

# The user `npu-rl doctor`'s probe runs as: no slot's of a service with the default --uid-base (61000 up), so
# probing a host where one serves takes nothing from its slots' process limits.
DOCTOR_UID = 60999
# The interpreter and its libraries, and the jail around them.
PROBE = ("import numpy, sympy; print(int(sympy.Integer(6) * int(numpy.int64(7))))", "42")
# And one that must be ended at its time limit (bash's sleep: no interpreter start to wait for).
STOP = ("sleep 30", 0.5)
# What bwrap's refusal means in a container, and the setting that lifts it.
HINTS = (
    (
        "Can't mount proc",
        "the container's /proc is masked; start it with docker's --security-opt systempaths=unconfined, podman's "
        "--security-opt unmask=ALL, or Kubernetes' securityContext.procMount: Unmasked (in a pod with "
        "hostUsers: false)",
    ),
    (
        "namespace",
        "user namespaces are refused here: user.max_user_namespaces must be above 0 (and Ubuntu 24.04's "
        "kernel.apparmor_restrict_unprivileged_userns 0, or the container's AppArmor profile unconfined), and a "
        "container's seccomp profile must allow unshare (docker: --security-opt seccomp=unconfined)",
    ),
    ("uid map", "user namespaces are refused here: user.max_user_namespaces must be above 0"),
    (
        "Can't set hostname",
        "the container's seccomp profile refuses the jail's namespaces: start it with --security-opt "
        "seccomp=unconfined, or Kubernetes' securityContext.seccompProfile.type: Unconfined",
    ),
    (
        "CAP_KILL",
        "the service ends executions run as its slots' users: root with the capability KILL (its pod's capabilities)",
    ),
    (
        "CAP_SETUID",
        "the service runs each slot as a user of its own: run it as root (in its pod: runAsUser 0 and the "
        "capabilities SETUID and SETGID)",
    ),
)


def hint(fault: str) -> str:
    """``fault`` with what lifts it, where it is one a container or a kernel setting makes."""
    for needle, fix in HINTS:
        if needle in fault:
            return f"{fault} ({fix})"
    return fault


def isolation_fault(jail: jails.Jail, caps: Caps) -> str | None:
    """Why no execution can be isolated in ``jail`` here (with its hint), or None where the probe ran."""

    async def probe() -> str | None:
        executor = Executor(jail, caps, 1)
        outcome = await executor.run(RunCodeRequest(code=PROBE[0], run_timeout=min(30.0, caps.max_run_timeout)))
        if outcome.run is None:
            return outcome.error
        if outcome.run.stdout.strip() != PROBE[1]:
            return (outcome.run.stderr.strip().splitlines() or ["no output"])[-1]
        # An execution past its time is ended: what every hostile one needs (the jail killed as its user).
        try:
            late = await executor.run(RunCodeRequest(code=STOP[0], language="bash", run_timeout=STOP[1]))
        except PermissionError as err:
            return str(err)
        if late.run is None or late.run.status != "TimeLimitExceeded":
            return f"an execution past its time limit was not ended: {late}"
        return None

    fault = asyncio.run(probe())
    return None if fault is None else hint(fault)
