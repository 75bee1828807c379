"""`scripts/mutation [FILE…]`: mutation testing of the core, on a reproducible sample.

The mutants are mutmut's (3.x, its operators: swapped comparison, boolean and arithmetic
operators, changed constants and strings, `None` for arguments and assignments, dropped
keyword arguments, `break` for `continue`, …), one mutant per function-level change. Running
them is ours, because mutmut's in-process trampolines break the tests that start subprocesses
(the CLI end-to-end tests, the crash tests, the grep and bash tools):
- the checkout (tracked and untracked files) is copied to a scratch folder per worker, so the
  worktree is never touched and a crash cannot leave a mutant behind;
- the tests run once under coverage.py with per-test contexts; each mutant then runs, in a
  fresh `pytest -x`, only the tests that execute its line, fastest first;
- a mutant whose tests fail is killed; one that outlives its time limit (a hang) is killed too;
- a seeded sample when a file has more mutants than `--max-per-file`;
- calls to logging and the `name=` of tasks and threads are not mutated (see `avoided_nodes`);
- a string mutant that only changes the letter case of SQL is equivalent by rule
  (`sql_case_only`), and `devtools/mutation_equivalents.txt` lists the other mutants no caller
  can tell apart (neither is scored).
Prints per file mutants / tried / killed / survived / score, the survivors as
`file:line: original ⟶ mutant`, and last one JSON line `{"mutation_score": {...}}`.
Not part of CI: it takes minutes per file.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import queue
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import libcst
import libcst.metadata
from mutmut.mutation.file_mutation import Mutation, create_mutations

T = TypeVar("T")
ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "devtools" / "mutation_equivalents.txt"

# The default set, as patterns: the modules may be split (storage/sqlite_*.py, bots/runner_*.py
# or a bots/runner/ package), and whatever exists of them is measured. The runner's inbox and
# surface feeds left runner.py in the split and are its core still.
DEFAULT_PATTERNS = (
    "core/loop.py",
    "core/loop_*.py",
    "core/history.py",
    "bots/runner.py",
    "bots/runner_*.py",
    "bots/runner/*.py",
    "bots/inbox.py",
    "bots/surface/feed.py",
    "storage/sqlite.py",
    "storage/sqlite_*.py",
    "storage/rows.py",  # rows to records, shared by both backends (was storage/sqlite_rows.py)
    "storage/batching.py",  # the SQLite store's group commit (shared with any other backend)
    "bots/platforms/slack/events.py",  # the Slack payload translator
    "bots/platforms/discord/events.py",  # the Discord one, when it lands
    "bots/journal.py",  # acknowledged events not yet accepted (100 % on its sample)
    "bots/platforms/slack/surface.py",  # one run shown in a Slack thread (99 % on its sample)
    "bots/platforms/discord/surface_recovery.py",  # restart recovery (98.9 % on its sample)
    "bots/platforms/discord/surface_parts.py",  # answer text as messages (100 %)
    "storage/postgres_instances.py",  # leases, fencing, notices across instances (100 %)
)

# Matched by a pattern above but not the store's logic: the schema has its own tests.
DEFAULT_LEFT_OUT = frozenset({"storage/sqlite_migrations.py"})

ARROW = "⟶"
TIME_LIMIT_FLOOR_S = 30.0  # interpreter start-up and imports on a busy machine
TIME_LIMIT_FACTOR = 4.0  # times the tests' own duration in the clean run


@dataclass(frozen=True)
class Mutant:
    file: str
    index: int  # the mutation's position in mutmut's order for this file
    line: int
    mutation: str  # `original ⟶ mutant`, the changed source lines stripped
    code: str  # the whole mutated file
    equivalent_because: str = ""  # set when a rule proves the mutant equivalent (not run)
    # The lines of the changed expression: a condition over several lines stops at its first
    # false part, so the tests that reach the changed line may be none of those it matters to.
    spans_lines: tuple[int, int] = (0, 0)


@dataclass
class FileResult:
    file: str
    generated: int
    killed: list[tuple[Mutant, str]] = field(default_factory=list)  # with how
    survived: list[tuple[Mutant, str]] = field(default_factory=list)  # with why
    equivalent: list[Mutant] = field(default_factory=list)

    @property
    def tried(self) -> int:
        return len(self.killed) + len(self.survived)

    @property
    def score(self) -> float:
        return round(len(self.killed) / self.tried, 4) if self.tried else 0.0


# -- which mutants -------------------------------------------------------------------------------


def default_files(root: Path) -> list[str]:
    found: list[str] = []
    for pattern in DEFAULT_PATTERNS:
        for path in sorted(root.glob(pattern)):
            relative = path.relative_to(root).as_posix()
            if (
                path.is_file()
                and path.name != "__init__.py"
                and relative not in DEFAULT_LEFT_OUT
                and relative not in found
            ):
                found.append(relative)
    return found


def generate(
    file: str,
    source: str,
    max_count: int,
    seed: int,
    keep: Callable[[Mutant], bool] | None = None,
    near_lines: set[int] | None = None,
) -> tuple[int, list[Mutant]]:
    """How many mutants mutmut makes inside the functions of `source`, and all of them or a
    seeded sample of `max_count` (in file order), each as a whole mutated file. The seed is
    mixed with the file's name so adding a file does not change another file's sample.
    `keep` picks mutants by their description (before sampling); `near_lines`, when given,
    renders only the mutations whose node spans one of those lines (a rerun's survivors), since
    rendering every mutant of a large file takes minutes."""
    module, mutations, _classes, _functions = create_mutations(file, source)
    parents = parent_map(module)
    avoided = avoided_nodes(module)
    # module level mutations are left out: mutmut does not run those either; nor are the
    # changes to logging calls and task names (`avoided_nodes`), as PIT's `avoidCallsTo`
    inside = [
        (index, mutation)
        for index, mutation in enumerate(mutations, start=1)
        if mutation.contained_by_top_level_function is not None
        and not is_avoided(mutation, avoided)
    ]
    total = len(inside)
    wrapper = libcst.metadata.MetadataWrapper(module, unsafe_skip_copy=True)
    spans = wrapper.resolve(libcst.metadata.PositionProvider)
    if near_lines is not None:
        inside = [
            (index, mutation)
            for index, mutation in inside
            if any(
                spans[mutation.original_node].start.line <= line
                and line <= spans[mutation.original_node].end.line
                for line in near_lines
            )
        ]
    if keep is not None:  # by description, so every mutant is rendered first (slow)
        rendered = [
            _render(file, module, source, index, mutation, parents, spans)
            for index, mutation in inside
        ]
        return total, _sample([m for m in rendered if keep(m)], max_count, seed, file)
    picked = _sample(inside, max_count, seed, file)
    return total, [
        _render(file, module, source, index, mutation, parents, spans) for index, mutation in picked
    ]


def _sample(items: list[T], max_count: int, seed: int, file: str) -> list[T]:
    if len(items) <= max_count:
        return items
    chosen = set(random.Random(f"{seed}:{file}").sample(range(len(items)), max_count))
    return [item for position, item in enumerate(items) if position in chosen]


def _render(
    file: str,
    module: libcst.Module,
    source: str,
    index: int,
    mutation: Mutation,
    parents: dict[int, libcst.CSTNode],
    spans: Mapping[libcst.CSTNode, libcst.metadata.CodeRange] | None = None,
) -> Mutant:
    mutated = module.deep_replace(mutation.original_node, mutation.mutated_node)
    assert isinstance(mutated, libcst.Module)
    line, text = describe(source, mutated.code)
    because = sql_case_only(mutation, parents)
    where = spans.get(mutation.original_node) if spans is not None else None
    lines = (where.start.line, where.end.line) if where is not None else (line, line)
    return Mutant(file, index, line, text, mutated.code, because, lines)


# -- mutants not made, mutants equivalent by rule -------------------------------------------------

# (a) Logging calls are not mutated, as PIT's default `avoidCallsTo` (java.util.logging, log4j,
# slf4j): what a log line says is for the operator reading it, and behaviour tests do not pin
# operator-facing text. Whether a failure is logged at all is kept observable: only the
# arguments and the call's own form are left alone, not the `except` around it.
LOGGER_NAMES = frozenset({"log", "logger", "_log", "_logger", "logging", "LOG", "LOGGER"})
LOGGING_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "exception", "critical", "log"}
)
# (c) The `name=` of a task or thread: checked, nothing in the product reads a task's or a
# thread's name (no `get_name()`, no `%(taskName)s`/`%(threadName)s` log format; only one test
# finds a feed's task by its name); it shows in debug dumps and reprs, so changing it is
# cosmetic. A name something did read would need a test instead.
NAMED_STARTERS = frozenset({"create_task", "ensure_future", "Thread", "Timer"})


def _callee(call: libcst.Call) -> tuple[str, str]:
    """(`owner`, `name`) of `owner.name(...)` (owner's last part: `self.log` -> `log`), or
    ("", name) of `name(...)`."""
    func = call.func
    if isinstance(func, libcst.Name):
        return "", func.value
    if isinstance(func, libcst.Attribute):
        owner = func.value
        if isinstance(owner, libcst.Attribute):
            return owner.attr.value, func.attr.value
        if isinstance(owner, libcst.Name):
            return owner.value, func.attr.value
        return "", func.attr.value
    return "", ""


def is_logging_call(call: libcst.Call) -> bool:
    owner, name = _callee(call)
    return owner in LOGGER_NAMES and name in LOGGING_METHODS


def is_named_starter(call: libcst.Call) -> bool:
    return _callee(call)[1] in NAMED_STARTERS


def _name_arg(arg: libcst.Arg) -> bool:
    return arg.keyword is not None and arg.keyword.value == "name"


class _Avoided(libcst.CSTVisitor):
    def __init__(self) -> None:
        self.ids: set[int] = set()

    def visit_Call(self, node: libcst.Call) -> None:
        if is_logging_call(node):
            self.ids.update(id(inner) for inner in _subtree(node))
        elif is_named_starter(node):
            for arg in node.args:
                if _name_arg(arg):
                    self.ids.update(id(inner) for inner in _subtree(arg))


def _subtree(node: libcst.CSTNode) -> list[libcst.CSTNode]:
    found = [node]
    for child in node.children:
        found += _subtree(child)
    return found


def avoided_nodes(module: libcst.Module) -> set[int]:
    """The ids of the nodes inside logging calls and inside the `name=` of task/thread starts."""
    visitor = _Avoided()
    module.visit(visitor)
    return visitor.ids


def is_avoided(mutation: Mutation, avoided: set[int]) -> bool:
    original, mutated = mutation.original_node, mutation.mutated_node
    if id(original) in avoided:
        return True
    # a dropped or changed argument mutates the whole call: avoided when only `name=` differs
    if (
        isinstance(original, libcst.Call)
        and isinstance(mutated, libcst.Call)
        and is_named_starter(original)
        and original.func.deep_equals(mutated.func)
    ):
        kept = [arg for arg in original.args if not _name_arg(arg)]
        others = [arg for arg in mutated.args if not _name_arg(arg)]
        return len(kept) == len(others) and all(
            _same_arg(a, b) for a, b in zip(kept, others, strict=True)
        )
    return False


def _same_arg(a: libcst.Arg, b: libcst.Arg) -> bool:
    keyword_a = a.keyword.value if a.keyword is not None else None
    keyword_b = b.keyword.value if b.keyword is not None else None
    return keyword_a == keyword_b and a.value.deep_equals(b.value)


class _Parents(libcst.CSTVisitor):
    def __init__(self) -> None:
        self.parents: dict[int, libcst.CSTNode] = {}

    def on_visit(self, node: libcst.CSTNode) -> bool:
        for child in node.children:
            self.parents[id(child)] = node
        return True


def parent_map(module: libcst.Module) -> dict[int, libcst.CSTNode]:
    visitor = _Parents()
    module.visit(visitor)
    return visitor.parents


# (b) SQLite and PostgreSQL read unquoted keywords and identifiers case-insensitively, so a
# string mutant that only changes the letter case of SQL cannot change what the database
# does. Quoted parts ('text' literals, "quoted" identifiers) must stay exactly as they were:
# `state = 'pending'` -> `'PENDING'` is a real change. SQL is recognised by an upper-case
# keyword in the string or in the concatenation it belongs to (a column list continued over
# lines), or by a bound parameter after a comparison (`at >= ?`, `id = $1`).
SQL_KEYWORDS = re.compile(
    r"\b(SELECT|INSERT|UPDATE|DELETE|FROM|WHERE|VALUES|SET|JOIN|PRAGMA|BEGIN|COMMIT|ROLLBACK|"
    r"RELEASE|SAVEPOINT|CREATE|DROP|ALTER|RETURNING|CONFLICT|ORDER BY|GROUP BY|LIMIT)\b"
)
SQL_PARAMETER = re.compile(r"(=|<|>|\bIN|\bLIKE)\s*\(?\s*(\?|\$\d+|%s)", re.IGNORECASE)
SQL_QUOTED = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")
SQL_CASE_REASON = (
    "only the letter case of SQL changes (keywords and unquoted names are case-insensitive)"
)


def looks_like_sql(text: str) -> bool:
    return bool(SQL_KEYWORDS.search(text) or SQL_PARAMETER.search(text))


def same_sql_ignoring_case(original: str, mutant: str) -> bool:
    if original == mutant or original.upper() != mutant.upper():
        return False
    if SQL_QUOTED.findall(original) != SQL_QUOTED.findall(mutant):
        return False  # a quoted literal or identifier changed case: a different value
    return SQL_QUOTED.sub("''", original).upper() == SQL_QUOTED.sub("''", mutant).upper()


def sql_case_only(mutation: Mutation, parents: dict[int, libcst.CSTNode]) -> str:
    """The reason when `mutation` only changes the case of an SQL string, else ""."""
    original, mutated = mutation.original_node, mutation.mutated_node
    if not (isinstance(original, libcst.SimpleString) and isinstance(mutated, libcst.SimpleString)):
        return ""
    before, after = original.evaluated_value, mutated.evaluated_value
    if not (isinstance(before, str) and isinstance(after, str)):
        return ""
    if not same_sql_ignoring_case(before, after):
        return ""
    text = before
    node: libcst.CSTNode = original
    while isinstance(parent := parents.get(id(node)), libcst.ConcatenatedString):
        node = parent
        joined = parent.evaluated_value
        text = joined if isinstance(joined, str) else text
    return SQL_CASE_REASON if looks_like_sql(text) else ""


def describe(original: str, mutated: str) -> tuple[int, str]:
    """The first changed line of `original` and `original ⟶ mutant` for the changed lines."""
    before, after = original.splitlines(), mutated.splitlines()
    removed: list[str] = []
    added: list[str] = []
    first: int | None = None
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, a_start, a_end, b_start, b_end in matcher.get_opcodes():
        if tag == "equal":
            continue
        if first is None:
            first = a_start
        removed += [text.strip() for text in before[a_start:a_end]]
        added += [text.strip() for text in after[b_start:b_end]]
    text = f"{' '.join(removed) or '(nothing)'} {ARROW} {' '.join(added) or '(removed)'}"
    return (first or 0) + 1, text


def survivors_of(report: Path) -> set[tuple[str, str]]:
    """(`file:line`, mutation) of each survivor listed in an earlier run's output (of the
    same source: the line tells apart identical changes on different lines)."""
    found: set[tuple[str, str]] = set()
    listing = False
    for line in report.read_text(encoding="utf-8").splitlines():
        if line.startswith("survivors in "):
            listing = True
        elif listing and line.startswith("  ") and ARROW in line:
            location, _, mutation = line.strip().partition(": ")
            mutation = mutation.split("  [", 1)[0].strip()
            found.add((location, mutation))
        else:
            listing = False
    return found


def load_equivalents(path: Path) -> dict[tuple[str, str], str]:
    """`file:line: original ⟶ mutant — reason` lines; '#' comments. Keyed by `file:line`
    and the change: the same change elsewhere in the file may well be detectable (after an
    edit moves lines, the entries need their line updating)."""
    entries: dict[tuple[str, str], str] = {}
    if not path.exists():
        return entries
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        location, sep, rest = line.partition(": ")
        mutation, dash, reason = rest.rpartition(" — ")
        _file, colon, line_number = location.rpartition(":")
        if not (sep and dash and colon and line_number.isdigit() and reason.strip()):
            raise ValueError(f"{path}:{number}: expected `file:line: a {ARROW} b — reason`")
        if ARROW not in mutation:
            raise ValueError(f"{path}:{number}: expected `file:line: a {ARROW} b — reason`")
        entries[(location, mutation.strip())] = reason.strip()
    return entries


# -- the scratch copies --------------------------------------------------------------------------


def copy_checkout(root: Path, target: Path) -> None:
    """Tracked and untracked (not ignored) files: what the developer sees, uncommitted
    changes included."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for relative in filter(None, listing.split("\0")):
        source = root / relative
        if source.is_file():
            destination = target / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
    # mutmut's generator reads its (empty) settings from the working directory
    with (target / "pyproject.toml").open("a", encoding="utf-8") as config:
        config.write('\n[tool.mutmut]\nsource_paths = ["core"]\n')


def test_environment(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(copy)  # the copy's packages, not the worktree's editable install
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a mutant of the same size and second is not stale
    return env


@dataclass(frozen=True)
class Coverage:
    tests_by_line: dict[str, dict[int, set[str]]]  # file -> line -> pytest node ids
    seconds_by_test: dict[str, float]


def measure_coverage(
    copy: Path, files: Sequence[str], tests: Sequence[str], saved: Path | None = None
) -> Coverage:
    """Run the selected tests once under coverage.py, recording which test ran each line
    (see `devtools.mutation_contexts`) and how long each took. `saved` (a folder): the
    measurement kept there is used if there is one, else this one is kept there: for a run
    stopped and started again on the same code and tests (the clean run is minutes)."""
    from coverage import CoverageData

    data_file = copy / ".mutation-coverage"
    durations = copy / ".mutation-durations.json"
    if saved is not None and (saved / data_file.name).is_file():
        shutil.copy(saved / data_file.name, data_file)
        shutil.copy(saved / durations.name, durations)
    else:
        _clean_run(copy, files, tests, data_file, durations)
        if saved is not None:
            saved.mkdir(parents=True, exist_ok=True)
            shutil.copy(data_file, saved / data_file.name)
            shutil.copy(durations, saved / durations.name)
    data = CoverageData(basename=str(data_file))
    data.read()
    seconds: dict[str, float] = json.loads(durations.read_text(encoding="utf-8"))
    measured = {path.replace(os.sep, "/"): path for path in data.measured_files()}
    tests_by_line: dict[str, dict[int, set[str]]] = {}
    for file in files:
        # by the file's path in the copy that was measured (a kept measurement: another copy)
        where = next((path for key, path in measured.items() if key.endswith(f"/{file}")), "")
        by_line = data.contexts_by_lineno(where) if where else {}
        tests_by_line[file] = {
            line: {context for context in contexts if context} for line, contexts in by_line.items()
        }
        # Lines run only while the module was imported (class bodies, enum values, defaults)
        # are in effect for every test, not only for the one that happened to import it first
        # (a lazy import inside a test records that test alone); a test may read an enum's
        # values without running any line of the module, so "the tests that ran a line of
        # this file" is not enough either.
        users: set[str] = set(seconds) | set().union(*tests_by_line[file].values())
        source = (copy / file).read_text(encoding="utf-8")
        in_functions = function_body_lines(source)
        # A line inside a long statement (a string of SQL continued over 20 lines) has no
        # bytecode of its own: it takes the tests of the statement it belongs to.
        for first, last in simple_statement_spans(source):
            if first in tests_by_line[file]:
                for line in range(first + 1, last + 1):
                    tests_by_line[file].setdefault(line, tests_by_line[file][first])
        for line, ran in tests_by_line[file].items():
            if not ran or line not in in_functions:
                ran.update(users)
    return Coverage(tests_by_line, seconds)


def _clean_run(
    copy: Path, files: Sequence[str], tests: Sequence[str], data_file: Path, durations: Path
) -> None:
    command = [
        sys.executable,
        "-m",
        "coverage",
        "run",
        f"--data-file={data_file}",
        f"--include={','.join(files)}",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "devtools.mutation_contexts",
        *tests,
    ]
    env = {**test_environment(copy), "MUTATION_DURATIONS": str(durations)}
    completed = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True)
    if completed.returncode != 0:
        log = Path(tempfile.gettempdir()) / "teammate-mutation-clean-run.log"
        log.write_text(completed.stdout + completed.stderr, encoding="utf-8")
        failed = [line for line in completed.stdout.splitlines() if line.startswith("FAILED")]
        raise SystemExit(
            f"the tests fail without any mutant (whole output in {log}); fix them first:\n"
            + "\n".join(failed or completed.stdout.splitlines()[-20:])
        )


def simple_statement_spans(source: str) -> list[tuple[int, int]]:
    """(first line, last line) of every statement without a body of its own."""
    spans: list[tuple[int, int]] = []
    for node in ast.walk(ast.parse(source)):
        last = getattr(node, "end_lineno", None)
        if isinstance(node, ast.stmt) and not hasattr(node, "body") and last and last > node.lineno:
            spans.append((node.lineno, last))
    return spans


def function_body_lines(source: str) -> set[int]:
    """The lines inside the bodies of functions (which run when called, not when imported)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            body = node.body if isinstance(node.body, list) else [node.body]
            end = node.end_lineno or body[-1].lineno
            lines.update(range(body[0].lineno, end + 1))
    return lines


# -- running mutants -----------------------------------------------------------------------------


class Server:
    """A `devtools.mutation_server` in one scratch copy: runs tests in a forked child."""

    def __init__(self, copy: Path) -> None:
        self.copy = copy
        self._log = (copy / ".mutation-server.log").open("wb")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "devtools.mutation_server"],
            cwd=copy,
            env=test_environment(copy),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        self._receive()  # ready once everything is imported

    def run(
        self, tests: Sequence[str], limit_s: float, per_test_s: dict[str, float] | None = None
    ) -> tuple[str, str]:
        """('killed' | 'survived', how): the tests, stopping at the first failure; a test
        that outlives its own limit in `per_test_s` (a hang) kills the mutant at once."""
        assert self._process.stdin is not None
        request = {"tests": list(tests), "limit_s": limit_s, "per_test_s": per_test_s or {}}
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        answer = self._receive()
        return str(answer["verdict"]), str(answer["how"])

    def _receive(self) -> dict[str, object]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            log = (self.copy / ".mutation-server.log").read_text(errors="replace")[-2000:]
            raise SystemExit(f"the mutation test server stopped:\n{log}")
        answer: dict[str, object] = json.loads(line)
        return answer

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()


def run_mutant(server: Server, mutant: Mutant, coverage: Coverage) -> tuple[str, str]:
    by_line = coverage.tests_by_line.get(mutant.file, {})
    # A line without bytecode of its own (a closing bracket, a continued expression) takes the
    # tests of the statement it continues.
    line = next((n for n in range(mutant.line, mutant.line - 6, -1) if n in by_line), mutant.line)
    # and the tests of every line of the changed expression (see `Mutant.spans_lines`)
    first, last = mutant.spans_lines
    reached = set(by_line.get(line, set())).union(
        *(by_line.get(n, set()) for n in range(first, last + 1))
    )
    tests = sorted(reached, key=lambda node: coverage.seconds_by_test.get(node, 0.0))
    if not tests:
        return "survived", "no test runs this line"
    limit = TIME_LIMIT_FLOOR_S + TIME_LIMIT_FACTOR * sum(
        coverage.seconds_by_test.get(node, 1.0) for node in tests
    )
    per_test = {node: per_test_limit_s(coverage.seconds_by_test.get(node, 1.0)) for node in tests}
    target = server.copy / mutant.file
    original = target.read_text(encoding="utf-8")
    try:
        target.write_text(mutant.code, encoding="utf-8")
        return server.run(tests, limit, per_test)
    finally:
        target.write_text(original, encoding="utf-8")


def per_test_limit_s(clean_seconds: float) -> float:
    """How long one test may take under a mutant before the mutant counts as a hang (killed)."""
    return TIME_LIMIT_FLOOR_S + TIME_LIMIT_FACTOR * clean_seconds


def check_mutants_are_seen(server: Server, file: str, coverage: Coverage) -> None:
    """A broken file must fail its tests: proves the tests import the copy being mutated."""
    # The test running the most of its lines: one that surely imports it (every test of the
    # selection is credited with the lines run at import, even one that never imports it).
    runs = Counter(
        node for nodes in coverage.tests_by_line.get(file, {}).values() for node in nodes
    )
    tests = [node for node, _count in runs.most_common(1)]
    if not tests:
        return
    target = server.copy / file
    original = target.read_text(encoding="utf-8")
    try:
        target.write_text('raise RuntimeError("mutation: sanity check")\n' + original)
        verdict, _how = server.run(tests[:1], 120)
    finally:
        target.write_text(original, encoding="utf-8")
    if verdict != "killed":
        raise SystemExit(f"tests of {file} do not import the mutated copy; cannot measure")


def run_all(
    servers: Sequence[Server],
    mutants: Sequence[Mutant],
    coverage: Coverage,
    progress: Callable[[Mutant, str, str], None],
) -> dict[tuple[str, int], tuple[str, str]]:
    free: queue.Queue[Server] = queue.Queue()
    for server in servers:
        free.put(server)
    lock = threading.Lock()
    verdicts: dict[tuple[str, int], tuple[str, str]] = {}

    def one(mutant: Mutant) -> None:
        server = free.get()
        try:
            verdict = run_mutant(server, mutant, coverage)
        finally:
            free.put(server)
        with lock:
            verdicts[(mutant.file, mutant.index)] = verdict
            progress(mutant, *verdict)

    with ThreadPoolExecutor(max_workers=len(servers)) as pool:
        for future in [pool.submit(one, mutant) for mutant in mutants]:
            future.result()
    return verdicts


# -- the report ----------------------------------------------------------------------------------


def tally(
    files: Sequence[str],
    generated: dict[str, int],
    sampled: Sequence[Mutant],
    verdicts: dict[tuple[str, int], tuple[str, str]],
    equivalents: dict[tuple[str, str], str],
) -> list[FileResult]:
    results = {file: FileResult(file=file, generated=generated[file]) for file in files}
    for mutant in sampled:
        result = results[mutant.file]
        if mutant.equivalent_because or (
            (f"{mutant.file}:{mutant.line}", mutant.mutation) in equivalents
        ):
            result.equivalent.append(mutant)
            continue
        verdict, how = verdicts[(mutant.file, mutant.index)]
        (result.killed if verdict == "killed" else result.survived).append((mutant, how))
    return list(results.values())


def report(results: Sequence[FileResult], conditions: str) -> dict[str, float]:
    print(conditions)
    print()
    print(
        f"{'file':<28} {'mutants':>8} {'tried':>6} {'killed':>7} {'survived':>9} "
        f"{'equiv.':>7} {'score':>7}"
    )
    for result in results:
        print(
            f"{result.file:<28} {result.generated:>8} {result.tried:>6} {len(result.killed):>7} "
            f"{len(result.survived):>9} {len(result.equivalent):>7} {result.score:>7.1%}"
        )
    for result in results:
        by_rule = [mutant for mutant in result.equivalent if mutant.equivalent_because]
        if by_rule:
            print(f"\nequivalent by rule in {result.file} (not run):")
            for mutant in by_rule:
                because = mutant.equivalent_because
                print(f"  {mutant.file}:{mutant.line}: {mutant.mutation} — {because}")
    for result in results:
        if result.survived:
            print(f"\nsurvivors in {result.file}:")
            for mutant, how in sorted(result.survived, key=lambda item: item[0].line):
                note = "" if how == "tests pass" else f"  [{how}]"
                print(f"  {mutant.file}:{mutant.line}: {mutant.mutation}{note}")
    return {result.file: result.score for result in results}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/mutation", description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="files to mutate (default: the core set)")
    parser.add_argument("--max-per-file", type=int, default=100, help="sample size per file")
    parser.add_argument("--seed", type=int, default=1, help="seed of the sample")
    parser.add_argument("--workers", type=int, default=2, help="mutants run at once")
    parser.add_argument("--tests", nargs="+", default=["tests"], help="pytest selection")
    parser.add_argument("--equivalents", type=Path, default=EQUIVALENTS)
    parser.add_argument("--match", default="", help="only mutants whose `line: change` has this")
    parser.add_argument(
        "--rerun", type=Path, help="only the survivors listed in this earlier output"
    )
    parser.add_argument("--list", action="store_true", help="list the sample; run nothing")
    parser.add_argument(
        "--keep-coverage",
        type=Path,
        help="folder: reuse the clean run's coverage kept there, else keep it there "
        "(only for the same code and tests)",
    )
    args = parser.parse_args(argv)

    rerun = survivors_of(args.rerun) if args.rerun else None
    files = [Path(file).as_posix() for file in args.files]
    files = files or sorted({place.rpartition(":")[0] for place, _ in rerun or ()})
    files = files or default_files(ROOT)
    keep: Callable[[Mutant], bool] | None = None
    if rerun is not None or args.match:

        def keep(mutant: Mutant) -> bool:
            listed = rerun is None or (f"{mutant.file}:{mutant.line}", mutant.mutation) in rerun
            return listed and args.match in f"{mutant.line}: {mutant.mutation}"

    missing = [file for file in files if not (ROOT / file).is_file()]
    if missing or not files:
        parser.error(f"no such file: {', '.join(missing)}" if missing else "no files to mutate")
    equivalents = load_equivalents(args.equivalents)
    started = time.monotonic()

    scratch = Path(tempfile.mkdtemp(prefix="teammate-mutation-"))
    try:
        copies = [scratch / f"worker-{number}" for number in range(max(args.workers, 1))]
        for copy in copies:
            copy_checkout(ROOT, copy)
        os.chdir(copies[0])  # mutmut's generator reads its settings from here
        generated: dict[str, int] = {}
        sampled: list[Mutant] = []
        for file in files:
            source = (ROOT / file).read_text(encoding="utf-8")
            near = None
            if rerun is not None:  # only the survivors' lines need rendering
                near = {
                    int(place.rpartition(":")[2])
                    for place, _ in rerun
                    if place.startswith(f"{file}:")
                }
            generated[file], mutants = generate(
                file, source, args.max_per_file, args.seed, keep, near
            )
            sampled += mutants
        os.chdir(ROOT)
        if args.list:
            for mutant in sampled:
                because = f" — {mutant.equivalent_because}" if mutant.equivalent_because else ""
                print(f"{mutant.file}:{mutant.line}: {mutant.mutation}{because}")
            return 0
        print(
            f"mutation: measuring coverage of {' '.join(files)} by {' '.join(args.tests)}…",
            flush=True,
        )
        coverage = measure_coverage(copies[0], files, args.tests, args.keep_coverage)
        servers = [Server(copy) for copy in copies]
        try:
            for file in files:
                check_mutants_are_seen(servers[0], file, coverage)
            to_run = [mutant for mutant in sampled if not mutant.equivalent_because]
            print(f"mutation: running {len(to_run)} mutants on {len(copies)} workers…", flush=True)

            def progress(mutant: Mutant, verdict: str, how: str) -> None:
                print("." if verdict == "killed" else "S", end="", flush=True)
                if verdict != "killed":  # at once, to work on while the run goes on
                    place = f"{mutant.file}:{mutant.line}: {mutant.mutation}"
                    print(f"\n  survived: {place}", file=sys.stderr, flush=True)

            verdicts = run_all(servers, to_run, coverage, progress)
            print()
        finally:
            for server in servers:
                server.close()
    finally:
        os.chdir(ROOT)
        shutil.rmtree(scratch, ignore_errors=True)

    results = tally(files, generated, sampled, verdicts, equivalents)
    conditions = (
        f"mutmut {_version('mutmut')} mutants, coverage.py {_version('coverage')} contexts; "
        f"sample <= {args.max_per_file} per file, seed {args.seed}, {len(copies)} workers; "
        f"tests {' '.join(args.tests)}; equivalents {args.equivalents.name} and SQL case rule; "
        "logging calls and task names not mutated; "
        f"{os.cpu_count()} CPUs; {time.monotonic() - started:.0f} s"
    )
    scores = report(results, conditions)
    print(json.dumps({"mutation_score": scores}))
    return 0


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


if __name__ == "__main__":
    sys.exit(main())
