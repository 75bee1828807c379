"""Reading a huge text file costs memory in proportion to the file, never to its line count,
and a read deep into it finds its window without splitting the whole file (issue 23: 60 MB of
newlines once peaked at 1.65 GB and held the event loop 1.7 s)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from tests.tools.conftest import make_ctx, text_of
from tools.files import ReadParams, _read

SIZE = 16 * 1024 * 1024


def peak_of_read(workspace: Path, params: ReadParams) -> tuple[int, str]:
    tracemalloc.start()
    try:
        result = _read(make_ctx(workspace), params)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, text_of(result)


def test_a_file_of_newlines_is_read_in_memory_bounded_by_its_size(workspace: Path) -> None:
    (workspace / "blank.txt").write_bytes(b"\n" * SIZE)
    peak, text = peak_of_read(workspace, ReadParams(path="blank.txt"))
    # The bytes and their text (each the file's size) and little else; splitting into lines
    # took a list of 8 bytes per line on top (here 128 MB).
    assert peak < 3 * SIZE, f"peak {peak / 2**20:.0f} MB for a {SIZE / 2**20:.0f} MB file"
    assert f"[Showing lines 1-2000 of {SIZE:,}".replace(",", "") in text.replace(",", "")


def test_a_read_deep_into_a_big_file_shows_exactly_its_window(workspace: Path) -> None:
    lines = [f"line {n}" for n in range(1, 1_500_001)]
    (workspace / "numbers.txt").write_text("\n".join(lines) + "\n")
    peak, text = peak_of_read(workspace, ReadParams(path="numbers.txt", offset=1_234_567, limit=3))
    assert text.startswith("line 1234567\nline 1234568\nline 1234569\n")
    assert "[Showing lines 1234567-1234569 of 1500000. Use offset=1234570 to continue.]" in text
    size = (workspace / "numbers.txt").stat().st_size
    assert peak < 3 * size


def test_the_last_lines_and_a_file_without_a_final_newline(workspace: Path) -> None:
    (workspace / "tail.txt").write_text("a\nb\nc")
    _, text = peak_of_read(workspace, ReadParams(path="tail.txt", offset=3))
    assert text == "c"
    _, text = peak_of_read(workspace, ReadParams(path="tail.txt", offset=2, limit=1))
    assert text.startswith("b\n\n[Showing lines 2-2 of 3. Use offset=3 to continue.]")
