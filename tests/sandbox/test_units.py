"""The sandbox's parts that need no jail: SandboxFusion's request checked against the caps, the verdict,
the jail's command line, and what the service needs from the CPU lock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from npu_rl.envs import locks
from npu_rl.envs.locks import project_requirements
from npu_rl.sandbox import jail as jails
from npu_rl.sandbox import seccomp
from npu_rl.sandbox.request import Caps, RequestError, RunCodeResponse, RunResult, parse

CAPS = Caps()


def test_verls_request_parses_as_sent():
    req = parse(
        {
            "compile_timeout": 10,
            "run_timeout": 10,
            "code": "print(1)",
            "stdin": None,
            "memory_limit_MB": 1024,
            "language": "python",
            "files": {},
            "fetch_files": [],
        },
        CAPS,
    )
    assert (req.run_timeout, req.memory_limit_MB, req.stdin) == (10, 1024, None)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_timeout_outside_the_caps_is_refused_in_one_line(value):
    body = {"code": "1", "run_timeout": value}
    if value == value and 0 < value <= CAPS.max_run_timeout:
        assert parse(body, CAPS).run_timeout == value
    else:
        with pytest.raises(RequestError) as e:
            parse(body, CAPS)
        assert e.value.status == 400 and "\n" not in str(e.value)


def test_the_verdict_is_sandboxfusions():
    assert RunCodeResponse.of(RunResult(status="Finished", return_code=0)).status == "Success"
    assert RunCodeResponse.of(RunResult(status="Finished", return_code=1)).status == "Failed"
    assert RunCodeResponse.of(RunResult(status="TimeLimitExceeded")).status == "Failed"


def _argv(off=frozenset()):
    jail = jails.Jail(bwrap="/usr/bin/bwrap", python="/opt/sb/bin/python", python_roots=("/opt/sb",), off=off)
    return jails.argv(
        jail, jails.command(jail, "python", "main.py"), code_fd=3, code_name="main.py", status_fd=4, disk_mb=64
    )


def test_the_jail_unshares_everything_and_binds_no_host_path_but_the_interpreters():
    argv = _argv()
    for flag in (
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--disable-userns",
    ):
        assert flag in argv, flag
    binds = [argv[i + 1] for i, a in enumerate(argv) if a in ("--bind", "--ro-bind", "--ro-bind-try")]
    assert "--bind" not in argv  # nothing of the host is writable
    assert set(binds) <= {*jails.SYSTEM_DIRS, *jails.SYSTEM_FILES, "/opt/sb"}, binds
    assert argv[argv.index("--") + 1 :] == ["/opt/sb/bin/python", "-I", "/sandbox/main.py"]


def test_a_drill_takes_out_only_its_mechanism():
    assert "--unshare-net" not in _argv(frozenset({"net"})) and "--unshare-pid" in _argv(frozenset({"net"}))
    assert set(_argv()) - set(_argv(frozenset({"pid"}))) == {"--unshare-pid"}


def test_the_service_needs_only_what_the_cpu_lock_pins():
    names = {r.split(">")[0].split("=")[0].split("[")[0].strip().lower() for r in project_requirements("sandbox")}
    text = locks.get("cpu").path.read_text(encoding="utf-8")
    assert names and all(f"\n{n}==" in text for n in names), names


@pytest.mark.parametrize("machine", sorted(seccomp.ARCHES))
def test_the_seccomp_filter_checks_the_abi_and_lists_every_denied_call(machine):
    prog = seccomp.program(machine)
    ops = [prog[i : i + 8] for i in range(0, len(prog), 8)]
    arch, numbers = seccomp.ARCHES[machine]
    assert set(numbers) == set(seccomp.DENIED)
    # First the ABI (a syscall of another one is killed), last ALLOW then EPERM.
    assert ops[1][4:] == arch.to_bytes(4, "little") and ops[-2][4:] == seccomp.RET_ALLOW.to_bytes(4, "little")
    assert ops[-1][4:] == (seccomp.RET_ERRNO | seccomp.EPERM).to_bytes(4, "little")
    jumps = [o for o in ops if o[0] == seccomp.JEQ_K and o[4:] != arch.to_bytes(4, "little")]
    assert sorted(int.from_bytes(o[4:], "little") for o in jumps) == sorted(numbers.values())
    # Every comparison lands on the EPERM return.
    assert all(ops.index(o) + 1 + o[2] == len(ops) - 1 for o in jumps)


def test_a_refusal_in_a_container_says_what_lifts_it():
    from npu_rl.sandbox.probe import hint

    # bwrap's own line under podman's default /proc masking (seen here: podman run without unmask=ALL).
    masked = hint("the sandbox could not start: bwrap: Can't mount proc on /newroot/proc: Operation not permitted")
    assert "unmask=ALL" in masked and "systempaths=unconfined" in masked and "procMount" in masked
    assert hint("bwrap: No permissions to creating new namespace").endswith("seccomp=unconfined))")
    assert hint("something else") == "something else"
