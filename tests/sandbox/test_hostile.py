"""The attacks policy-written code would make, each sent through the HTTP API of a running
`npu-rl sandbox serve`: contained there, and let through by a server whose jail lacks the mechanism that
contains it (``drill``), which shows each test can fail. After them all, the service still answers a healthy
request and none of their processes is left."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from conftest import CANARY, sandbox_processes, wait_no_sandbox_processes
from sandbox_attacks import (
    ALLOC,
    CONNECT,
    ELSEWHERE,
    ENVIRONS,
    ESCAPE,
    FILL,
    FORKS,
    KEYRING,
    LEAVE,
    LOOK,
    MEMFD,
    PRINT,
    read_code,
)

pytestmark = [pytest.mark.slow, pytest.mark.setup, pytest.mark.timeout(300)]
UID_BASE = 61000  # this module's slot users (tests/sandbox/conftest.py)


def test_the_files_of_a_run_beside_it_are_not_there(server, drill, beside_a_run):
    paths = [str(beside_a_run / "ray/auth_token"), str(beside_a_run / "checkpoints/global_step_1/model.pt")]
    out = server.run(read_code(paths))["run_result"]["stdout"]
    assert "SECRET" not in out and out.count("DENIED") == 2, out
    leaked = drill("mounts").run(read_code(paths))["run_result"]["stdout"]
    assert leaked.count("SECRET") == 2, leaked


def test_the_servers_environment_is_out_of_reach(server, drill):
    code = read_code([f"/proc/{server.proc.pid}/environ"]).replace("open(path).read()", "len(open(path).read())")
    out = server.run(code)["run_result"]["stdout"]
    assert "DENIED" in out and "FileNotFoundError" in out, out  # not even there: its own PID namespace
    # The PID namespace, the slot's own user and the user namespace each stand in the way alone.
    bare = drill("pid", "user", "userns")
    leaked = bare.run(code.replace(str(server.proc.pid), str(bare.proc.pid)))["run_result"]["stdout"]
    assert leaked.startswith("READ"), leaked


def test_no_process_of_the_jail_carries_the_servers_environment(server, drill):
    # bwrap's first process stays in the jail as its pid 1: what it was started with is there to read.
    out = server.run(ENVIRONS)["run_result"]["stdout"]
    assert out.startswith("SEEN") and CANARY[1] not in out, out[:2000]
    assert CANARY[1] in drill("env").run(ENVIRONS)["run_result"]["stdout"]


@pytest.fixture
def host_port():
    """A TCP port on the host's 127.0.0.1 (Ray's GCS, the sandbox's own API): what reached it."""
    sock = socket.create_server(("127.0.0.1", 0))
    got: list[bytes] = []

    def accept():
        sock.settimeout(30)
        try:
            conn, _ = sock.accept()
            got.append(conn.recv(100))
            conn.close()
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    yield sock.getsockname()[1], got
    sock.close()


def test_no_network_not_the_hosts_loopback_nor_dns(server, drill, host_port):
    port, got = host_port
    out = server.run(CONNECT.format(port=port))["run_result"]["stdout"]
    assert "REFUSED" in out and "UNRESOLVED" in out, out
    assert got == []
    out = drill("net").run(CONNECT.format(port=port))["run_result"]["stdout"]
    assert "CONNECTED" in out, out
    time.sleep(0.5)
    assert got == [b"hello from the sandbox"]
    # A name resolves only with the network and the host's /etc/resolv.conf both let in.
    out = drill("net", "mounts").run(CONNECT.format(port=port))["run_result"]["stdout"]
    assert "RESOLVED" in out, out


def test_a_fork_bomb_ends_at_the_process_limit(server, drill):
    bomb = server.run(":(){ :|:& };:", "bash", run_timeout=3)
    assert bomb["run_result"]["status"] in ("Finished", "TimeLimitExceeded"), bomb
    assert wait_no_sandbox_processes(UID_BASE) == []
    counted = server.run(FORKS.format(n=300), run_timeout=5)["run_result"]["stdout"]
    assert int(counted.split()[-1]) < 64, counted  # --max-procs 64 counts the jail's own processes too
    unlimited = drill("rlimits").run(FORKS.format(n=300), run_timeout=5)["run_result"]["stdout"]
    assert int(unlimited.split()[-1]) == 300, unlimited


def test_memory_past_the_requests_limit_is_refused(server, drill):
    out = server.run(ALLOC.format(mb=256), memory_limit_MB=128)["run_result"]["stdout"]
    assert out.strip() == "REFUSED", out
    assert server.run(ALLOC.format(mb=32), memory_limit_MB=128)["run_result"]["stdout"].strip() == "ALLOCATED 32"
    out = drill("rlimits").run(ALLOC.format(mb=256), memory_limit_MB=128)["run_result"]["stdout"]
    assert out.strip() == "ALLOCATED 256", out


def test_memory_held_in_memfds_past_the_limit_is_refused(server, drill):
    # Pages written to a memfd are never mapped: RLIMIT_AS does not see them, the seccomp filter refuses it.
    out = server.run(MEMFD, memory_limit_MB=128)["run_result"]["stdout"]
    assert out.strip() == "REFUSED 1", out  # EPERM
    out = drill("seccomp").run(MEMFD, memory_limit_MB=128)["run_result"]["stdout"]
    assert out.strip() == "HELD 192", out


