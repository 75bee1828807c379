"""Property-based hostile paths (hypothesis), extending tests/tools/test_paths.py.

Paths are built from dangerous pieces ('..', absolute prefixes inside and outside the
workspace, NUL and control characters, look-alike and invisible Unicode, over-long names,
backslashes) and walked through a workspace where each example plants its own symlinks
(relative and absolute, inside, outside, looping, dangling). Every resolution must either end
inside the workspace or raise the tool's clear `ToolError`; no tool may read, list or change
anything outside.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
from tools.workspace import Root, locate, write_file_in_workspace

SENTINEL = "PROPERTY-SENTINEL"

# Placeholders replaced once the example's directories exist.
WS, OUT = "\x01WS\x01", "\x01OUT\x01"

_pieces = st.sampled_from(
    [
        "..",
        ".",
        "",
        "sub",
        "deeper",
        "ok.txt",
        "secret.txt",
        "s0",
        "s1",
        "s2",
        "s3",
        "\x00",
        "a\nb",
        "\u202e",
        "\uff0e\uff0e",
        "\u2025",
        "\uff0f",
        "a\\b",
        "~",
        "é",
        "日本",
        "x" * 256,
    ]
)
_free_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12
)
_component = st.one_of(_pieces, _pieces, _free_text)
_prefix = st.sampled_from(["", "", "", "/", f"{WS}/", f"{OUT}/", "/etc/", f"{WS}/../"])


@st.composite
def hostile_paths(draw: st.DrawFn) -> str:
    parts = draw(st.lists(_component, min_size=1, max_size=8))
    return draw(_prefix) + "/".join(parts)


_link_targets = st.sampled_from(
    [
        "..",
        "../..",
        "../outside",
        f"{OUT}",
        f"{OUT}/secret.txt",
        f"{WS}/sub",
        f"{WS}/../outside",
        "/etc",
        "/",
        "sub",
        "sub/deeper",
        "ok.txt",
        "s0",
        "s1",
        "missing/file",
        ".",
        "sub/../..",
    ]
)


@dataclass
class Arena:
    workspace: Path
    outside: Path

    def materialise(self, raw: str) -> str:
        return raw.replace(WS, str(self.workspace)).replace(OUT, str(self.outside))

    def outside_state(self) -> dict[str, bytes]:
        return {str(p): p.read_bytes() for p in sorted(self.outside.rglob("*")) if p.is_file()}


@contextmanager
def arena(links: list[tuple[str, str]]) -> Iterator[Arena]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        outside = base / "outside"
        (outside / "sub").mkdir(parents=True)
        (outside / "secret.txt").write_text(SENTINEL)
        (outside / "sub" / "secret.txt").write_text(SENTINEL)
        workspace = base / "workspace"
        (workspace / "sub" / "deeper").mkdir(parents=True)
        (workspace / "ok.txt").write_text("fine\n")
        (workspace / "sub" / "ok.txt").write_text("fine\n")
        made = Arena(workspace, outside)
        for where, target in links:
            try:
                os.symlink(made.materialise(target), workspace / where)
            except FileExistsError:
                continue
        yield made


_plants = st.lists(
    st.tuples(st.sampled_from(["s0", "s1", "s2", "s3", "sub/s0", "sub/s1"]), _link_targets),
    max_size=4,
)


def _inside(path: str, root: Path) -> bool:
    real = Path(path)
    return real == root or real.is_relative_to(root)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=hostile_paths(), links=_plants, follow=st.booleans())
def test_every_resolution_stays_inside_or_refuses_clearly(
    raw: str, links: list[tuple[str, str]], follow: bool
) -> None:
    with arena(links) as where:
        path = where.materialise(raw)
        with Root(where.workspace) as root:
            try:
                located = locate(root, path, follow_links=follow)
            except ToolError as exc:
                assert len(exc.message) > 15
                assert SENTINEL not in exc.message
                return
            with located:
                real_dir = os.readlink(f"/proc/self/fd/{located.dir_fd}")
                assert _inside(real_dir, root.path), (path, real_dir)
                assert ".." not in located.parts
                if located.name is not None:
                    assert "/" not in located.name and located.name not in ("", ".", "..")
                    # A final link is followed (inside) or refused, never handed back.
                    assert not os.path.islink(os.path.join(real_dir, located.name))


async def _run_all(where: Arena, path: str) -> list[str]:
    ctx = make_ctx(where.workspace)
    calls: list[tuple[AnyTool, Any]] = [
        (ReadTool(), ReadParams(path=path)),
        (LsTool(), LsParams(path=path)),
        (FindTool(), FindParams(pattern="*", path=path)),
        (GrepTool(), GrepParams(pattern="SENTINEL|fine", path=path)),
        (WriteTool(), WriteParams(path=path, content="written")),
    ]
    texts = []
    for tool, params in calls:
        try:
            texts.append(text_of(await tool.execute("c", params, ctx)))
        except ToolError as exc:
            assert len(exc.message) > 15
            texts.append(exc.message)
    return texts


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=hostile_paths(), links=_plants)
def test_no_tool_touches_anything_outside(raw: str, links: list[tuple[str, str]]) -> None:
    with arena(links) as where:
        before = where.outside_state()
        texts = asyncio.run(_run_all(where, where.materialise(raw)))
        assert all(SENTINEL not in text for text in texts), texts
        assert where.outside_state() == before
        assert sorted(p.name for p in where.outside.iterdir()) == ["secret.txt", "sub"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=hostile_paths(), links=_plants, unique=st.booleans())
def test_the_bots_own_writes_never_land_outside_or_through_a_link(
    raw: str, links: list[tuple[str, str]], unique: bool
) -> None:
    with arena(links) as where:
        before = where.outside_state()
        try:
            written = write_file_in_workspace(
                where.workspace, where.materialise(raw), b"bot", unique=unique
            )
        except ToolError as exc:
            assert len(exc.message) > 15
        else:
            target = where.workspace / written
            # Written where it says, through no link at all.
            assert target.read_bytes() == b"bot"
            for parent in [target, *target.parents]:
                if parent == where.workspace:
                    break
                assert not parent.is_symlink(), written
        assert where.outside_state() == before
        assert sorted(p.name for p in where.outside.iterdir()) == ["secret.txt", "sub"]
