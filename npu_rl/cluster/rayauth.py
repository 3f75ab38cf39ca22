"""Ray token authentication for every Ray cluster npu-rl starts.

Without it anyone who reaches a node's Ray ports (hostNetwork pods listen on the Atlas hosts' own
addresses) can connect a driver and run code as the training container's user. Ray >= 2.52 checks a
shared token on every RPC and HTTP entry point once ``RAY_AUTH_MODE=token``; each process reads the token
from ``RAY_AUTH_TOKEN``, else the file ``RAY_AUTH_TOKEN_PATH``, else ``~/.ray/auth_token`` (ray 2.60
``src/ray/rpc/authentication/authentication_token_loader.cc``, ``TryLoadTokenFromSources``). ``ray start
--address`` never turns the mode on by itself (ray 2.60 ``python/ray/scripts/scripts.py`` 1236), so npu-rl
sets it for every node, driver and tool it starts.

The token travels as a file (``RAY_AUTH_TOKEN_PATH``), never as an argument: a process list, a log
or a dry run shows the path at most. Where it comes from:

* a job on Kubernetes: the Secret the rendered manifest mounts (``npu-rl render k8s`` names it); KubeRay
  makes its own and passes ``RAY_AUTH_TOKEN`` (``authOptions.mode: token``);
* ``npu-rl train`` on one host, and a lone ``npu-rl ray head``: a new token per run, written owner-only
  into a directory of its own (``/tmp/npu-rl-token-*``), removed when the node stops.
"""

from __future__ import annotations

import os
import secrets
import stat
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ..errors import UserError

MODE_ENV = "RAY_AUTH_MODE"
TOKEN_ENV = "RAY_AUTH_TOKEN"
PATH_ENV = "RAY_AUTH_TOKEN_PATH"
TOKEN_FILE = "auth_token"
HOW = (
    f"set {PATH_ENV} to a file holding the job's token (owner-only), or {TOKEN_ENV} (on Kubernetes: the "
    "Secret that the rendered manifest mounts; README, 'Clusters')"
)


def token_dir() -> Path:
    """A new owner-only directory for a token npu-rl makes, apart from Ray's temp dir (which is kept for its
    logs after the node ends, while the token goes with the node)."""
    return Path(tempfile.mkdtemp(prefix="npu-rl-token-"))


def new_token(directory: Path) -> Path:
    """A new token (256 bits, as ``ray get-auth-token --generate`` makes) in ``directory``, mode 0600."""
    path = directory / TOKEN_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return path


def given(environ: Mapping[str, str]) -> dict[str, str] | None:
    """The auth variables for the token the environment hands this job (None: it hands none); a token file
    that is missing, empty or readable by others is refused in one line before Ray starts."""
    if environ.get(TOKEN_ENV):
        return {MODE_ENV: "token", TOKEN_ENV: environ[TOKEN_ENV]}
    path = environ.get(PATH_ENV)
    if not path:
        return None
    try:
        info = os.stat(path)
        empty = not Path(path).read_text().strip()
    except OSError as err:
        raise UserError(f"{PATH_ENV}={path}: {err.strerror}") from None
    if empty:
        raise UserError(f"{PATH_ENV}={path} is empty")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise UserError(
            f"{PATH_ENV}={path} is readable by others (mode {stat.S_IMODE(info.st_mode):o}); chmod 600 it "
            "(a Kubernetes Secret volume: defaultMode 0400)"
        )
    return {MODE_ENV: "token", PATH_ENV: path}


def required(environ: Mapping[str, str], who: str) -> dict[str, str]:
    found = given(environ)
    if found is None:
        raise UserError(f"{who} needs the job's Ray token: {HOW}")
    return found


def observe_in_process() -> None:
    """Make this process's next ``ray.init`` read the token variables as they are now. Ray reads
    ``RAY_AUTH_MODE`` and the token once per process and caches both (ray 2.60
    ``ray/_private/authentication/authentication_token_setup.py`` 64-68 and 159-160 refresh them the same
    way), so a driver in a process that used Ray before its cluster's token was set would connect without
    it and be refused."""
    if "ray" not in sys.modules:
        return  # the first import reads them
    from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]  # lazy: ray, imported already

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
