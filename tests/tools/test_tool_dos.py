"""Hostile inputs that used to freeze or exhaust the whole process: a catastrophic regex, a glob
bomb, a lost ripgrep exit status, a very deep tree, huge write/edit content, an image bomb.

No timings are asserted: the event loop's freedom is shown by a heartbeat that must keep
ticking while the hostile call runs, and the glob's cost by a step count."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image as PILImage

from core.tools import ToolError
from tests.tools.conftest import make_ctx, text_of
from tools.files import (
    MAX_EDIT_FILE_BYTES,
    MAX_WRITE_BYTES,
    EditParams,
    EditTool,
    FindParams,
    FindTool,
    ReadParams,
    ReadTool,
    WriteParams,
    WriteTool,
)
from tools.globs import compile_glob
from tools.grep import GrepParams, GrepTool, _File, _search_rg
from tools.workspace import MAX_WALK_DEPTH

HAVE_RG = shutil.which("rg") is not None


def _children() -> set[int]:
    found: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as handle:
            found.update(int(pid) for pid in handle.read().split())
    return found


async def test_a_catastrophic_regex_does_not_hold_the_event_loop(workspace: Path) -> None:
    (workspace / "bomb.txt").write_text("a" * 30 + "!\n")
    before = _children()
    tool = GrepTool(engine="python")
    search = asyncio.ensure_future(
        tool.execute("c", GrepParams(pattern="(a+)+b"), make_ctx(workspace))
    )
    ticks = 0
    while ticks < 20 and not search.done():
        await asyncio.sleep(0.01)  # a heartbeat: it only runs if the loop is free
        ticks += 1
    assert not search.done(), "the search finished before the heartbeat could tick"
    search.cancel()  # what the tool timeout does
    with pytest.raises(asyncio.CancelledError):
        await search
    assert ticks == 20
    assert _children() <= before, "the regex worker process was left running"


async def test_the_python_engine_has_its_own_deadline(workspace: Path) -> None:
    (workspace / "bomb.txt").write_text("a" * 40 + "!\n")
    tool = GrepTool(engine="python", python_timeout_s=0.3)
    with pytest.raises(ToolError, match="took too long"):
        await tool.execute("c", GrepParams(pattern="(a|aa)+b"), make_ctx(workspace))


def test_a_glob_bomb_costs_linear_steps() -> None:
    pattern = "*a" * 30 + "b"
    name = "a" * 5000
    matcher = compile_glob(pattern)
    assert matcher(name) is False
    assert matcher("x" + "a" * 40 + "b") is True
    # Generous: every character may visit every NFA state a few times.
    assert matcher.steps < (len(name) + 50) * (len(pattern) * 3 + 10)


async def test_find_survives_a_glob_bomb_on_long_names(workspace: Path) -> None:
    for i in range(20):
        (workspace / (f"{i:02d}" + "a" * 240)).write_text("x")
    params = FindParams(pattern="*a" * 40 + "b")
    result = await FindTool().execute("c", params, make_ctx(workspace))
    assert text_of(result).startswith("No files match")


@pytest.mark.skipif(not HAVE_RG, reason="rg not installed")
async def test_ripgrep_never_loses_a_lookaround_to_a_lost_exit_status(workspace: Path) -> None:
    """rg refuses lookarounds; that refusal used to be lost now and then (returncode 255 from
    "Unknown child process"), and the tool answered "No matches". Many rg runs, each of which
    must be recognised as a refusal, then a few whole tool calls."""
    (workspace / "a.txt").write_text("foo bar\n")
    rg = shutil.which("rg")
    assert rg is not None
    params = GrepParams(pattern="foo(?= bar)")
    refused = 0
    fd = os.open(workspace / "a.txt", os.O_RDONLY)
    try:
        for _ in range(200):
            refused += await _search_rg(rg, [_File(fd, "a.txt")], params, 10) is None
    finally:
        os.close(fd)
    assert refused == 200
    tool = GrepTool(engine="ripgrep")
    for _ in range(5):
        result = await tool.execute("c", params, make_ctx(workspace))
        assert text_of(result) == "a.txt:1: foo bar"


@pytest.fixture
def deep_cleanup(workspace: Path) -> Iterator[None]:
    """Remove a tree deeper than shutil.rmtree's recursion can (pytest's own clean-up)."""
    yield
    fds = [os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)]
    while True:
        try:
            fds.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
        except FileNotFoundError:
            break
    with contextlib.suppress(FileNotFoundError):
        os.unlink("deepest.txt", dir_fd=fds[-1])
    while len(fds) > 1:
        os.close(fds.pop())
        os.rmdir("d", dir_fd=fds[-1])
    os.close(fds[0])


def _deep_tree(workspace: Path, levels: int) -> None:
    """`levels` nested directories 'd', a file in the deepest; made with descriptors because
    the path is longer than PATH_MAX."""
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        leaf = os.open("deepest.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf, b"needle deep\n")
        os.close(leaf)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "engine",
    [
        "python",
        pytest.param("ripgrep", marks=pytest.mark.skipif(not HAVE_RG, reason="rg not installed")),
    ],
)
@pytest.mark.usefixtures("deep_cleanup")
async def test_a_very_deep_tree_does_not_break_find_or_grep(workspace: Path, engine: str) -> None:
    (workspace / "top.txt").write_text("needle top\n")
    _deep_tree(workspace, 1500)
    ctx = make_ctx(workspace)
    found = text_of(await FindTool().execute("c", FindParams(pattern="*.txt"), ctx))
    assert found.startswith("top.txt")
    assert f"more than {MAX_WALK_DEPTH} levels" in found
    tool = GrepTool(engine=engine)  # type: ignore[arg-type]
    grepped = text_of(await tool.execute("c", GrepParams(pattern="needle"), ctx))
    assert grepped.startswith("top.txt:1: needle top")
    assert f"more than {MAX_WALK_DEPTH} levels" in grepped


async def test_write_and_edit_content_is_capped(workspace: Path) -> None:
    ctx = make_ctx(workspace)
    with pytest.raises(ToolError, match="too large to write"):
        await WriteTool().execute(
            "c", WriteParams(path="big.txt", content="x" * (MAX_WRITE_BYTES + 1)), ctx
        )
    assert not (workspace / "big.txt").exists()
    (workspace / "big.txt").write_bytes(b"y" * (MAX_EDIT_FILE_BYTES + 1))
    with pytest.raises(ToolError, match="too large to edit"):
        await EditTool().execute("c", EditParams(path="big.txt", old_text="y", new_text="z"), ctx)


async def test_a_file_too_large_to_edit_is_refused_without_reading_it(workspace: Path) -> None:
    # 60 MB (sparse: instant to make): the refusal is by its size, not after reading it,
    # so refusing costs no memory (it read up to 64 MB first, then refused at 16 MB).
    with (workspace / "huge.txt").open("wb") as handle:
        handle.truncate(60 * 1024 * 1024)
    ctx = make_ctx(workspace)
    tracemalloc.start()
    try:
        with pytest.raises(ToolError, match=r"too large to edit \(60\.0 MB"):
            await EditTool().execute(
                "c", EditParams(path="huge.txt", old_text="a", new_text="b"), ctx
            )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024, f"refusing allocated {peak / 2**20:.1f} MiB"


async def test_edit_on_a_big_file_counts_briefly_and_diffs_locally(workspace: Path) -> None:
    ctx = make_ctx(workspace)
    (workspace / "many.txt").write_text("x\n" * 2_000_000)
    with pytest.raises(ToolError, match="more than 1000 times"):
        await EditTool().execute("c", EditParams(path="many.txt", old_text="x", new_text="z"), ctx)
    lines = [f"line {i}" for i in range(1_000_000)]
    (workspace / "big.txt").write_text("\n".join(lines) + "\n")
    params = EditParams(path="big.txt", old_text="line 500000\n", new_text="changed\n")
    result = await EditTool().execute("c", params, ctx)
    diff = str(result.details["diff"])
    assert "@@ -499998,7 +499998,7 @@" in diff
    assert "-line 500000\n+changed\n" in diff and len(diff) < 500
    assert "line 500000\n" not in (workspace / "big.txt").read_text()


async def test_an_image_bomb_is_refused_before_decoding(workspace: Path) -> None:
    buffer = io.BytesIO()
    PILImage.new("1", (10_000, 10_000)).save(buffer, "PNG")  # 100 megapixels, tiny file
    assert len(buffer.getvalue()) < 2 * 1024 * 1024
    (workspace / "bomb.png").write_bytes(buffer.getvalue())
    with pytest.raises(ToolError, match="too many pixels") as caught:
        await ReadTool().execute("c", ReadParams(path="bomb.png"), make_ctx(workspace))
    assert "10000×10000" in caught.value.message
