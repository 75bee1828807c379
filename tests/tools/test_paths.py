"""Hostile paths: every one is refused by every file tool, and nothing outside is touched."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.tools import AnyTool, ToolError
from tests.tools.conftest import make_ctx, text_of
from tools.files import (
    EditParams,
    EditTool,
    LsParams,
    LsTool,
    ReadParams,
    ReadTool,
    WriteParams,
    WriteTool,
)
from tools.grep import GrepParams, GrepTool

SENTINEL = "TOP-SECRET-SENTINEL"


@pytest.fixture
def arena(workspace: Path, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A workspace full of traps, next to an `outside` directory holding a sentinel."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SENTINEL)
    (workspace / "sub").mkdir()
    (workspace / "ok.txt").write_text("fine\n")
    (workspace / "link_out").symlink_to(outside)
    (workspace / "file_link").symlink_to(outside / "secret.txt")
    (workspace / "dangling").symlink_to(outside / "created-by-write.txt")
    (workspace / "rel").symlink_to("../outside")
    (workspace / "sub" / "up").symlink_to("../../outside")
    (workspace / "loop").symlink_to("loop")
    (workspace / "devzero").symlink_to("/dev/zero")
    (workspace / "etc_link").symlink_to("/etc")
    os.mkfifo(workspace / "fifo")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(workspace / "sock"))
    try:
        yield workspace, outside
    finally:
        server.close()


def hostile_paths(outside_marker: str = "@OUT@", ws_marker: str = "@WS@") -> list[str]:
    return [
        "../outside/secret.txt",
        "../../../../../../etc/passwd",
        "sub/../../outside/secret.txt",
        "sub/./../../outside/created.txt",
        f"{outside_marker}/secret.txt",
        f"{ws_marker}/../outside/secret.txt",
        "/etc/passwd",
        "/",
        "/proc/self/root/etc/passwd",
        "/dev/null",
        "link_out/secret.txt",
        "link_out/new/created.txt",
        "file_link",
        "dangling",
        "rel/secret.txt",
        "sub/up/secret.txt",
        "etc_link/passwd",
        "devzero",
        "loop",
        "fifo",
        "sock",
        "secret\x00.txt",
        "ok.txt\x00../../outside/secret.txt",
        "~",
        "~/secret.txt",
        "~root/.bashrc",
        "a" * 300,
        "/".join(["deep"] * 1500),
        "\uff0e\uff0e/outside/secret.txt",  # fullwidth full stops
        "\u2025/outside/secret.txt",  # two dot leader, NFKC '..'
        "..\uff0foutside\uff0fsecret.txt",  # fullwidth solidus
        "..\\outside\\secret.txt",
        "ok\n.txt",
        "txt.\u202eexe",  # right-to-left override
        "o\u200bk.txt",  # zero-width space
        "",
    ]


def _materialise(raw: str, workspace: Path, outside: Path) -> str:
    return raw.replace("@OUT@", str(outside)).replace("@WS@", str(workspace))


def _tools() -> list[tuple[AnyTool, Any]]:
    return [
        (ReadTool(), lambda p: ReadParams(path=p)),
        (WriteTool(), lambda p: WriteParams(path=p, content="overwritten")),
        (EditTool(), lambda p: EditParams(path=p, old_text=SENTINEL, new_text="edited")),
        (LsTool(), lambda p: LsParams(path=p)),
        (GrepTool(engine="python"), lambda p: GrepParams(pattern="SECRET", path=p)),
    ]


def _snapshot(outside: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(outside.rglob("*")) if p.is_file()}


def test_corpus_is_large_enough() -> None:
    assert len(hostile_paths()) >= 25


@pytest.mark.parametrize("raw", hostile_paths(), ids=lambda r: repr(r)[:40])
async def test_hostile_path_is_refused_by_every_file_tool(
    arena: tuple[Path, Path], raw: str
) -> None:
    workspace, outside = arena
    path = _materialise(raw, workspace, outside)
    before = _snapshot(outside)
    for tool, params in _tools():
        try:
            result = await tool.execute("c", params(path), make_ctx(workspace))
        except ToolError as exc:
            message = exc.message
            assert len(message) > 15, message
            assert SENTINEL not in message
        else:
            # ls of a directory inside (e.g. through '..' back in) is allowed only if it stays in.
            pytest.fail(f"{tool.name} accepted {raw!r}: {text_of(result)[:200]}")
    assert _snapshot(outside) == before
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == SENTINEL


@pytest.mark.parametrize(
    ("raw", "phrase"),
    [
        ("../outside/secret.txt", "outside the workspace"),
        ("link_out/secret.txt", "outside the workspace"),
        ("dangling", "outside the workspace"),
        ("secret\x00.txt", "NUL"),
        ("~/x", "'~'"),
        ("a" * 300, "too long"),
        ("\uff0e\uff0e/outside/secret.txt", "look-alike"),
        ("fifo", "named pipe"),
        ("sock", "socket"),
        ("loop", "symbolic link that loops"),
    ],
)
async def test_refusals_say_why(arena: tuple[Path, Path], raw: str, phrase: str) -> None:
    workspace, _ = arena
    with pytest.raises(ToolError) as caught:
        await ReadTool().execute("c", ReadParams(path=raw), make_ctx(workspace))
    assert phrase in caught.value.message


async def test_paths_inside_the_workspace_still_work(arena: tuple[Path, Path]) -> None:
    workspace, _ = arena
    ctx = make_ctx(workspace)
    assert text_of(await ReadTool().execute("c", ReadParams(path="ok.txt"), ctx)) == "fine"
    absolute = str(workspace / "sub" / ".." / "ok.txt")
    assert text_of(await ReadTool().execute("c", ReadParams(path=absolute), ctx)) == "fine"
    await WriteTool().execute("c", WriteParams(path="sub/new/inner.txt", content="x"), ctx)
    assert (workspace / "sub" / "new" / "inner.txt").read_text() == "x"
    (workspace / "inner_link").symlink_to("ok.txt")  # a symlink that stays inside is fine
    assert text_of(await ReadTool().execute("c", ReadParams(path="inner_link"), ctx)) == "fine"


async def test_a_symlinked_workspace_is_resolved(tmp_path: Path) -> None:
    real = tmp_path / "real-ws"
    real.mkdir()
    (real / "a.txt").write_text("hello")
    alias = tmp_path / "alias-ws"
    alias.symlink_to(real)
    ctx = make_ctx(alias)
    assert text_of(await ReadTool().execute("c", ReadParams(path="a.txt"), ctx)) == "hello"
