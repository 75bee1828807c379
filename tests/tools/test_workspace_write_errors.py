"""Writes that cannot happen say why, and paths ending in `..` are pinned (issue 23, "Tests that
would not notice": a temporary file that cannot be created or written, and a path ending in
`..` inside the workspace, were not pinned by any test, so a mutant turning their errors into
a TypeError survived)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core.tools import ToolError
from tools.workspace import Root, replace_file

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ("a/..", "The path names the workspace itself; give a file name."),
        ("a/b/..", "'a' is a directory, not a regular file."),
        ("..", "Access denied: '..' resolves to a place that lies outside the workspace."),
        ("a/../..", "Access denied: 'a/../..' resolves to a place that lies outside"),
    ],
)
def test_a_path_ending_in_dotdot_is_refused_with_what_it_names(
    workspace: Path, raw: str, said: str
) -> None:
    (workspace / "a" / "b").mkdir(parents=True)
    with Root(workspace) as root, pytest.raises(ToolError) as refused:
        replace_file(root, raw, b"x")
    assert refused.value.message.startswith(said)
    assert sorted(p.name for p in workspace.rglob("*")) == ["a", "b"]  # nothing written


def test_a_path_through_dotdot_inside_the_workspace_writes_where_it_names(
    workspace: Path,
) -> None:
    (workspace / "a" / "b").mkdir(parents=True)
    with Root(workspace) as root:
        assert replace_file(root, "a/b/../c.txt", b"x") == (True, "a/c.txt")
    assert (workspace / "a" / "c.txt").read_bytes() == b"x"


WRITE_UNDER_LIMITS = """
import os, resource, signal, sys
from pathlib import Path
from core.tools import ToolError
from tools.workspace import Root, replace_file
workspace = Path(sys.argv[1])
with Root(workspace) as root:
    if sys.argv[2] == "cannot-write":
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails: EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (16, resource.RLIM_INFINITY))
    else:  # cannot create: no descriptor left for the temporary file
        used = len(os.listdir("/proc/self/fd"))
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (used, hard))
    try:
        replace_file(root, "notes.txt", b"x" * 4096)
    except ToolError as exc:
        print("ToolError:", exc.message)
    except BaseException as exc:
        print("OTHER:", type(exc).__name__, exc)
"""


@pytest.mark.parametrize(
    ("how", "said"),
    [("cannot-write", "File too large"), ("cannot-create", "Too many open files")],
)
def test_a_write_that_fails_says_why_and_leaves_nothing_behind(
    workspace: Path, how: str, said: str
) -> None:
    (workspace / "notes.txt").write_bytes(b"kept")
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(WRITE_UNDER_LIMITS), str(workspace), how],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert done.stdout.startswith("ToolError: Cannot use 'notes.txt':"), done.stdout + done.stderr
    assert said in done.stdout
    assert [p.name for p in workspace.iterdir()] == ["notes.txt"]  # no temporary file left
    assert (workspace / "notes.txt").read_bytes() == b"kept"  # the old content intact
