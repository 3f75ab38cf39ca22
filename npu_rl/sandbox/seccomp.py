"""The seccomp filter every jail's code runs under: a classic BPF program for bwrap's ``--seccomp FD``.

Denied with EPERM, because the namespaces and limits leave them open:
- ``memfd_create``: memory written to a memfd is never mapped, so RLIMIT_AS does not count it;
- ``keyctl``, ``add_key``, ``request_key``: the kernel's keyrings are not namespaced;
- ``ptrace``, ``process_vm_readv/writev``: no process may inspect another, even its own jail's;
- ``userfaultfd``, ``perf_event_open``, ``bpf``, ``io_uring_*``: kernel surface that code under test never
  needs and that has carried privilege-escalation bugs.

A syscall of another ABI than the machine's own (i386 on x86-64, x32) kills the process: their numbers differ,
and this list would not match them.
"""

from __future__ import annotations

import platform
import struct

# Classic BPF opcodes (linux/filter.h) and seccomp's return values (linux/seccomp.h).
LD_W_ABS = 0x20
JEQ_K = 0x15
JSET_K = 0x45
RET_K = 0x06
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
RET_KILL_PROCESS = 0x80000000
EPERM = 1
X32_BIT = 0x40000000
# seccomp_data: int nr at offset 0, __u32 arch at 4.
NR, ARCH = 0, 4

DENIED = (
    "memfd_create",
    "keyctl",
    "add_key",
    "request_key",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "userfaultfd",
    "perf_event_open",
    "bpf",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
)
# Per architecture: AUDIT_ARCH_* and the syscall numbers (x86-64: arch/x86/entry/syscalls/syscall_64.tbl;
# aarch64, Atlas's Kunpeng hosts: include/uapi/asm-generic/unistd.h).
ARCHES = {
    "x86_64": (
        0xC000003E,
        {
            "memfd_create": 319, "keyctl": 250, "add_key": 248, "request_key": 249, "ptrace": 101,
            "process_vm_readv": 310, "process_vm_writev": 311, "userfaultfd": 323, "perf_event_open": 298,
            "bpf": 321, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "memfd_create": 279, "keyctl": 219, "add_key": 217, "request_key": 218, "ptrace": 117,
            "process_vm_readv": 270, "process_vm_writev": 271, "userfaultfd": 282, "perf_event_open": 241,
            "bpf": 280, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        },
    ),
}  # fmt: skip


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes:
    """The filter for ``machine`` (this one's by default); KeyError where there is no table for it."""
    arch, numbers = ARCHES[machine or platform.machine()]
    nrs = [numbers[name] for name in DENIED]
    ops = [_op(LD_W_ABS, ARCH), _op(JEQ_K, arch, jt=1), _op(RET_K, RET_KILL_PROCESS), _op(LD_W_ABS, NR)]
    if arch == ARCHES["x86_64"][0]:
        ops += [_op(JSET_K, X32_BIT, jt=0, jf=1), _op(RET_K, RET_KILL_PROCESS)]
    # Each denied number jumps to the EPERM return after the last comparison and the ALLOW.
    for i, nr in enumerate(nrs):
        ops.append(_op(JEQ_K, nr, jt=len(nrs) - i))
    ops += [_op(RET_K, RET_ALLOW), _op(RET_K, RET_ERRNO | EPERM)]
    return b"".join(ops)
