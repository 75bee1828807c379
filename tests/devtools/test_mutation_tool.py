"""scripts/mutation's own logic: which files, which mutants, how they are described, and the
equivalents list. (Running mutants is exercised by running the script.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from devtools.mutation import (
    SQL_CASE_REASON,
    default_files,
    describe,
    function_body_lines,
    generate,
    load_equivalents,
    looks_like_sql,
    same_sql_ignoring_case,
    simple_statement_spans,
    survivors_of,
)

SOURCE = """\
def clamp(value: int, low: int, high: int) -> int:
    if value < low:
        return low
    if value > high:
        return high
    return value


def label(count: int) -> str:
    return "one" if count == 1 else f"{count} items"
"""


def test_the_default_set_is_whatever_exists_of_the_core_modules(tmp_path: Path) -> None:
    for name in (
        "core/loop.py",
        "core/history.py",
        "core/messages.py",
        "storage/sqlite.py",
        "storage/sqlite_ops.py",
        "storage/sqlite_migrations.py",
        "storage/rows.py",
        "bots/runner/__init__.py",
        "bots/runner/budgets.py",
        "bots/inbox.py",
        "bots/surface/feed.py",
        "bots/settings.py",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert default_files(tmp_path) == [
        "core/loop.py",
        "core/history.py",
        "bots/runner/budgets.py",
        "bots/inbox.py",
        "bots/surface/feed.py",
        "storage/sqlite.py",
        "storage/sqlite_ops.py",
        "storage/rows.py",
    ]


def test_a_mutant_is_described_by_its_first_changed_line_and_the_change() -> None:
    mutated = SOURCE.replace("if value > high:", "if value >= high:")
    assert describe(SOURCE, mutated) == (4, "if value > high: ⟶ if value >= high:")
    removed = SOURCE.replace("        return low\n", "")
    assert describe(SOURCE, removed) == (3, "return low ⟶ (removed)")


def test_mutants_are_whole_files_and_the_sample_is_reproducible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.mutmut]\nsource_paths = ["m.py"]\n')
    monkeypatch.chdir(tmp_path)  # mutmut's generator reads its settings from here
    total, every = generate("m.py", SOURCE, max_count=1_000, seed=1)
    assert total == len(every) > 5
    assert any(m.mutation == "if value < low: ⟶ if value <= low:" and m.line == 2 for m in every)
    for mutant in every:
        assert mutant.code != SOURCE
        assert describe(SOURCE, mutant.code) == (mutant.line, mutant.mutation)
        compile(mutant.code, "m.py", "exec")

    _, first = generate("m.py", SOURCE, max_count=4, seed=7)
    _, again = generate("m.py", SOURCE, max_count=4, seed=7)
    _, other = generate("m.py", SOURCE, max_count=4, seed=8)
    assert len(first) == 4 and [m.index for m in first] == [m.index for m in again]
    assert [m.index for m in first] == sorted(m.index for m in first)
    assert {m.index for m in first} != {m.index for m in other}


def test_equivalents_are_read_with_their_reason_and_bad_lines_refused(tmp_path: Path) -> None:
    listing = tmp_path / "equivalents.txt"
    listing.write_text(
        "# comment\n\ncore/x.py:12: a = 1 ⟶ a = 2 — only a default; every caller passes its own\n"
    )
    assert load_equivalents(listing) == {
        ("core/x.py:12", "a = 1 ⟶ a = 2"): "only a default; every caller passes its own"
    }
    assert load_equivalents(tmp_path / "missing.txt") == {}
    listing.write_text("core/x.py:12: a = 1 ⟶ a = 2\n")
    with pytest.raises(ValueError, match="expected"):
        load_equivalents(listing)


def test_survivors_of_an_earlier_run_can_be_run_again(tmp_path: Path) -> None:
    report = tmp_path / "run.txt"
    report.write_text(
        "file  mutants\n"
        "core/x.py  10\n\n"
        "survivors in core/x.py:\n"
        "  core/x.py:4: if a > b: ⟶ if a >= b:\n"
        "  core/x.py:9: return low ⟶ (removed)  [no test runs this line]\n"
        '{"mutation_score": {"core/x.py": 0.8}}\n'
    )
    assert survivors_of(report) == {
        ("core/x.py:4", "if a > b: ⟶ if a >= b:"),
        ("core/x.py:9", "return low ⟶ (removed)"),
    }


LOGGING_AND_TASKS = """\
import asyncio
import logging

log = logging.getLogger(__name__)


async def start(work, label: str) -> object:
    if not label:
        log.warning("no label for %s", work)
    return asyncio.create_task(work(), name=f"job:{label}")
"""


def test_logging_calls_and_task_names_are_not_mutated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.mutmut]\nsource_paths = ["m.py"]\n')
    monkeypatch.chdir(tmp_path)
    total, every = generate("m.py", LOGGING_AND_TASKS, max_count=1_000, seed=1)
    task = 'return asyncio.create_task(work(), name=f"job:{label}")'
    # the condition around the log call and the task's own work are still mutated; the log
    # call's arguments and the task's name (read by nothing) are not
    assert total == len(every)
    assert [m.mutation for m in every] == [
        "if not label: ⟶ if label:",
        f'{task} ⟶ return asyncio.create_task(None, name=f"job:{{label}}")',
        f'{task} ⟶ return asyncio.create_task(name=f"job:{{label}}")',
    ]


SQL = """\
def query(db, key):
    db.execute("DELETE FROM runs WHERE key = ?", (key,))
    db.execute(
        "SELECT id, body FROM inbox "
        "where state = 'pending'"
    )
    return "Hello there"
