"""A run's side of a sandbox: is it there. The standard library only, so a launch can ask before Ray or verl
start (npu_rl.launcher.preflight), of npu-rl's own service or of any SandboxFusion, both of which answer
``GET /v1/ping`` with ``pong`` beside their ``/run_code``."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable

# Where a run's processes (a code reward, an agent's tool) find the sandbox's /run_code.
URL_ENV = "NPU_RL_SANDBOX_URL"
PING_TIMEOUT_S = 5.0
POLL_S = 2.0


def ping_url(run_code_url: str) -> str:
    return run_code_url.removesuffix("/run_code") + "/v1/ping"


def unanswered(run_code_url: str, timeout: float = PING_TIMEOUT_S) -> str | None:
    """Why the sandbox at ``run_code_url`` does not answer its ping, or None where it does."""
    url = ping_url(run_code_url)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 (http(s) only: the recipe's pattern)
            body = r.read(64).decode(errors="replace").strip()
    except urllib.error.HTTPError as e:
        return f"{url} answered HTTP {e.code}"
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        return f"nothing answers at {url} ({reason})"
    return None if body.strip('"') == "pong" else f"{url} answered {body[:40]!r}, not pong"


def wait_answered(
    run_code_url: str, wait_s: float, progress: Callable[[str], None] | None = None, poll_s: float = POLL_S
) -> str | None:
    """None once the sandbox answers; why it does not after ``wait_s`` (``progress`` hears the first miss:
    on Kubernetes the sandbox pods start beside the job's)."""
    deadline = time.monotonic() + wait_s
    told = False
    while (why := unanswered(run_code_url)) is not None:
        left = deadline - time.monotonic()
        if left <= 0:
            return why
        if progress is not None and not told:
            progress(f"waiting up to {wait_s:.0f}s for the sandbox: {why}")
            told = True
        time.sleep(min(poll_s, left))
    return None
