"""A small seccomp filter for the bash sandbox: refuse the system calls that reach into other
processes or into kernel state no namespace isolates.

Owns: `seccomp_program` (the raw classic-BPF bytes bubblewrap's `--seccomp FD` loads).

Why these calls: with every capability dropped, the namespaces already refuse mounts, device
nodes and raw sockets; but a process may still `ptrace` (or read and write the memory of) any
process of the same user it can see, and no kernel here restricts that further (Yama is often
absent). The kernel keyring and perf events are not namespaced at all. Refused calls fail with
EPERM; everything else is allowed. A system call made through a foreign ABI the filter does not
know kills the process rather than slipping past the table.

Must not: import anything of ours.
"""

from __future__ import annotations

import errno
import platform
import struct

# Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
_OFFSET_NR = 0
_OFFSET_ARCH = 4
_X32_SYSCALL_BIT = 0x40000000

_AUDIT_ARCH_X86_64 = 0xC000003E
_AUDIT_ARCH_I386 = 0x40000003
_AUDIT_ARCH_AARCH64 = 0xC00000B7

# ptrace, process_vm_readv, process_vm_writev, add_key, request_key, keyctl, perf_event_open.
_REFUSED: dict[int, tuple[int, ...]] = {
    _AUDIT_ARCH_X86_64: (101, 310, 311, 248, 249, 250, 298),
    _AUDIT_ARCH_I386: (26, 347, 348, 286, 287, 288, 336),
    _AUDIT_ARCH_AARCH64: (117, 270, 271, 217, 218, 219, 241),
}
# The ABIs a process on each machine can use.
_ARCHES_BY_MACHINE = {
    "x86_64": (_AUDIT_ARCH_X86_64, _AUDIT_ARCH_I386),
    "aarch64": (_AUDIT_ARCH_AARCH64,),
}


def seccomp_program(machine: str | None = None) -> bytes | None:
    """The filter for this machine's architecture, or None where the table does not know it
    (the sandbox then runs without it; the namespaces and dropped capabilities still hold)."""
    arches = _ARCHES_BY_MACHINE.get(machine or platform.machine())
    if arches is None:
        return None
    # Instructions as (code, jump-if-true target, jump-if-false target, k); targets are labels
    # ("deny", "next-arch", or None for the next instruction), resolved to offsets below.
    program: list[tuple[int, str | None, str | None, int]] = []
    for index, arch in enumerate(arches):
        next_arch = f"arch-{index + 1}"
        program.append((_LD_W_ABS, None, None, _OFFSET_ARCH))
        program.append((_JEQ_K, None, next_arch, arch))
        program.append((_LD_W_ABS, None, None, _OFFSET_NR))
        if arch == _AUDIT_ARCH_X86_64:
            program.append((_JGE_K, "deny", None, _X32_SYSCALL_BIT))
        for number in _REFUSED[arch]:
            program.append((_JEQ_K, "deny", None, number))
        program.append((_RET_K, None, None, _RET_ALLOW))
        program.append((-1, None, None, index + 1))  # the label arch-{index + 1}
    program.append((_RET_K, None, None, _RET_KILL_PROCESS))
    program.append((-2, None, None, 0))  # the label deny
    program.append((_RET_K, None, None, _RET_ERRNO | errno.EPERM))
    return _assemble(program)


def _assemble(program: list[tuple[int, str | None, str | None, int]]) -> bytes:
    labels: dict[str, int] = {}
    real: list[tuple[int, str | None, str | None, int]] = []
    for code, if_true, if_false, k in program:
        if code == -1:
            labels[f"arch-{k}"] = len(real)
        elif code == -2:
            labels["deny"] = len(real)
        else:
            real.append((code, if_true, if_false, k))
    out = bytearray()
    for position, (code, if_true, if_false, k) in enumerate(real):
        jt = labels[if_true] - position - 1 if if_true else 0
        jf = labels[if_false] - position - 1 if if_false else 0
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise ValueError("seccomp jump out of range")
        out += struct.pack("=HBBI", code, jt, jf, k)
    return bytes(out)
