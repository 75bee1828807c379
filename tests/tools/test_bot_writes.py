"""The bot's own writes (attachments, saved command output, backfilled files) go through
`write_file_in_workspace`: never through a symlink, parents made confined, atomic, bounded."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from core.tools import ToolError
from tools.workspace import (
    make_dirs_in_workspace,
    read_file_in_workspace,
    write_file_in_workspace,
)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "existing.txt").write_text("host file")
    return path


def _outside_state(outside: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(outside.rglob("*")) if p.is_file()}


def test_a_symlinked_attachments_dir_is_refused_and_nothing_is_written(
    workspace: Path, outside: Path
) -> None:
    (workspace / "attachments").symlink_to(outside)  # what `ln -s /host attachments` makes
    before = _outside_state(outside)
    with pytest.raises(ToolError, match="symbolic link") as caught:
        write_file_in_workspace(workspace, "attachments/report.pdf", b"%PDF-1.7")
    assert "attachments" in caught.value.message
    with pytest.raises(ToolError, match="symbolic link"):
        write_file_in_workspace(workspace, "attachments/existing.txt", b"overwrite")
    assert _outside_state(outside) == before
    assert sorted(p.name for p in outside.iterdir()) == ["existing.txt"]


def test_links_anywhere_in_the_path_are_refused_even_inside(workspace: Path, outside: Path) -> None:
    (workspace / "real").mkdir()
    (workspace / "inner").symlink_to("real")  # inside, but still a link: refused
    (workspace / "real" / "file_link").symlink_to(outside / "existing.txt")
    for path in ("inner/x.txt", "real/file_link", "inner/deeper/x.txt"):
        with pytest.raises(ToolError, match="symbolic link"):
            write_file_in_workspace(workspace, path, b"data")
    assert (outside / "existing.txt").read_text() == "host file"
    assert not (workspace / "real" / "x.txt").exists()
    assert not (workspace / "real" / "deeper").exists()


def test_writes_make_parents_replace_atomically_and_leave_no_temp(workspace: Path) -> None:
    written = write_file_in_workspace(workspace, ".teammate/bash-output/call-1.log", b"one")
    assert written == ".teammate/bash-output/call-1.log"
    assert (workspace / written).read_bytes() == b"one"
    write_file_in_workspace(workspace, written, b"two")
    assert (workspace / written).read_bytes() == b"two"
    assert os.listdir(workspace / ".teammate/bash-output") == ["call-1.log"]


def test_unique_keeps_existing_files(workspace: Path) -> None:
    first = write_file_in_workspace(workspace, "attachments/a.txt", b"1", unique=True)
    second = write_file_in_workspace(workspace, "attachments/a.txt", b"2", unique=True)
    third = write_file_in_workspace(workspace, "attachments/a.txt", b"3", unique=True)
    assert (first, second, third) == (
        "attachments/a.txt",
        "attachments/a-1.txt",
        "attachments/a-2.txt",
    )
    assert (workspace / "attachments/a.txt").read_bytes() == b"1"
    assert (workspace / "attachments/a-2.txt").read_bytes() == b"3"
    assert sorted(os.listdir(workspace / "attachments")) == ["a-1.txt", "a-2.txt", "a.txt"]


def test_size_and_path_shape_are_bounded(workspace: Path) -> None:
    with pytest.raises(ToolError, match="at most 10 bytes"):
        write_file_in_workspace(workspace, "a.txt", b"x" * 11, max_bytes=10)
    for bad in ("/etc/passwd", "../x", "a/../../x", "", "a\x00b"):
        with pytest.raises(ToolError):
            write_file_in_workspace(workspace, bad, b"x")
    assert list(workspace.iterdir()) == []


def test_read_and_make_dirs_refuse_links_too(workspace: Path, outside: Path) -> None:
    (workspace / "attachments").symlink_to(outside)
    with pytest.raises(ToolError, match="symbolic link"):
        read_file_in_workspace(workspace, "attachments/existing.txt", max_bytes=100)
    with pytest.raises(ToolError, match="symbolic link"):
        make_dirs_in_workspace(workspace, "attachments/new")
    assert not (outside / "new").exists()
    make_dirs_in_workspace(workspace, "saved/deep/er")
    assert (workspace / "saved/deep/er").is_dir()
    write_file_in_workspace(workspace, "saved/f.txt", b"hi")
    assert read_file_in_workspace(workspace, "saved/f.txt", max_bytes=100) == b"hi"
    with pytest.raises(ToolError, match="larger than"):
        read_file_in_workspace(workspace, "saved/f.txt", max_bytes=1)


def test_attachments_swapped_for_a_link_while_writing_never_land_outside(
    workspace: Path, outside: Path
) -> None:
    attachments = workspace / "attachments"
    parked = workspace / ".parked"
    attachments.mkdir()
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            try:
                time.sleep(0.0002)
                os.rename(attachments, parked)
                os.symlink(outside, attachments)
                time.sleep(0.0002)
                os.unlink(attachments)
                os.rename(parked, attachments)
            except OSError:
                if attachments.is_symlink():
                    attachments.unlink()
                if parked.exists() and not attachments.exists():
                    os.rename(parked, attachments)

    before = _outside_state(outside)
    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    try:
        for i in range(400):
            try:
                write_file_in_workspace(workspace, f"attachments/f{i}.txt", b"x", unique=True)
            except ToolError as exc:
                assert "symbolic link" in exc.message or "changing" in exc.message
    finally:
        stop.set()
        swapper.join()
    assert _outside_state(outside) == before
    assert sorted(p.name for p in outside.iterdir()) == ["existing.txt"]
