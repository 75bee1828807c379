"""The sandbox's command line and seccomp filter, checked without running them."""

from __future__ import annotations

import struct
from pathlib import Path

from tools.sandbox import SandboxLimits, bwrap_command, limited_shell
from tools.sandbox_seccomp import seccomp_program


def positions(argv: list[str], *wanted: str) -> list[int]:
    return [argv.index(item) for item in wanted]


def test_mounts_come_in_an_order_where_nothing_hides_what_came_before(tmp_path: Path) -> None:
    extra = str(tmp_path / "toolchain")
    argv = bwrap_command("bwrap", tmp_path / "ws", ["true"], extra_ro=[extra])
    tmp, bind_extra, mask = positions(argv, "/tmp", extra, "/etc/shadow")
    assert tmp < bind_extra < mask
    assert argv[tmp - 1] == "--tmpfs" and argv[tmp - 3] == "--size"
    assert argv[argv.index("--uid") + 1] != "0" and "--unshare-user" in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv.index("--bind") > mask  # the workspace last, then only the remount


def test_old_bubblewrap_gets_no_options_it_lacks(tmp_path: Path) -> None:
    argv = bwrap_command("bwrap", tmp_path, ["true"], disable_userns=False, tmpfs_size=False)
    assert "--size" not in argv and "--disable-userns" not in argv
    assert "--tmpfs" in argv and "--cap-drop" in argv


def test_limits_are_set_in_the_shell_before_the_command() -> None:
    limits = SandboxLimits(max_processes=40, memory_bytes=64 << 20, file_size_bytes=8 << 20)
    argv = limited_shell("echo hi", limits, count_processes=True)
    assert argv[:2] == ["bash", "-c"] and argv[-1] == "echo hi"
    assert "ulimit -d 65536 -f 8192 -u 40" in argv[2]
    assert "-u" not in limited_shell("echo hi", limits, count_processes=False)[2]


def test_the_seccomp_filter_is_whole_instructions_ending_in_a_return() -> None:
    for machine in ("x86_64", "aarch64"):
        program = seccomp_program(machine)
        assert program is not None and len(program) % 8 == 0
        code, _, _, k = struct.unpack("=HBBI", program[-8:])
        assert code == 0x06 and k == 0x00050000 | 1  # the shared deny: EPERM
    assert seccomp_program("sparc64") is None
