"""Why a Ray node died, from what Ray itself wrote: ``ray start --block``'s report of the daemons that
exited, and the fatal line a daemon logs in its session's ``logs/<daemon>.out`` before it aborts.

Ray's C++ daemons log ``[date time C pid tid] (raylet) file.cc:N: message`` for a fatal check (the ``C``
level; ray 2.60 ``src/ray/util/logging.cc``); ``ray start --block`` prints "Some Ray subprocesses exited
unexpectedly:" and ``raylet [exit code=1]`` for each, then up to 200 lines of each dead daemon's log, then
kills the rest (ray 2.60 ``python/ray/scripts/scripts.py`` 79-131, 1305-1317). A daemon that dies during
start-up leaves ``ray start`` waiting 30 s for its socket (``services.wait_for_node``), so the log is read
while it waits.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from ..console.lines import read

DAEMON_LOGS = ("gcs_server*.out", "raylet*.out")
EXIT_REPORT = "Ray subprocesses exited unexpectedly"
DEFAULT_TEMP_DIR = "/tmp/ray"  # ray 2.60 ray/_common/utils.py get_default_ray_temp_dir, no RAY_TMPDIR/TMPDIR
_FATAL = re.compile(r"^\[(?P<when>\S+ \S+) C \d+ \d+\] \((?P<daemon>[\w ]+)\) \S+: (?P<message>.*)$")
# ray 2.60 prefixes its CLI lines with the time, level and source ("... ERR scripts.py:88 -- ").
_EXITED = re.compile(r"^(?:.* -- )?\s*(?P<daemon>[\w ]+?) \[exit code=(?P<code>-?\d+)\]")
_PORT = re.compile(r"\bport (?:is )?(\d{2,5})\b")


def temp_dir(argv: Sequence[str], environ: dict[str, str]) -> Path:
    for i, arg in enumerate(argv):
        if arg.startswith("--temp-dir="):
            return Path(arg.split("=", 1)[1])
        if arg == "--temp-dir" and i + 1 < len(argv):
            return Path(argv[i + 1])
    base = environ.get("RAY_TMPDIR") or environ.get("TMPDIR")
    return Path(base, "ray") if base else Path(DEFAULT_TEMP_DIR)


def port_option(argv: Sequence[str], port: int) -> str | None:
    """The ``ray start`` option that set ``port`` in ``argv`` (``--node-manager-port``), if one did."""
    for i, arg in enumerate(argv):
        if not arg.startswith("--") or "port" not in arg:
            continue
        flag, eq, value = arg.partition("=")
        if not eq and i + 1 < len(argv):
            value = argv[i + 1]
        if value == str(port):
            return flag
    return None


def fatal_line(temp: Path, since: float, argv: Sequence[str] = ()) -> str | None:
    """The first fatal line a daemon logged after ``since`` (epoch seconds), made one readable clause: which
    daemon, Ray's message cut to its first sentences, and the port's option. Raylets of several nodes on
    one host share a session directory (a worker takes its head's, whatever its --temp-dir says), so the
    files and lines are picked by time, not by name."""
    try:
        logs = [
            f for pattern in DAEMON_LOGS for f in temp.glob(f"session_2*/logs/{pattern}") if f.stat().st_mtime >= since
        ]
    except OSError:
        return None
    for log in logs:
        try:
            text = log.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            m = _FATAL.match(line)
            if m and _when(m.group("when")) >= since:
                return describe(m.group("daemon"), m.group("message"), argv)
    return None


def _when(stamp: str) -> float:
    try:
        return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()  # the host's local time, as Ray's
    except ValueError:
        return 0.0


def describe(daemon: str, message: str, argv: Sequence[str]) -> str:
    message = message.strip().removeprefix("Check failed:").strip()
    message = re.sub(r"^\w+_ ", "", message)  # the checked expression ("server_ ") before Ray's own text
    sentences = re.split(r"(?<=\.) ", message)
    port = _PORT.search(message)
    if not port:
        return f"Ray's {daemon} died: " + " ".join(sentences[:2]).rstrip(".")
    flag = port_option(argv, int(port.group(1)))
    where = f"set by {flag}" if flag else "chosen by Ray"
    text = f"{sentences[0].rstrip('.')} on port {port.group(1)} ({where}; another process holds it)"
    return f"Ray's {daemon} died: {text}"


def exited_daemons(output: Sequence[str]) -> list[str]:
    """``ray start``'s own report of the daemons that exited: "raylet (exit code -9)"."""
    found, reporting = [], False
    for raw in output:
        text = read(raw).text
        if EXIT_REPORT in text:
            reporting = True
            continue
        m = _EXITED.match(text) if reporting else None
        if m:
            found.append(f"{m.group('daemon').strip()} (exit code {m.group('code')})")
    return found
