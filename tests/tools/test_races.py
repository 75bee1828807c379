"""Check-then-use races: a directory swapped for a symlink to an outside directory while the
file tools run, over and over. Nothing outside may ever be read, listed or written.

A swapper thread turns `d` (a real directory) into a symlink to `outside` and back in a tight
loop while many tool calls run in parallel. Each single call has a small window, so the tests
make many calls; on the old resolve-then-reopen-by-name code they leaked within a few hundred.
The number of calls is fixed (not a duration), so the tests stay bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.tools import AnyTool, ToolError
from tests.tools.conftest import make_ctx, text_of
from tools.files import (
    FindParams,
    FindTool,
    LsParams,
    LsTool,
    ReadParams,
    ReadTool,
    WriteParams,
    WriteTool,
)
from tools.grep import GrepParams, GrepTool

SENTINEL = "OUTSIDE-ONLY-SENTINEL"
OUTSIDE_NAME = "outside-only-name.txt"
HAVE_RG = shutil.which("rg") is not None
ROUNDS = 12
PARALLEL = 24


class Swapper:
    """Turns `workspace/d` into a symlink to `outside` and back until stopped."""

    def __init__(self, workspace: Path, outside: Path) -> None:
        self.d = workspace / "d"
        self.parked = workspace / ".d-parked"
        self.outside = outside
        self.stop = threading.Event()
        self.swaps = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                time.sleep(0.0003)  # a real directory for a moment (the resolve passes)…
                os.rename(self.d, self.parked)
                os.symlink(self.outside, self.d)
                time.sleep(0.0003)  # …then a link outside for a moment (the reopen follows it)
                os.unlink(self.d)
                os.rename(self.parked, self.d)
                self.swaps += 1
            except OSError:
                self._restore()

    def _restore(self) -> None:
        """Back to a real `d`, whatever a tool made meanwhile (a write may create `d` anew
        while the real one is parked)."""
        with contextlib.suppress(OSError):
            if self.d.is_symlink():
                self.d.unlink()
            elif self.d.is_dir() and self.parked.exists():
                shutil.rmtree(self.d, ignore_errors=True)
            if self.parked.exists() and not self.d.exists():
                os.rename(self.parked, self.d)

    def __enter__(self) -> Swapper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self._restore()


@pytest.fixture
def arena(workspace: Path, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(f"{SENTINEL}\n")
    (outside / OUTSIDE_NAME).write_text(f"{SENTINEL}\n")
    (outside / "sub").mkdir()
    (outside / "sub" / "secret.txt").write_text(f"{SENTINEL}\n")
    d = workspace / "d"
    d.mkdir()
    (d / "secret.txt").write_text("inside\n")
    (d / "sub").mkdir()
    (d / "sub" / "secret.txt").write_text("inside\n")
    yield workspace, outside


def _outside_state(outside: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(outside.rglob("*")) if p.is_file()}


async def _hammer(
    workspace: Path, outside: Path, tool: AnyTool, params: Callable[[int], Any]
) -> list[str]:
    """Run `tool` ROUNDS×PARALLEL times while `d` is swapped; return every text it produced."""
    texts: list[str] = []

    async def one(i: int) -> None:
        try:
            result = await tool.execute(f"c{i}", params(i), make_ctx(workspace))
        except ToolError as exc:
            texts.append(exc.message)
        except Exception as exc:  # the loop would report it as a failure; here it is a bug
            texts.append(f"UNEXPECTED {exc!r}")
        else:
            texts.append(text_of(result))

    with Swapper(workspace, outside) as swapper:
        # At least ROUNDS rounds, and more until the swapper thread has swapped at all: on a
        # loaded machine it may not get scheduled during the first ones.
        r = 0
        while r < ROUNDS or (swapper.swaps == 0 and r < 50 * ROUNDS):
            await asyncio.gather(*(one(r * PARALLEL + i) for i in range(PARALLEL)))
            r += 1
    assert swapper.swaps > 0
    return texts


def _assert_nothing_leaked(texts: list[str]) -> None:
    leaked = [t for t in texts if SENTINEL in t or OUTSIDE_NAME in t]
    assert not leaked, f"{len(leaked)} of {len(texts)} calls saw outside data: {leaked[0][:200]}"
    unexpected = [t for t in texts if t.startswith("UNEXPECTED")]
    assert not unexpected, f"{len(unexpected)} calls failed unexpectedly: {unexpected[0][:300]}"


async def test_read_never_reads_through_a_swapped_directory(arena: tuple[Path, Path]) -> None:
    workspace, outside = arena
    texts = await _hammer(
        workspace, outside, ReadTool(), lambda i: ReadParams(path="d/sub/secret.txt")
    )
    _assert_nothing_leaked(texts)


async def test_ls_never_lists_a_swapped_directory(arena: tuple[Path, Path]) -> None:
    workspace, outside = arena
    texts = await _hammer(workspace, outside, LsTool(), lambda i: LsParams(path="d"))
    _assert_nothing_leaked(texts)


async def test_find_never_walks_into_a_swapped_directory(arena: tuple[Path, Path]) -> None:
    workspace, outside = arena
    texts = await _hammer(
        workspace, outside, FindTool(), lambda i: FindParams(pattern="*.txt", path="d")
    )
    _assert_nothing_leaked(texts)


@pytest.mark.parametrize(
    "engine",
    [
        "python",
        pytest.param("ripgrep", marks=pytest.mark.skipif(not HAVE_RG, reason="rg not installed")),
    ],
)
async def test_grep_never_searches_a_swapped_directory(
    arena: tuple[Path, Path], engine: str
) -> None:
    workspace, outside = arena
    tool = GrepTool(engine=engine)  # type: ignore[arg-type]
    texts = await _hammer(workspace, outside, tool, lambda i: GrepParams(pattern=".", path="d"))
    _assert_nothing_leaked(texts)


async def test_write_never_creates_or_overwrites_outside(arena: tuple[Path, Path]) -> None:
    workspace, outside = arena
    before = _outside_state(outside)
    texts = await _hammer(
        workspace,
        outside,
        WriteTool(),
        lambda i: WriteParams(
            path="d/secret.txt" if i % 2 else f"d/sub/new-{i}.txt", content="overwritten\n"
        ),
    )
    assert _outside_state(outside) == before, "a write landed outside the workspace"
    assert sorted(p.name for p in outside.iterdir()) == sorted([OUTSIDE_NAME, "secret.txt", "sub"])
    _assert_nothing_leaked(texts)
    # Nothing is left behind inside either: no temporary files.
    leftovers = [p for p in workspace.rglob("*.tmp")]
    assert leftovers == []


@pytest.mark.parametrize(
    "engine",
    [
        "python",
        pytest.param("ripgrep", marks=pytest.mark.skipif(not HAVE_RG, reason="rg not installed")),
    ],
)
async def test_grep_cancelled_at_any_point_leaves_no_descriptor_open(
    workspace: Path, engine: str
) -> None:
    """A cancelled grep (the tool timeout, a stopped run) closes the files it opened, also the
    batch a worker thread was still making when the cancel came."""
    for j in range(5):
        (workspace / f"d{j}").mkdir()
        for i in range(30):
            (workspace / f"d{j}" / f"f{i}.txt").write_text("needle\n")
    tool = GrepTool(engine=engine)  # type: ignore[arg-type]
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    for steps in range(0, 60, 3):
        task = asyncio.ensure_future(
            tool.execute("c", GrepParams(pattern="needle", limit=1000), make_ctx(workspace))
        )
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await asyncio.get_running_loop().shutdown_default_executor()  # every worker thread done
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == before
