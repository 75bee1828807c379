"""read, write, edit, ls and find, as the model experiences them."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
from PIL import Image as PILImage

from core.messages import Image, Text
from core.tools import ToolError
from tests.tools.conftest import make_ctx, text_of
from tools.files import (
    EditParams,
    EditTool,
    FindParams,
    FindTool,
    LsParams,
    LsTool,
    ReadParams,
    ReadTool,
    WriteParams,
    WriteTool,
)


async def read(workspace: Path, path: str, **kw: int) -> str:
    result = await ReadTool().execute("c", ReadParams(path=path, **kw), make_ctx(workspace))
    return text_of(result)


# -- read: truncation exact at the limits --------------------------------------------------


async def test_exactly_2000_lines_are_shown_whole(workspace: Path) -> None:
    lines = [f"line {i}" for i in range(1, 2001)]
    (workspace / "f.txt").write_text("\n".join(lines) + "\n")
    text = await read(workspace, "f.txt")
    assert text == "\n".join(lines)
    assert "[Showing" not in text and "offset" not in text


async def test_2001_lines_stop_at_2000_and_say_where_to_continue(workspace: Path) -> None:
    (workspace / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 2002)))
    text = await read(workspace, "f.txt")
    body, notice = text.rsplit("\n\n", 1)
    assert body.splitlines() == [f"line {i}" for i in range(1, 2001)]
    assert (
        notice == "[Showing lines 1-2000 of 2001 (2000-line limit). Use offset=2001 to continue.]"
    )
    assert await read(workspace, "f.txt", offset=2001) == "line 2001"


async def test_a_single_60kb_line_is_clipped_with_a_notice(workspace: Path) -> None:
    (workspace / "long.txt").write_text("x" * (60 * 1024) + "\n" + "second\n")
    text = await read(workspace, "long.txt")
    body, notice = text.rsplit("\n\n", 1)
    assert body == "x" * (50 * 1024)
    assert "Line 1 is 60.0 KB" in notice
    assert "grep" in notice and "offset=2" in notice


async def test_byte_limit_never_cuts_a_line(workspace: Path) -> None:
    line = "y" * 99  # 100 bytes with its newline: 512 lines fit in 50 KB
    (workspace / "wide.txt").write_text((line + "\n") * 1000)
    body, notice = (await read(workspace, "wide.txt")).rsplit("\n\n", 1)
    assert body.split("\n") == [line] * 512
    assert notice == "[Showing lines 1-512 of 1000 (50.0 KB limit). Use offset=513 to continue.]"


async def test_offset_and_limit(workspace: Path) -> None:
    (workspace / "f.txt").write_text("".join(f"{i}\n" for i in range(1, 101)))
    text = await read(workspace, "f.txt", offset=10, limit=3)
    assert text == "10\n11\n12\n\n[Showing lines 10-12 of 100. Use offset=13 to continue.]"
    assert await read(workspace, "f.txt", offset=99) == "99\n100"
    with pytest.raises(ToolError, match="past the end"):
        await read(workspace, "f.txt", offset=101)


async def test_empty_and_missing_files(workspace: Path) -> None:
    (workspace / "empty.txt").write_text("")
    assert "empty" in await read(workspace, "empty.txt")
    with pytest.raises(ToolError, match="not found"):
        await read(workspace, "nope.txt")
    with pytest.raises(ToolError, match="directory"):
        await read(workspace, ".")


# -- read: images and binaries, by content ------------------------------------------------


async def test_image_is_recognised_by_content_and_resized(workspace: Path) -> None:
    buffer = io.BytesIO()
    PILImage.new("RGB", (3000, 1500), (200, 30, 30)).save(buffer, format="PNG")
    (workspace / "diagram.dat").write_bytes(buffer.getvalue())  # the name says nothing
    result = await ReadTool().execute("c", ReadParams(path="diagram.dat"), make_ctx(workspace))
    assert isinstance(result.content[0], Text) and "3000×1500" in result.content[0].text
    image = result.content[1]
    assert isinstance(image, Image)
    decoded = PILImage.open(io.BytesIO(base64.b64decode(image.data)))
    assert decoded.size == (2000, 1000)
    assert image.mime_type == f"image/{decoded.format.lower()}"  # type: ignore[union-attr]


async def test_small_jpeg_passes_unchanged(workspace: Path) -> None:
    buffer = io.BytesIO()
    PILImage.new("RGB", (40, 30), (0, 90, 200)).save(buffer, format="JPEG")
    (workspace / "photo").write_bytes(buffer.getvalue())
    result = await ReadTool().execute("c", ReadParams(path="photo"), make_ctx(workspace))
    image = result.content[1]
    assert isinstance(image, Image) and image.mime_type == "image/jpeg"
    assert base64.b64decode(image.data) == buffer.getvalue()


async def test_text_named_like_an_image_is_read_as_text(workspace: Path) -> None:
    (workspace / "fake.png").write_text("just text\n")
    assert await read(workspace, "fake.png") == "just text"


async def test_binary_files_are_refused(workspace: Path) -> None:
    (workspace / "blob.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)))
    with pytest.raises(ToolError, match="binary file"):
        await read(workspace, "blob.bin")


async def test_broken_image_is_refused_clearly(workspace: Path) -> None:
    (workspace / "broken").write_bytes(b"\x89PNG\r\n\x1a\n" + b"garbage" * 10)
    with pytest.raises(ToolError, match="looks like an image"):
        await read(workspace, "broken")


# -- write ---------------------------------------------------------------------------------


async def test_write_creates_parents_and_reports_bytes(workspace: Path) -> None:
    ctx = make_ctx(workspace)
    result = await WriteTool().execute("c", WriteParams(path="a/b/c.txt", content="héllo"), ctx)
    assert (workspace / "a/b/c.txt").read_text() == "héllo"
    assert result.details["bytes"] == 6 and result.details["created"] is True
    assert "6 bytes" in text_of(result)
    again = await WriteTool().execute("c", WriteParams(path="a/b/c.txt", content="x"), ctx)
    assert again.details["created"] is False and (workspace / "a/b/c.txt").read_text() == "x"
    assert sorted(p.name for p in (workspace / "a/b").iterdir()) == ["c.txt"]  # no temp left


async def test_write_refuses_a_directory_and_a_file_as_parent(workspace: Path) -> None:
    (workspace / "d").mkdir()
    (workspace / "f").write_text("x")
    ctx = make_ctx(workspace)
    with pytest.raises(ToolError, match="directory"):
        await WriteTool().execute("c", WriteParams(path="d", content="x"), ctx)
    with pytest.raises(ToolError, match="parent"):
        await WriteTool().execute("c", WriteParams(path="f/g.txt", content="x"), ctx)


# -- edit ----------------------------------------------------------------------------------


async def edit(workspace: Path, path: str, old: str, new: str) -> tuple[str, dict[str, object]]:
    result = await EditTool().execute(
        "c", EditParams(path=path, old_text=old, new_text=new), make_ctx(workspace)
    )
    return text_of(result), result.details


async def test_edit_replaces_a_unique_match_and_gives_a_diff(workspace: Path) -> None:
    (workspace / "m.py").write_text("def a():\n    return 1\n\ndef b():\n    return 2\n")
    text, details = await edit(workspace, "m.py", "    return 2", "    return 3")
    assert (workspace / "m.py").read_text().endswith("    return 3\n")
    assert "line 5" in text
    diff = str(details["diff"])
    assert "-    return 2" in diff and "+    return 3" in diff and "--- a/m.py" in diff


async def test_edit_with_no_match_or_several_says_how_many(workspace: Path) -> None:
    (workspace / "m.txt").write_text("x = 1\nx = 1\n")
    with pytest.raises(ToolError, match="not found"):
        await edit(workspace, "m.txt", "y = 1", "y = 2")
    with pytest.raises(ToolError, match="occurs 2 times"):
        await edit(workspace, "m.txt", "x = 1", "x = 2")
    (workspace / "o.txt").write_text("aaa")
    with pytest.raises(ToolError, match="occurs 2 times"):  # overlapping matches count
        await edit(workspace, "o.txt", "aa", "b")
    assert (workspace / "m.txt").read_text() == "x = 1\nx = 1\n"


async def test_edit_keeps_crlf_line_endings(workspace: Path) -> None:
    (workspace / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    _, details = await edit(workspace, "w.txt", "two\nthree", "TWO\nTHREE\nfour")
    assert (workspace / "w.txt").read_bytes() == b"one\r\nTWO\r\nTHREE\r\nfour\r\n"
    assert details["line_endings"] == "crlf"


async def test_edit_keeps_the_encoding(workspace: Path) -> None:
    (workspace / "latin.txt").write_bytes(b"caf\xe9 cr\xe8me\n")
    await edit(workspace, "latin.txt", "crème", "brûlée")
    assert (workspace / "latin.txt").read_bytes() == b"caf\xe9 br\xfbl\xe9e\n"
    (workspace / "bom.txt").write_bytes(b"\xef\xbb\xbfhello\n")
    await edit(workspace, "bom.txt", "hello", "bye")
    assert (workspace / "bom.txt").read_bytes() == b"\xef\xbb\xbfbye\n"
    with pytest.raises(ToolError, match="cannot hold"):
        await edit(workspace, "latin.txt", "café", "☃")


# -- ls and find ---------------------------------------------------------------------------


async def test_ls_sorts_marks_directories_and_limits(workspace: Path) -> None:
    for name in ("b.txt", "A.md", ".hidden"):
        (workspace / name).write_text("x")
    (workspace / "src").mkdir()
    (workspace / "lnk").symlink_to("b.txt")
    ctx = make_ctx(workspace)
    assert text_of(await LsTool().execute("c", LsParams(), ctx)).split("\n") == [
        ".hidden",
        "A.md",
        "b.txt",
        "lnk@",
        "src/",
    ]
    limited = text_of(await LsTool().execute("c", LsParams(limit=2), ctx))
    assert limited.startswith(".hidden\nA.md\n\n[Showing 2 of 5 entries")
    assert "empty" in text_of(await LsTool().execute("c", LsParams(path="src"), ctx))
    with pytest.raises(ToolError, match="not a directory"):
        await LsTool().execute("c", LsParams(path="b.txt"), ctx)


async def test_find_matches_globs_and_returns_workspace_relative_paths(workspace: Path) -> None:
    for rel in ("a.py", "src/b.py", "src/deep/c.py", "src/deep/d.txt", ".git/x.py"):
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text("x")
    ctx = make_ctx(workspace)

    async def find(pattern: str, path: str = ".", limit: int = 1000) -> list[str]:
        params = FindParams(pattern=pattern, path=path, limit=limit)
        return text_of(await FindTool().execute("c", params, ctx)).split("\n")

    assert await find("*.py") == ["a.py", "src/b.py", "src/deep/c.py"]
    assert await find("src/**/*.py") == ["src/b.py", "src/deep/c.py"]
    assert await find("*.{py,txt}", path="src/deep") == ["src/deep/c.py", "src/deep/d.txt"]
    assert await find("deep") == ["src/deep/"]
    limited = await find("*.py", limit=2)
    assert limited[:2] == ["a.py", "src/b.py"] and "Stopped at 2 results" in limited[-1]
    assert (await find("*.rs"))[0].startswith("No files match")


def test_summaries_are_short_human_labels() -> None:
    assert ReadTool().summarize(ReadParams(path="README.md")) == "Read README.md"
    assert (
        ReadTool().summarize(ReadParams(path="README.md", offset=1, limit=200))
        == "Read README.md:1-200"
    )
    assert WriteTool().summarize(WriteParams(path="a.txt", content="x")) == "Write a.txt"
    assert EditTool().summarize(EditParams(path="a", old_text="x", new_text="y")) == "Edit a"
    assert LsTool().summarize(LsParams(path="src")) == "List src"
    assert FindTool().summarize(FindParams(pattern="*.py")) == "Find *.py"