def test_the_kernel_keyrings_are_out_of_reach(server, drill):
    assert server.run(KEYRING)["run_result"]["stdout"].strip() == "KEYRING -1"  # EPERM
    out = drill("seccomp", "keyring").run(KEYRING)["run_result"]["stdout"]
    assert int(out.split()[-1]) > 0, out


def test_a_setsid_child_dies_with_its_execution(server, drill):
    answer = server.run(ESCAPE, run_timeout=2)
    assert answer["run_result"]["status"] == "TimeLimitExceeded", answer
    # Gone by the time the answer came: the slot waited for its user's last process (the namespace's
    # teardown outlives its first process), so its next request starts with none.
    assert sandbox_processes(UID_BASE) == []
    # That wait kills what runs as the slot's user even where no PID namespace held it...
    answer = drill("pid").run(ESCAPE, run_timeout=2)
    assert answer["run_result"]["status"] == "TimeLimitExceeded", answer
    assert sandbox_processes(UID_BASE) == []
    # ...and without both, the double-forked sleeper outlives the execution.
    answer = drill("pid", "settle").run(ESCAPE, run_timeout=2)
    assert answer["run_result"]["status"] == "TimeLimitExceeded", answer
    time.sleep(1)
    escaped = sandbox_processes(UID_BASE)
    for p in escaped:
        p.kill()
    # Without the PID namespace the double-forked sleeper outlives the kill (the busy child meets its
    # CPU-time limit a moment later).
    assert len(escaped) >= 1, escaped


def test_a_100_mb_print_is_cut_and_marked(server, drill):
    run = server.run(PRINT)["run_result"]
    assert run["status"] == "Finished" and run["return_code"] == 0, run["stderr"]
    assert len(run["stdout"]) < (1 << 20) + 200
    assert run["stdout"].endswith(f"[npu-rl sandbox: output cut at {1 << 20} of {100 << 20} bytes]")
    assert run["stderr"] == "END\n"
    whole = drill("output").run(PRINT)["run_result"]["stdout"]
    assert len(whole) == 100 << 20


def test_filling_the_disk_stops_at_the_working_directorys_size(server, drill, shared_dir):
    out = server.run(FILL.format(files=32))["run_result"]["stdout"]
    assert "STOPPED OSError 28" in out and int(out.split()[-1]) <= 64, out  # ENOSPC at --disk-mb 64
    shm = server.run(FILL.format(files=32).replace('f"fill', 'f"/dev/shm/fill'))["run_result"]["stdout"]
    assert "STOPPED OSError 28" in shm and int(shm.split()[-1]) <= 64, shm
    # Everything else is read-only: bwrap's own root and /dev are tmpfs of half the host's memory otherwise.
    out = server.run(ELSEWHERE)["run_result"]["stdout"]
    assert "WROTE" not in out and out.count("REFUSED") == 4, out
    assert "WROTE /x" in drill("readonly").run(ELSEWHERE)["run_result"]["stdout"]
    out = drill("tmpfs", shared_dir=shared_dir).run(FILL.format(files=12))["run_result"]["stdout"]
    assert "STOPPED" not in out and int(out.split()[-1]) == 96, out  # past the 64 MiB it would have had


def test_no_run_sees_a_file_another_left(server, drill, shared_dir):
    assert server.run(LEAVE)["run_result"]["return_code"] == 0
    assert server.run(LOOK)["run_result"]["stdout"].strip() == "False False ['main.py']"
    bare = drill("tmpfs", shared_dir=shared_dir)
    assert bare.run(LEAVE)["run_result"]["return_code"] == 0
    assert bare.run(LOOK)["run_result"]["stdout"].startswith("True True")


def test_kill_minus_one_reaches_only_its_own_processes(server):
    """No drill: without the PID namespace and the slot's user, `kill -9 -1` as root would end this machine's
    every process, the test's own included."""
    sleeper: dict = {}
    neighbour = threading.Thread(target=lambda: sleeper.update(server.run("import time; time.sleep(3); print('ok')")))
    neighbour.start()
    time.sleep(1)
    # kill(-1) spares its caller: the shell goes on, every other process of its own jail is gone.
    killer = server.run('sleep 60 & kill -9 -1; wait $!; echo "survived, the sleep ended by $(kill -l $?)"', "bash")
    assert killer["run_result"]["stdout"] == "survived, the sleep ended by KILL\n", killer
    neighbour.join(timeout=30)
    assert sleeper["run_result"]["stdout"] == "ok\n", sleeper
    assert server.proc.poll() is None


def test_after_every_attack_the_service_answers_and_nothing_is_left(server):
    answer = server.run("import sympy\nprint(sympy.factorint(2**16 - 1))")
    assert answer["status"] == "Success" and answer["run_result"]["stdout"] == "{3: 1, 5: 1, 17: 1, 257: 1}\n"
    assert wait_no_sandbox_processes(UID_BASE) == []
    health = server.health()
    assert health["running"] == 0 and health["queue_depth"] == 0 and health["runs"] >= 10, health
