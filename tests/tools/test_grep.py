"""grep: the same answers from ripgrep and from pure Python."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from core.tools import ToolError
from tests.tools.conftest import make_ctx, text_of
from tools.grep import MAX_LINE_CHARS, GrepParams, GrepTool

HAVE_RG = shutil.which("rg") is not None
ENGINES = [
    "python",
    pytest.param("ripgrep", marks=pytest.mark.skipif(not HAVE_RG, reason="rg not installed")),
]


@pytest.fixture
def tree(workspace: Path) -> Path:
    files = {
        "README.md": "# Title\nTODO: write docs\n",
        "a.txt": "alpha\nTODO first\nbeta TODO again\n",
        "a/z.txt": "todo lower case\n",
        "src/main.py": "def main():\n    # TODO: implement\n    return 42\n",
        "src/util.py": "import re\nPATTERN = r'a.b'\n",
        "src/deep/x.py": "x = 'a.b'\ny = 'axb'\n",
        ".hidden/h.txt": "TODO hidden\n",
        "crlf.txt": "TODO windows\r\nnext\r\n",
        "long.txt": "TODO " + "w" * 800 + "\n",
        ".git/config": "TODO in git\n",
    }
    for rel, content in files.items():
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_bytes(content.encode())
    (workspace / "bin.dat").write_bytes(b"\x00\x01TODO binary\n")
    (workspace / "link.txt").symlink_to("a.txt")
    return workspace


async def grep(workspace: Path, engine: str, **kw: Any) -> str:
    tool = GrepTool(engine=engine)  # type: ignore[arg-type]
    return text_of(await tool.execute("c", GrepParams(**kw), make_ctx(workspace)))


@pytest.mark.parametrize("engine", ENGINES)
async def test_finds_matching_lines_sorted_by_path(tree: Path, engine: str) -> None:
    lines = (await grep(tree, engine, pattern="TODO")).split("\n")
    assert lines[:4] == [
        ".hidden/h.txt:1: TODO hidden",
        "README.md:1: TODO: write docs".replace(":1:", ":2:"),
        "a.txt:2: TODO first",
        "a.txt:3: beta TODO again",
    ]
    assert "crlf.txt:1: TODO windows" in lines  # no stray carriage return
    joined = "\n".join(lines)
    assert "bin.dat" not in joined and ".git" not in joined and "link.txt" not in joined


@pytest.mark.parametrize("engine", ENGINES)
async def test_options_glob_case_literal_and_limits(tree: Path, engine: str) -> None:
    assert (
        await grep(tree, engine, pattern="TODO", glob="*.py")
        == "src/main.py:2:     # TODO: implement"
    )
    assert "a/z.txt:1: todo lower case" in await grep(
        tree, engine, pattern="todo", ignore_case=True
    )
    assert "a/z.txt" not in await grep(tree, engine, pattern="todo", path="src")
    literal = await grep(tree, engine, pattern="a.b", literal=True, path="src")
    assert "axb" not in literal and "src/deep/x.py:1: x = 'a.b'" in literal
    limited = await grep(tree, engine, pattern="TODO", limit=2)
    assert limited.count("\n") == 3 and "Stopped at 2 matches" in limited
    long_line = await grep(tree, engine, pattern="wwww")
    assert f"line cut, {5 + 800} characters" in long_line
    assert len(long_line.split(": ", 1)[1]) < MAX_LINE_CHARS + 50
    assert "No matches" in await grep(tree, engine, pattern="nothing-like-this")


@pytest.mark.skipif(not HAVE_RG, reason="ripgrep (rg) is not installed, nothing to compare")
@pytest.mark.parametrize(
    "query",
    [
        {"pattern": "TODO"},
        {"pattern": "todo", "ignore_case": True},
        {"pattern": r"\bre\b|return"},
        {"pattern": "a.b"},
        {"pattern": "a.b", "literal": True},
        {"pattern": "TODO", "glob": "*.txt"},
        {"pattern": "TODO", "glob": "src/**/*.py"},
        {"pattern": "TODO", "limit": 3},
        {"pattern": "x", "path": "src/deep/x.py"},
        {"pattern": "w{10}"},
    ],
)
async def test_ripgrep_and_python_agree(tree: Path, query: dict[str, Any]) -> None:
    assert await grep(tree, "ripgrep", **query) == await grep(tree, "python", **query)


async def test_bad_regex_and_missing_path(tree: Path) -> None:
    with pytest.raises(ToolError, match="Invalid regular expression"):
        await grep(tree, "python", pattern="(unclosed")
    with pytest.raises(ToolError, match="not found"):
        await grep(tree, "python", pattern="x", path="missing")


@pytest.mark.skipif(not HAVE_RG, reason="rg not installed")
async def test_lookaround_falls_back_to_python(tree: Path) -> None:
    tool = GrepTool(engine="ripgrep")
    result = await tool.execute("c", GrepParams(pattern="TODO(?= first)"), make_ctx(tree))
    assert text_of(result) == "a.txt:2: TODO first"
    assert result.details["engine"] == "python"


def test_summary() -> None:
    assert GrepTool().summarize(GrepParams(pattern="TODO", path="src")) == "Grep /TODO/ in src"