"""


def test_a_mutant_changing_only_the_case_of_sql_is_equivalent_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.mutmut]\nsource_paths = ["m.py"]\n')
    monkeypatch.chdir(tmp_path)
    _, every = generate("m.py", SQL, max_count=1_000, seed=1)
    by_rule = [m.mutation for m in every if m.equivalent_because == SQL_CASE_REASON]
    delete = 'db.execute("DELETE FROM runs WHERE key = ?", (key,))'
    assert by_rule == [
        f'{delete} ⟶ db.execute("delete from runs where key = ?", (key,))',
        f'{delete} ⟶ db.execute("DELETE FROM RUNS WHERE KEY = ?", (key,))',
        # a line of a concatenation whose other line is SQL is SQL too
        '"SELECT id, body FROM inbox " ⟶ "select id, body from inbox "',
        '"SELECT id, body FROM inbox " ⟶ "SELECT ID, BODY FROM INBOX "',
    ]
    # not equivalent: a quoted literal's case ('pending'), XX padding, text that is not SQL
    assert all(m.equivalent_because == "" for m in every if m.mutation not in by_rule)
    assert any("'PENDING'" in m.mutation for m in every)
    assert any('"hello there"' in m.mutation for m in every)


def test_sql_case_rule_keeps_quoted_values_and_needs_sql() -> None:
    assert same_sql_ignoring_case("SELECT id FROM t", "select id from t")
    assert same_sql_ignoring_case("at >= ?", "AT >= ?")
    assert not same_sql_ignoring_case("WHERE state = 'pending'", "where state = 'PENDING'")
    assert not same_sql_ignoring_case('SELECT "Key" FROM t', 'select "KEY" from t')
    assert not same_sql_ignoring_case("SELECT id FROM t", "XXSELECT id FROM tXX")
    assert looks_like_sql("run_id = ? WHERE id = ?") and looks_like_sql("at >= ?")
    assert not looks_like_sql("surface has no readable ref")
    assert not looks_like_sql("from the start")  # English: the keywords are upper case in SQL


def test_only_lines_inside_function_bodies_run_when_called() -> None:
    # the others (class bodies, defaults) run at import: every test of the module uses them
    source = (
        "class Reason:\n"  # 1
        "    WORD = 'word'\n"  # 2
        "def f(x: int = 3) -> int:\n"  # 3
        "    y = x + 1\n"  # 4
        "    return y\n"  # 5
        "g = lambda v: (\n"  # 6
        "    v * 2)\n"  # 7
    )
    assert function_body_lines(source) == {4, 5, 7}


def test_a_statement_over_several_lines_is_one_span_for_the_tests_that_run_it() -> None:
    source = (
        "def f(db):\n"  # 1
        "    db.execute(\n"  # 2
        "        'SELECT x '\n"  # 3
        "        'FROM t'\n"  # 4
        "    )\n"  # 5
        "    if db:\n"  # 6
        "        return 1\n"  # 7
    )
    assert simple_statement_spans(source) == [(2, 5)]


def test_a_rerun_renders_only_the_mutants_on_its_survivors_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.mutmut]\nsource_paths = ["m.py"]\n')
    monkeypatch.chdir(tmp_path)
    _total, every = generate("m.py", SOURCE, max_count=1_000, seed=1)
    _total, near = generate("m.py", SOURCE, 1_000, 1, lambda m: True, near_lines={4})
    assert near and [m.mutation for m in near] == [m.mutation for m in every if m.line == 4]


HANGS = """\
import time


def test_quick():
    pass


def test_hangs():
    time.sleep(600)
"""


def test_a_test_that_outlives_its_own_limit_kills_the_mutant_at_once(tmp_path: Path) -> None:
    # The request's own limit (10 minutes here) is never waited for: the hung test's is 1 s.
    (tmp_path / "test_hangs.py").write_text(HANGS, encoding="utf-8")
    root = Path(__file__).resolve().parents[2]
    script = (
        "import sys; from pathlib import Path; from devtools.mutation_server import run; "
        "print(run(['test_hangs.py'], 600.0, Path('child.log'), "
        "{'test_hangs.py::test_hangs': 1.0}))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == (
        "('killed', 'ERROR timed out after 1 s: test_hangs.py::test_hangs')"
    )


CONDITION = """\
def ready(a: bool, b: bool, c: bool) -> bool:
    if (
        a
        and b
        and c
    ):
        return True
    return False
"""


def test_a_changed_condition_over_several_lines_is_run_by_the_tests_of_all_its_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A test where `a` is false never runs the `b` and `c` lines, yet `a and b or c` fails it.
    (tmp_path / "pyproject.toml").write_text('[tool.mutmut]\nsource_paths = ["m.py"]\n')
    monkeypatch.chdir(tmp_path)
    _total, mutants = generate("m.py", CONDITION, 100, 1)
    [joined] = [m for m in mutants if m.mutation == "and b and c ⟶ and b or c"]
    assert joined.line == 4 and joined.spans_lines == (3, 5)
