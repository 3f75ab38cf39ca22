"""When a run's sandbox counts as down, and the verdict the launch reads back.

One tool call that cannot reach the sandbox is the policy's bad luck: it sees why in the tool's answer and
the rollout goes on. Every call failing for ``down_s`` seconds is an outage: a run that went on would train
on error text. The tool then writes its verdict to the file the launch named (``FILE_ENV``) and holds its
rollout until the launch stops the run. verl 0.9 survives a failed rollout (trainer/ppo/v1/agent_loop_tq.py
``_run_prompt`` marks the prompt failed and trains on the rest), so the stop is the launch's: ``VerdictWatch``
sees the file, the launch stops verl and ends the run with ``Exit.SANDBOX_DOWN`` and one line, and a restart
resumes from the newest checkpoint once the sandbox answers again. The hold keeps the step from finishing
meanwhile: a rollout that failed at once let a step of failed prompts finish, and save its checkpoint, before
the launch's stop landed. Where no launch watches (no ``FILE_ENV``), or none stops the run within
``HOLD_S``, the rollout fails instead. The standard library only: the launch reads the verdict without verl.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path

FILE_ENV = "NPU_RL_SANDBOX_OUTAGE_FILE"
# The launch polls for the verdict every second and stops verl within its grace: far less than this.
HOLD_S = 120.0


class SandboxDown(RuntimeError):
    """Raised where the rollout must stop: every call failed for the allowance."""


class Outage:
    """Calls that did not reach the sandbox since the last one that did, in one process (an agent loop
    worker's tools share it)."""

    def __init__(self, down_s: float, clock=time.monotonic):
        self.down_s, self._clock = down_s, clock
        self._lock = threading.Lock()
        self.first_failure: float | None = None
        self.failures = 0
        self.last_error = ""

    def reached(self) -> None:
        with self._lock:
            self.first_failure, self.failures = None, 0

    def failed(self, error: str) -> None:
        with self._lock:
            if self.first_failure is None:
                self.first_failure = self._clock()
            self.failures += 1
            self.last_error = error

    def down_for(self) -> float:
        with self._lock:
            return 0.0 if self.first_failure is None else self._clock() - self.first_failure

    @property
    def is_down(self) -> bool:
        return self.first_failure is not None and self.down_for() >= self.down_s

    def verdict(self) -> str:
        return (
            f"the sandbox was unreachable for {self.down_for():.0f}s ({self.failures} tool calls failed, the last: "
            f"{self.last_error})"
        )

    def record(self) -> str | None:
        """Write the verdict where the launch reads it; the file's path, None where no launch watches."""
        path = os.environ.get(FILE_ENV)
        if not path:
            return None
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(f"{path}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(json.dumps({"error": self.verdict(), "pid": os.getpid(), "time": time.time()}), encoding="utf-8")
        tmp.replace(path)
        return path

    async def stop(self) -> None:
        """Record the verdict, hold the rollout while the launch stops the run, then raise SandboxDown."""
        if self.record() is not None:
            await asyncio.sleep(HOLD_S)
        raise SandboxDown(self.verdict())


def verdict_error(path: Path) -> str | None:
    """The recorded outage's line, or None where the run recorded none."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    error = data.get("error") if isinstance(data, dict) else None
    return str(error) if error else None


class VerdictWatch:
    """Polls for the verdict file from a daemon thread; once it is there, runs ``on_verdict`` once."""

    def __init__(self, path: Path, on_verdict, poll: float = 1.0):
        self.path, self.on_verdict, self.poll = path, on_verdict, poll
        self.seen: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="npu-rl-sandbox-outage", daemon=True)

    def __enter__(self) -> VerdictWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        # Joined whatever it saw: a verdict it finds while the run ends is settled, and a stop it started is
        # over, before the launch reads how the run ended.
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._done.wait(self.poll):
            why = verdict_error(self.path)
            if why is not None:
                self.seen = why
                self.on_verdict()
                return
