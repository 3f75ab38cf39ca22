"""One execution: the code in its jail, its limits, its capped output and its verdict.

Limits are set between fork and exec of bwrap and hold for everything it starts (the jail cannot raise a
hard limit): address space (``memory_limit_MB``), CPU time, processes (counted per user: each slot runs as a
user of its own), one file's size, open files, no core dumps. Wall time is the server's: past
``run_timeout`` bwrap is killed, and with it the PID namespace and every process in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import math
import os
import platform
import resource
import signal
import subprocess
import time
from dataclasses import dataclass

from . import jail as jails
from . import seccomp
from .request import LANGUAGES, Caps, RunCodeRequest, RunResult, memory_mb

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}
KEYCTL_JOIN_SESSION_KEYRING = 1
SIGXCPU_EXIT = 128 + signal.SIGXCPU
CHUNK = 1 << 16
# After the jail's first process ends, how long its pipes may stay open (the namespace being torn down).
DRAIN_S = 5.0
# How long a slot waits for its user's last processes to be gone before it takes the next request.
SETTLE_S = 5.0


@dataclass
class Outcome:
    """What the service answers: a run's result, or the sandbox's own failure (``error``)."""

    run: RunResult | None = None
    error: str | None = None


def _limits(req: RunCodeRequest, caps: Caps) -> list[tuple[int, int, int]]:
    cpu = math.ceil(req.run_timeout) + 1
    memory = memory_mb(req, caps) << 20
    return [
        (resource.RLIMIT_AS, memory, memory),
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_NPROC, caps.max_procs, caps.max_procs),
        (resource.RLIMIT_FSIZE, caps.disk_mb << 20, caps.disk_mb << 20),
        (resource.RLIMIT_NOFILE, caps.max_open_files, caps.max_open_files),
        (resource.RLIMIT_CORE, 0, 0),
    ]


def _preexec(uid: int | None, limits: list[tuple[int, int, int]], new_keyring: bool):
    libc = ctypes.CDLL(None, use_errno=True)
    keyctl = SYS_KEYCTL.get(platform.machine())

    def setup() -> None:  # between fork and exec: no Python objects of the parent's are touched
        if new_keyring and keyctl is not None:
            # An anonymous session keyring of its own (as runc gives a container): the server's is not
            # namespaced, and the code could otherwise read it and leave keys in it for later runs.
            libc.syscall(keyctl, KEYCTL_JOIN_SESSION_KEYRING, None)
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        # After setuid, which clears it: bwrap and so the whole jail die with the server.
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        for which, soft, hard in limits:
            resource.setrlimit(which, (soft, hard))

    return setup


async def _read_capped(stream: asyncio.StreamReader, cap: int | None) -> tuple[bytes, int]:
    """Up to ``cap`` bytes of ``stream`` (all of it where None) and how many it gave in all."""
    kept = bytearray()
    total = 0
    while chunk := await stream.read(CHUNK):
        total += len(chunk)
        if cap is None or len(kept) < cap:
            kept += chunk if cap is None else chunk[: cap - len(kept)]
    return bytes(kept), total


def _text(data: bytes, total: int, cap: int) -> str:
    text = data.decode("utf-8", errors="replace")
    if total > len(data):
        text += f"\n[npu-rl sandbox: output cut at {cap} of {total} bytes]"
    return text


def _exit_code(raw: bytes) -> int | None:
    """The code's exit code from bwrap's --json-status-fd documents; None where bwrap reported none."""
    code = None
    for line in raw.decode(errors="replace").splitlines():
        try:
            code = json.loads(line).get("exit-code", code)
        except ValueError:
            continue
    return code


class Executor:
    """Runs requests in ``jail``, each in a free slot (the slots bound the concurrent executions)."""

    def __init__(self, jail: jails.Jail, caps: Caps, slots: int):
        self.jail, self.caps = jail, caps
        self.free: asyncio.Queue[int] = asyncio.Queue()
        for slot in range(slots):
            self.free.put_nowait(slot)
        self.live: set[asyncio.subprocess.Process] = set()
        self.seccomp = seccomp.program()
        # A jail's first process, killed with its bwrap, is an orphan: this process, not the host's (or the
        # container's) init, becomes its parent and reaps it at once (_settle). An init that reaps late held
        # each slot for a second here; one that never reaps (this server as a container's pid 1) would fill
        # the pid table.
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)

    async def run(self, req: RunCodeRequest) -> Outcome:
        slot = await self.free.get()
        try:
            return await self._run_in(slot, req)
        finally:
            self.free.put_nowait(slot)

    async def _run_in(self, slot: int, req: RunCodeRequest) -> Outcome:
        jail, caps, off = self.jail, self.caps, self.jail.off
        name = LANGUAGES[req.language]
        code_fd = _memfd("code", req.code.encode())
        filter_fd = _memfd("seccomp", self.seccomp)
        status_r, status_w = os.pipe()
        try:
            cmd = jails.argv(
                jail,
                jails.command(jail, req.language, name),
                code_fd=code_fd,
                code_name=name,
                status_fd=status_w,
                disk_mb=caps.disk_mb,
                seccomp_fd=filter_fd,
            )
            limits = [] if "rlimits" in off else _limits(req, caps)
            uid = None if "user" in off else jail.uid(slot)
            t0 = time.monotonic()
            proc = await asyncio.create_subprocess_exec(
                *cmd,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(code_fd, status_w, filter_fd),
                # bwrap itself gets none of the server's variables either: its first process stays in the
                # jail's PID namespace as pid 1, whose /proc/1/environ the code can read.
                env=None if "env" in off else {"PATH": jails.ENV_PATH},
                start_new_session=True,
                preexec_fn=_preexec(uid, limits, new_keyring="keyring" not in off),
            )
        except subprocess.SubprocessError:
            # The switch to the slot's user (or a limit) failed between fork and exec: the service is not root,
            # or its container took CAP_SETUID/CAP_SETGID away. Nothing ran.
            os.close(status_r)
            return Outcome(
                error="the sandbox could not start: setting the slot's user and limits failed "
                "(Operation not permitted: the service needs root with CAP_SETUID and CAP_SETGID)"
            )
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(code_fd)
            os.close(filter_fd)
            os.close(status_w)
        self.live.add(proc)
        cap = None if "output" in off else caps.output_bytes
        assert proc.stdout is not None and proc.stderr is not None
        readers = [asyncio.ensure_future(_read_capped(s, cap)) for s in (proc.stdout, proc.stderr)]
        try:
            # Fed while it runs: code that never reads its stdin still ends at its time limit.
            feed = asyncio.ensure_future(self._feed(proc, req.stdin))
            timed_out = not await _exited(proc, req.run_timeout)
            elapsed = time.monotonic() - t0
            feed.cancel()
        finally:
            _kill(proc)
            await _exited(proc, None)
            if uid is not None and "settle" not in off:
                # The kernel ends a PID namespace's processes after its first one, not with it: the slot's user
                # is free for the next request once none runs as it (RLIMIT_NPROC counts them all).
                await _settle(uid, proc.pid)
            self.live.discard(proc)
            done, pending = await asyncio.wait(readers, timeout=DRAIN_S)
            for r in pending:
                r.cancel()
            with os.fdopen(status_r, "rb") as f:
                os.set_blocking(f.fileno(), False)
                raw = f.read() or b""
        (out, out_n), (err, err_n) = [r.result() if r in done else (b"", 0) for r in readers]
        code = _exit_code(raw)
        if code is None and not timed_out:
            # bwrap failed before the code ran (it reports no exit code then): its own message is on stderr.
            return Outcome(error="the sandbox could not start: " + err.decode(errors="replace").strip()[-300:])
        cap_n = caps.output_bytes
        run = RunResult(
            status="Finished",
            execution_time=round(elapsed, 4),
            return_code=code,
            stdout=_text(out, out_n, cap_n),
            stderr=_text(err, err_n, cap_n),
        )
        if timed_out or run.return_code == SIGXCPU_EXIT:
            run.status, run.return_code = "TimeLimitExceeded", None
        return Outcome(run=run)

    @staticmethod
    async def _feed(proc: asyncio.subprocess.Process, stdin: str | None) -> None:
        assert proc.stdin is not None
        try:
            if stdin:
                proc.stdin.write(stdin.encode())
                await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the code exited or closed its stdin without reading it all
        finally:
            proc.stdin.close()

    def kill_all(self) -> None:
        for proc in list(self.live):
            _kill(proc)


def _state(pid: int) -> tuple[bytes, int]:
    """(state letter, parent pid) of ``pid`` from /proc; (b"", 0) once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state, ppid = f.read().rsplit(b")", 1)[1].split()[:2]
        return state, int(ppid)
    except (OSError, ValueError):
        return b"", 0


