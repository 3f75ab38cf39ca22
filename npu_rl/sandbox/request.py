"""SandboxFusion's ``/run_code`` request and response, and the caps this server puts on a request.

The names and statuses are SandboxFusion's (its ``RunCodeRequest`` / ``RunCodeResponse``), because verl
reads them: verl 0.9.0 ``verl/utils/reward_score/sandbox_fusion/utils.py:101-110`` posts ``code``,
``language``, ``stdin`` (possibly null), ``compile_timeout``, ``run_timeout``, ``memory_limit_MB``, ``files``
and ``fetch_files``, and ``:373-441`` scores ``status`` (``Success``, ``Failed``, ``SandboxError``) with
``run_result.status`` (``Finished``, ``TimeLimitExceeded``, ``Error``) and ``run_result.return_code``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

# What each language runs: the code is written to the execution's working directory under this name.
LANGUAGES = {"python": "main.py", "bash": "main.sh"}

RunStatus = Literal["Finished", "TimeLimitExceeded", "Error"]
ApiStatus = Literal["Success", "Failed", "SandboxError"]


@dataclass(frozen=True)
class Caps:
    """The most a request may ask for, and what it gets where it asks for nothing (``memory_limit_MB`` -1)."""

    max_code_bytes: int = 1 << 20
    max_stdin_bytes: int = 8 << 20
    max_run_timeout: float = 60.0
    default_memory_mb: int = 1024
    max_memory_mb: int = 4096
    # Per execution: processes (RLIMIT_NPROC of the slot's own user), open files, one file's size, the
    # working directory's and /tmp's tmpfs, and each of stdout and stderr before the cut.
    max_procs: int = 64
    max_open_files: int = 256
    disk_mb: int = 64
    output_bytes: int = 1 << 20


class RequestError(ValueError):
    """A request this server will not run: answered with a 4xx and this one line."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class RunCodeRequest(BaseModel):
    # SandboxFusion's request has more fields (extra_args, ...): ignored, as its own server ignores unknown ones.
    model_config = ConfigDict(extra="ignore")

    code: str
    language: str = "python"
    stdin: str | None = None
    compile_timeout: float = 10.0
    run_timeout: float = 10.0
    memory_limit_MB: int = -1
    files: dict[str, str | None] = Field(default_factory=dict)
    fetch_files: list[str] = Field(default_factory=list)

    @field_validator("compile_timeout", "run_timeout")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v) or v <= 0:
            raise ValueError("must be a positive number of seconds")
        return v


def parse(body: Any, caps: Caps) -> RunCodeRequest:
    """The request in ``body`` (decoded JSON), checked against ``caps``; RequestError names the first fault."""
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    try:
        req = RunCodeRequest.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        raise RequestError(f"{where}: {err['msg']}") from None
    for name, text in (("code", req.code), ("stdin", req.stdin or "")):
        try:
            text.encode()
        except UnicodeError:
            raise RequestError(f"{name} is not valid Unicode (a lone surrogate)") from None
    if req.language not in LANGUAGES:
        raise RequestError(f"language {req.language!r} is not served (served: {', '.join(LANGUAGES)})")
    if len(req.code.encode()) > caps.max_code_bytes:
        raise RequestError(f"code is over {caps.max_code_bytes} bytes", status=413)
    if req.stdin is not None and len(req.stdin.encode()) > caps.max_stdin_bytes:
        raise RequestError(f"stdin is over {caps.max_stdin_bytes} bytes", status=413)
    if req.run_timeout > caps.max_run_timeout:
        raise RequestError(f"run_timeout {req.run_timeout:g} s is over this server's {caps.max_run_timeout:g} s")
    if req.memory_limit_MB != -1 and not 16 <= req.memory_limit_MB <= caps.max_memory_mb:
        raise RequestError(f"memory_limit_MB must be -1 or 16..{caps.max_memory_mb} (got {req.memory_limit_MB})")
    if req.files or req.fetch_files:
        # verl sends both empty; a file a run leaves is never handed back (no run sees another's files).
        raise RequestError("files and fetch_files are not served: send the code alone")
    return req


def memory_mb(req: RunCodeRequest, caps: Caps) -> int:
    return caps.default_memory_mb if req.memory_limit_MB == -1 else req.memory_limit_MB


class RunResult(BaseModel):
    status: RunStatus
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str = ""
    stderr: str = ""


class RunCodeResponse(BaseModel):
    status: ApiStatus
    message: str = ""
    compile_result: RunResult | None = None
    run_result: RunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def of(cls, run: RunResult) -> RunCodeResponse:
        """SandboxFusion's verdict: Success only for a run that finished with exit code 0."""
        ok = run.status == "Finished" and run.return_code == 0
        return cls(status="Success" if ok else "Failed", run_result=run)
