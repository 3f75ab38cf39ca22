"""The bubblewrap command of one execution, and whether this host can run it.

bubblewrap (Debian's ``bubblewrap``; the tool chosen and why: docs/sandbox.md) builds each execution a root
of its own from nothing: the interpreter's directories bound read-only, a fresh ``/proc`` of a new PID
namespace, a minimal ``/dev``, and size-limited tmpfs for the working directory and ``/tmp``. It unshares
the user, PID, network, IPC, UTS and cgroup namespaces, so the code has no network (not even the host's
127.0.0.1) and sees no process but its own; ``--die-with-parent`` and the PID namespace take the whole
process tree down with it, whatever it ``setsid``-ed or double-forked. The process starts as a host user of
its slot's own (``uid_base + slot``), so RLIMIT_NPROC bounds that execution's processes only and
``kill -9 -1`` reaches nothing else.

Each mechanism has a name (``MECHANISMS``): a test switches one off (``off=``, never from the command line
or the HTTP API) to see its attack get through, which shows the test can fail.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field

# The names of what a drill may switch off (tests only): see ``argv`` and ``execute``.
MECHANISMS = frozenset(
    {
        "mounts",
        "readonly",
        "net",
        "pid",
        "user",
        "userns",
        "rlimits",
        "tmpfs",
        "env",
        "output",
        "seccomp",
        "keyring",
        "settle",
    }
)
# The device nodes the code gets (no ptmx: the host's ptys are one pool), bound from the host's.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")

WORKDIR = "/sandbox"
# Directories of the host's own system that the interpreter and bash need, read-only. /etc is left out
# (passwd, hosts, resolv.conf, the service account), but for the loader's cache.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
SYSTEM_FILES = ("/etc/ld.so.cache",)
ENV_PATH = "/usr/local/bin:/usr/bin:/bin"


class JailUnavailable(RuntimeError):
    """This host cannot make the jail: the one line saying what is missing."""


@dataclass(frozen=True)
class Jail:
    bwrap: str
    python: str
    # The interpreter's own trees (a venv and the Python it was made from), bound read-only where they are.
    python_roots: tuple[str, ...]
    uid_base: int = 61000
    shared_dir: str | None = None  # the drill of ``tmpfs`` off: one host directory every run writes to
    off: frozenset[str] = field(default_factory=frozenset)

    def uid(self, slot: int) -> int:
        return self.uid_base + slot


def interpreter_roots(python: str) -> tuple[str, ...]:
    """The directories ``python`` needs: its prefix and base prefix, when outside the system directories."""
    import subprocess

    out = subprocess.run(
        [python, "-I", "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0:
        raise JailUnavailable(f"the sandbox's Python {python} does not start: {out.stderr.strip()[-200:]}")
    roots = []
    for line in out.stdout.split():
        path = os.path.realpath(line)
        if not any(path == d or path.startswith(d + "/") for d in SYSTEM_DIRS) and path not in roots:
            roots.append(path)
    # A venv's bin/python is a link to its base's interpreter, wherever that is.
    real = os.path.dirname(os.path.dirname(os.path.realpath(python)))
    if not any(real == r or real.startswith(r + "/") for r in roots + list(SYSTEM_DIRS)):
        roots.append(real)
    return tuple(roots)


def make(python: str | None = None, uid_base: int = 61000) -> Jail:
    """The jail of this host, or JailUnavailable saying why there is none (checked by ``probe``)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise JailUnavailable("bubblewrap is not installed (Debian: apt-get install bubblewrap)")
    if os.geteuid() != 0:
        raise JailUnavailable(
            "it gives each execution a host user of its own (RLIMIT_NPROC counts per user) and needs root "
            "for that: run it as root, as its container does"
        )
    python = python or sys.executable
    return Jail(bwrap=bwrap, python=python, python_roots=interpreter_roots(python), uid_base=uid_base)


def workdir(jail: Jail) -> str:
    # With ``mounts`` off the root is the host's, read-only, where only /tmp can take the jail's tmpfs.
    return "/tmp" if "mounts" in jail.off else WORKDIR


