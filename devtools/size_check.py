"""`python -m devtools.size_check`: no module, class or function of the application grows too big.

The limits (`LIMITS`): a module at most 500 lines, a class at most 400, a function or method at
most 80, in the application packages (`PACKAGES`: core, tools, storage, bots; not the tests,
benchmarks or devtools). A module's size is its line count; a class's or function's is its span,
`end_lineno - lineno + 1` of its `ast` node (the `def`/`class` line to the last line of its body,
decorators not counted; a nested function counts in the one around it and on its own). A class
or function is named by its qualified name in the module (`Runner.handle`, `outer.inner`); two
with the same name (a property's getter and setter) are measured as the larger one.

The allow-list (`devtools/size_allowlist.toml`) names what may exceed its limit for now, each
with its size when it was recorded and the reason. The check fails on:
- a new offender: over its limit and not in the allow-list;
- an allowed offender that grew past its recorded size (the list may only shrink);
- a stale entry: what it names is within its limit now, or gone (remove the entry);
- an entry without a reason.
An allowed offender that shrank passes; `--tighten` rewrites the allow-list with the sizes of
now and without the stale entries (it never adds one). One line per violation:
`path: what is N lines (limit L; ...)`. Exits 0 when clean, 1 on violations, 2 on a bad
allow-list.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOWLIST = ROOT / "devtools" / "size_allowlist.toml"
PACKAGES = ("core", "tools", "storage", "bots")
LIMITS = {"module": 500, "class": 400, "function": 80}

HEADER = """\
# What may exceed devtools/size_check.py's limits for now (module 500 lines, class 400,
# function or method 80), each at most at the size recorded here: the list may only shrink.
# `python -m devtools.size_check --tighten` lowers the sizes to today's and drops the entries
# that are within their limit now. Do not add an entry: split the code instead.
# what = "module", "class <qualified name>" or "function <qualified name>".
"""


@dataclass(frozen=True)
class Allowed:
    path: str
    what: str
    size: int
    reason: str


class AllowlistError(ValueError):
    """The allow-list cannot be read or an entry is malformed."""


def kind_of(what: str) -> str:
    return what.split(" ", 1)[0]


def measure_source(text: str) -> dict[str, int]:
    """`what` -> size for the module and every class and function in it."""
    sizes = {"module": len(text.splitlines())}
    tree = ast.parse(text)

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                span = (child.end_lineno or child.lineno) - child.lineno + 1
                what = f"{kind} {name}"
                sizes[what] = max(span, sizes.get(what, 0))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return sizes


def application_files(root: Path) -> list[Path]:
    return sorted(p for package in PACKAGES for p in (root / package).rglob("*.py"))


def measure_tree(root: Path) -> dict[tuple[str, str], int]:
    """(path, what) -> size over the application packages under `root`."""
    sizes: dict[tuple[str, str], int] = {}
    for file in application_files(root):
        path = file.relative_to(root).as_posix()
        for what, size in measure_source(file.read_text(encoding="utf-8")).items():
            sizes[(path, what)] = size
    return sizes


def offenders(sizes: dict[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    return {key: size for key, size in sizes.items() if size > LIMITS[kind_of(key[1])]}


def load_allowlist(file: Path) -> dict[tuple[str, str], Allowed]:
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as error:
        raise AllowlistError(f"{file}: {error}") from error
    entries = data.get("allow", [])
    if not isinstance(entries, list):
        raise AllowlistError(f"{file}: `allow` must be an array of tables")
    allowed: dict[tuple[str, str], Allowed] = {}
    for number, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            raise AllowlistError(f"{file}: entry {number} is not a table")
        path, what, size = entry.get("path"), entry.get("what"), entry.get("size")
        reason = entry.get("reason", "")
        if not (isinstance(path, str) and isinstance(what, str) and kind_of(what) in LIMITS):
            raise AllowlistError(f"{file}: entry {number} needs a path and a what")
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise AllowlistError(f"{file}: entry {number} ({path}: {what}) needs a size")
        if not isinstance(reason, str):
            raise AllowlistError(f"{file}: entry {number} ({path}: {what}): reason not a string")
        if (path, what) in allowed:
            raise AllowlistError(f"{file}: {path}: {what} is listed twice")
        allowed[(path, what)] = Allowed(path, what, size, reason.strip())
    return allowed


def render_allowlist(entries: Iterable[Allowed]) -> str:
    lines = [HEADER, "allow = ["]
    for e in sorted(entries, key=lambda e: (e.path, e.what)):
        fields = (
            f"path = {json.dumps(e.path)}, what = {json.dumps(e.what)}, "
            f"size = {e.size}, reason = {json.dumps(e.reason)}"
        )
        lines.append(f"    {{ {fields} }},")
    lines.append("]")
    return "\n".join(lines) + "\n"


@dataclass
class Report:
    violations: list[str]
    shrunk: list[Allowed]  # allowed offenders now smaller than recorded (they pass)


def check(sizes: dict[tuple[str, str], int], allowed: dict[tuple[str, str], Allowed]) -> Report:
    violations: list[str] = []
    shrunk: list[Allowed] = []
    over = offenders(sizes)
    for (path, what), size in sorted(over.items()):
        limit = LIMITS[kind_of(what)]
        entry = allowed.get((path, what))
        if entry is None:
            violations.append(f"{path}: {what} is {size} lines (limit {limit}): split it")
        elif size > entry.size:
            violations.append(
                f"{path}: {what} is {size} lines (limit {limit}; allowed at most {entry.size} "
                "while it is split, it may only shrink)"
            )
        elif size < entry.size:
            shrunk.append(Allowed(path, what, size, entry.reason))
    for (path, what), entry in sorted(allowed.items()):
        limit = LIMITS[kind_of(what)]
        if not entry.reason:
            violations.append(f"{path}: {what}: allow-list entry without a reason")
        if (path, what) in over:
            continue
        current = sizes.get((path, what))
        now = "gone" if current is None else f"{current} lines, within the limit {limit}"
        violations.append(f"{path}: {what} is {now}: remove its allow-list entry")
    return Report(violations, shrunk)


def tightened(
    sizes: dict[tuple[str, str], int], allowed: dict[tuple[str, str], Allowed]
) -> list[Allowed]:
    """The allow-list at today's sizes, without the entries no longer needed; never one more."""
    over = offenders(sizes)
    return [
        Allowed(e.path, e.what, min(e.size, over[key]), e.reason)
        for key, e in allowed.items()
        if key in over
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.size_check",
        description="Module, class and function sizes of core, tools, storage and bots.",
    )
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    parser.add_argument("--allowlist", type=Path, default=None, metavar="FILE")
    parser.add_argument(
        "--tighten",
        action="store_true",
        help="rewrite the allow-list at today's sizes, dropping entries no longer needed",
    )
    args = parser.parse_args(argv)
    root: Path = args.root
    allowlist: Path = args.allowlist or root / "devtools" / "size_allowlist.toml"
    try:
        allowed = load_allowlist(allowlist)
    except AllowlistError as error:
        print(f"size check: {error}", file=sys.stderr)
        return 2
    sizes = measure_tree(root)
    if args.tighten:
        kept = tightened(sizes, allowed)
        allowlist.write_text(render_allowlist(kept), encoding="utf-8")
        print(f"size check: {allowlist} now has {len(kept)} entries (was {len(allowed)})")
        allowed = {(e.path, e.what): e for e in kept}
    report = check(sizes, allowed)
    for line in report.violations:
        print(line)
    if report.shrunk:
        print(
            f"size check: {len(report.shrunk)} allowed offenders shrank; "
            "`python -m devtools.size_check --tighten` records it"
        )
    if report.violations:
        print(f"size check: {len(report.violations)} violations", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
