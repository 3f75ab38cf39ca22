"""A run's side of a sandbox: is it there. The standard library only, so a launch can ask before Ray or verl
start (npu_rl.launcher.preflight), of npu-rl's own service or of any SandboxFusion, both of which answer
``GET /v1/ping`` with ``pong`` beside their ``/run_code``."""

from __future__ import annotations

import http.client
import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable

# Where a run's processes (a code reward, an agent's tool) find the sandbox's /run_code.
URL_ENV = "NPU_RL_SANDBOX_URL"
PING_TIMEOUT_S = 5.0
POLL_S = 2.0
# Beyond a request's own run time: a jail's start, and a queue before a free slot.
ANSWER_GRACE_S = 30.0


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


class Unavailable(Exception):
    """The sandbox did not run the code. ``refused``: it answered and turned the request down (a 4xx: the
    request's fault, the sandbox is up); otherwise nothing answered, it stayed busy, or it failed itself
    (SandboxFusion's ``SandboxError``). Not the code's own failure, which is an answer."""

    def __init__(self, message: str, refused: bool = False):
        super().__init__(message)
        self.refused = refused


# A busy sandbox (503, 429) is asked again after its Retry-After, spread by a random factor so that the calls
# it turned away together do not all come back together, until BUSY_WAIT_S have passed. Busy is an answer,
# not an outage: a rollout's calls come in bursts (every agent loop worker's at once, 64 on the CPU demo
# against 2 slots and 16 places in the queue), and a step waits on its slowest call anyway. A count of tries
# instead turned calls away as "not run" once a loaded machine ran the jails slower (the agent run in CI).
BUSY_WAIT_S = 120.0
BUSY_WAIT_MAX_S = 5.0


def run_code(
    run_code_url: str,
    code: str,
    *,
    run_timeout: float,
    memory_mb: int = -1,
    language: str = "python",
    stdin: str | None = None,
    busy_wait_s: float = BUSY_WAIT_S,
) -> dict:
    """SandboxFusion's answer to running ``code`` (``status``, ``run_result``); Unavailable where the sandbox
    gave none. The request is SandboxFusion's (npu_rl.sandbox.request), so any SandboxFusion serves it."""
    body = json.dumps(
        {"code": code, "language": language, "run_timeout": run_timeout, "memory_limit_MB": memory_mb, "stdin": stdin}
    ).encode()
    deadline = time.monotonic() + busy_wait_s
    tries = 0
    while True:
        tries += 1
        try:
            return _post(run_code_url, body, run_timeout + ANSWER_GRACE_S)
        except _Busy as busy:
            wait = min(busy.retry_after, BUSY_WAIT_MAX_S) * random.uniform(0.5, 1.5)  # noqa: S311 (spread, not secret)
            if time.monotonic() + wait > deadline:
                # Not "refused": a gateway may answer 503 for a sandbox that is gone. The outage's ping decides.
                raise Unavailable(f"{run_code_url} stayed busy for {busy_wait_s:g}s ({tries} tries): {busy}") from None
            time.sleep(wait)


class _Busy(Exception):
    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


def _post(run_code_url: str, body: bytes, wait: float) -> dict:
    req = urllib.request.Request(run_code_url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=wait) as r:  # noqa: S310 (http(s) only: the recipe's pattern)
            answer = json.loads(r.read())
    except urllib.error.HTTPError as e:
        why = f"{run_code_url} answered HTTP {e.code}: {_error_text(e)}"
        if e.code in (429, 503):
            raise _Busy(why, _retry_after(e)) from None
        raise Unavailable(why, refused=400 <= e.code < 500) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        raise Unavailable(f"nothing answers at {run_code_url} ({getattr(e, 'reason', e)})") from None
    except ValueError:
        raise Unavailable(f"{run_code_url} answered something that is not JSON") from None
    if not isinstance(answer, dict) or answer.get("status") not in ("Success", "Failed"):
        status = answer.get("status") if isinstance(answer, dict) else None
        why = (answer.get("message") if isinstance(answer, dict) else None) or "no message"
        raise Unavailable(f"the sandbox failed itself ({status}): {why}")
    return answer


def _retry_after(e: urllib.error.HTTPError) -> float:
    try:
        return max(0.1, float(e.headers.get("Retry-After", "1")))
    except (TypeError, ValueError):
        return 1.0


def _error_text(e: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(e.read(4096)).get("error", ""))[:200]
    except (ValueError, AttributeError, OSError):
        return e.reason if isinstance(e.reason, str) else ""