def _system_binds(jail: Jail) -> list[str]:
    args: list[str] = []
    if "mounts" in jail.off:
        return ["--ro-bind", "/", "/"]
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for f in SYSTEM_FILES:
        args += ["--ro-bind-try", f, f]
    return args


def argv(
    jail: Jail,
    command: list[str],
    *,
    code_fd: int,
    code_name: str,
    status_fd: int,
    disk_mb: int,
    seccomp_fd: int | None = None,
) -> list[str]:
    """bwrap's command line: ``command`` run in ``WORKDIR``, the code read from ``code_fd`` into
    ``WORKDIR/code_name``, bwrap's JSON status (the child's pid, its exit code) on ``status_fd``, the seccomp
    filter (npu_rl.sandbox.seccomp) read from ``seccomp_fd``."""
    off = jail.off
    args = [jail.bwrap, "--die-with-parent", "--new-session", "--json-status-fd", str(status_fd)]
    if "userns" not in off:  # only bwrap run as root (``user`` off too) may go without
        args += ["--unshare-user", "--disable-userns"]
    args += ["--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if "pid" not in off:
        args += ["--unshare-pid"]
    if "net" not in off:
        args += ["--unshare-net"]
    if "userns" not in off:
        args += ["--uid", "65534", "--gid", "65534"]
    args += ["--hostname", "sandbox"]
    args += _system_binds(jail)
    # A procfs of the jail's PID namespace: its own processes only (of the host's, with ``pid`` off).
    args += ["--proc", "/proc"]
    size, work = str(disk_mb << 20), workdir(jail)
    if "mounts" not in off:
        # A /dev of a few nodes and a sized /dev/shm: bwrap's own --dev is a tmpfs of half the host's memory.
        args += ["--size", str(1 << 20), "--tmpfs", "/dev"]
        for node in DEVICES:
            args += ["--dev-bind", node, node]
        for fd, name in enumerate(("stdin", "stdout", "stderr")):
            args += ["--symlink", f"/proc/self/fd/{fd}", f"/dev/{name}"]
        args += ["--symlink", "/proc/self/fd", "/dev/fd"]
        args += ["--tmpfs", "/dev/shm"] if "readonly" in off else ["--size", size, "--tmpfs", "/dev/shm"]
    if "tmpfs" in off and jail.shared_dir:
        args += ["--bind", jail.shared_dir, work, "--bind", jail.shared_dir, "/tmp"]
    else:
        args += ["--size", size, "--tmpfs", work]
        if work != "/tmp":
            args += ["--size", size, "--tmpfs", "/tmp"]
    # The interpreter's directories after the jail's own tmpfs: one under /tmp (a checkout there, CI's clone)
    # stays visible, read-only, over the /tmp the code gets.
    for root in jail.python_roots:
        args += ["--ro-bind", root, root]
    args += ["--file", str(code_fd), f"{work}/{code_name}", "--chdir", work]
    if "readonly" not in off and "mounts" not in off:
        # The root bwrap built (its directories for the binds, its symlinks) and /dev are tmpfs of half the
        # host's memory: read-only, the working directory, /tmp and /dev/shm are all the code can write.
        args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    if seccomp_fd is not None and "seccomp" not in off:
        args += ["--seccomp", str(seccomp_fd)]
    if "env" not in off:
        path = ":".join([*(f"{r}/bin" for r in jail.python_roots[:1]), ENV_PATH])
        args += ["--clearenv", "--setenv", "PATH", path, "--setenv", "HOME", work, "--setenv", "TMPDIR", "/tmp"]
        args += ["--setenv", "LANG", "C.UTF-8", "--setenv", "OPENBLAS_NUM_THREADS", "1"]
        args += ["--setenv", "OMP_NUM_THREADS", "1", "--setenv", "PYTHONDONTWRITEBYTECODE", "1"]
    return [*args, "--", *command]


def command(jail: Jail, language: str, code_name: str) -> list[str]:
    script = f"{workdir(jail)}/{code_name}"
    if language == "python":
        # -I: no PYTHON* variables, no user site, the script's directory first on the path only.
        return [jail.python, "-I", script]
    return ["/bin/bash", script]