def _processes_of(uid: int):
    """(pid, state letter, parent pid) of every process of ``uid``, zombies included (a /proc/<pid> directory
    belongs to its process's user)."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid != uid:
                    continue
            except OSError:
                continue  # exited meanwhile
            state, ppid = _state(int(entry.name))
            if state:
                yield int(entry.name), state, ppid


def running_as(uid: int) -> list[int]:
    """The pids of every process of ``uid`` that still runs (a zombie runs nothing)."""
    return [pid for pid, state, _ in _processes_of(uid) if state != b"Z"]


async def _settle(uid: int, own: int, timeout: float = SETTLE_S) -> None:
    """Until no process of ``uid`` runs, each killed again, and every orphan of the jail handed to this process
    reaped (``own``, the bwrap asyncio started, is asyncio's to reap); at most ``timeout`` (a process stuck in
    the kernel)."""
    me, deadline = os.getpid(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        pending = False
        for pid, state, ppid in _processes_of(uid):
            if state != b"Z":
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                pending = True
            elif ppid == me and pid != own:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                pending = True
            # else: another's zombie holds nothing but its pid; its parent reaps it
        if not pending:
            return
        await asyncio.sleep(0.002)


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


async def _exited(proc: asyncio.subprocess.Process, timeout: float | None) -> bool:
    """Whether bwrap ended within ``timeout``. Not ``proc.wait()``: Python 3.11's returns only once every
    pipe is closed too, and a process that escaped the jail (a drill without the PID namespace) may hold
    them for ever. A pidfd is readable the moment the process exits."""
    if proc.returncode is not None:
        return True  # reaped already: its pid may be another process's by now
    loop = asyncio.get_running_loop()
    try:
        fd = os.pidfd_open(proc.pid)
    except ProcessLookupError:
        fd = None  # already reaped
    if fd is not None:
        ended = asyncio.Event()
        loop.add_reader(fd, ended.set)
        try:
            await asyncio.wait_for(ended.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        finally:
            loop.remove_reader(fd)
            os.close(fd)
    while proc.returncode is None:  # asyncio's child watcher reaps it a moment later
        await asyncio.sleep(0.002)
    return True


def _kill(proc: asyncio.subprocess.Process) -> None:
    """bwrap's group: its PID namespace's first process dies with it (--die-with-parent), and the kernel
    then kills every process left in the namespace."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError:
            # bwrap runs as the slot's user: killing it takes root's CAP_KILL, which a container may lack.
            raise PermissionError(
                "the sandbox cannot end an execution: killing its slot's user's processes needs CAP_KILL"
            ) from None
