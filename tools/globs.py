"""Glob patterns as `find` and `grep` understand them, matched in linear time.

Owns: `compile_glob` (a glob → a matcher on workspace-relative paths).

Glob rules (the same as ripgrep's `--glob`): a pattern without '/' matches a name at any depth
(`*.py`); a pattern with '/' matches the whole path relative to the search directory
(`src/**/test_*.py`). `*` and `?` never cross '/', `**` crosses any number of directories,
`[abc]` is a character class and `{a,b}` an alternation.

Why not `fnmatch`/`re`: a glob turned into a backtracking regex is exponential in the number
of stars (`*a*a*a*a*b` against a long name took seconds, one more `*a` minutes), and `find`
runs it on every name in the tree. Here a glob becomes a small NFA (Thompson's construction)
that is simulated over the name one character at a time, caching the sets of states it meets
(a lazily built DFA). Every name costs at most len(name) × (states) steps, whatever the
pattern; `GlobMatcher.steps` counts them, so tests can bound the work without timing it.

Must not: import anything of ours outside `core`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from core.tools import ToolError

MAX_GLOB_CHARS = 1000
MAX_BRACE_DEPTH = 10
MAX_CACHED_STATES = 4096

# Pattern items. A predicate decides whether one character may be consumed.
Pred = Callable[[str], bool]


@dataclass(frozen=True, slots=True)
class _Char:
    pred: Pred


@dataclass(frozen=True, slots=True)
class _Star:
    cross_slash: bool  # '**' crosses '/', '*' does not


@dataclass(frozen=True, slots=True)
class _AnyDirs:
    """'**/': nothing, or any path ending in '/'."""


@dataclass(frozen=True, slots=True)
class _Alt:
    choices: list[list[_Item]]


_Item = _Char | _Star | _AnyDirs | _Alt


def _not_slash(ch: str) -> bool:
    return ch != "/"


def _any(ch: str) -> bool:
    return True


def _literal(expected: str) -> Pred:
    return expected.__eq__


def _class(ranges: list[tuple[str, str]], negated: bool) -> Pred:
    def pred(ch: str) -> bool:
        if ch == "/":
            return False
        inside = any(low <= ch <= high for low, high in ranges)
        return inside != negated

    return pred


def _parse_class(pattern: str, i: int) -> tuple[Pred, int] | None:
    """The class starting at `pattern[i] == '['` and the index after it, or None if unclosed."""
    j = i + 1
    negated = j < len(pattern) and pattern[j] in "!^"
    if negated:
        j += 1
    start = j
    ranges: list[tuple[str, str]] = []
    while j < len(pattern):
        ch = pattern[j]
        if ch == "]" and j > start:
            return _class(ranges, negated), j + 1
        if j + 2 < len(pattern) and pattern[j + 1] == "-" and pattern[j + 2] != "]":
            ranges.append((ch, pattern[j + 2]))
            j += 3
        else:
            ranges.append((ch, ch))
            j += 1
    return None


def _parse(pattern: str, i: int, depth: int) -> tuple[list[_Item], int]:
    items: list[_Item] = []
    n = len(pattern)
    while i < n:
        ch = pattern[i]
        if depth and ch in ",}":
            return items, i
        if ch == "*":
            if pattern.startswith("**", i):
                i += 2
                if i < n and pattern[i] == "/":
                    items.append(_AnyDirs())
                    i += 1
                else:
                    items.append(_Star(cross_slash=True))
                continue
            items.append(_Star(cross_slash=False))
        elif ch == "?":
            items.append(_Char(_not_slash))
        elif ch == "[":
            parsed = _parse_class(pattern, i)
            if parsed is None:
                items.append(_Char(_literal(ch)))
            else:
                items.append(_Char(parsed[0]))
                i = parsed[1]
                continue
        elif ch == "{":
            if depth >= MAX_BRACE_DEPTH:
                raise ToolError(f"The glob nests braces more than {MAX_BRACE_DEPTH} deep.")
            choices: list[list[_Item]] = []
            i += 1
            while True:
                choice, i = _parse(pattern, i, depth + 1)
                choices.append(choice)
                if i >= n:
                    break  # an unclosed '{' closes at the end
                i += 1
                if pattern[i - 1] == "}":
                    break
            items.append(_Alt(choices))
            continue
        else:
            items.append(_Char(_literal(ch)))
        i += 1
    return items, i


@dataclass(slots=True)
class _Nfa:
    """Nodes: a predicate node (`pred[i]` set, one successor `out1[i]`), a split (`pred[i]` is
    None, successors `out1[i]` and `out2[i]`), or the accepting node."""

    pred: list[Pred | None] = field(default_factory=list)
    out1: list[int] = field(default_factory=list)
    out2: list[int] = field(default_factory=list)

    def node(self, pred: Pred | None, out1: int = -1, out2: int = -1) -> int:
        self.pred.append(pred)
        self.out1.append(out1)
        self.out2.append(out2)
        return len(self.pred) - 1

    def build(self, items: list[_Item], after: int) -> int:
        """The start node of `items` followed by node `after` (built back to front)."""
        nxt = after
        for item in reversed(items):
            if isinstance(item, _Char):
                nxt = self.node(item.pred, nxt)
            elif isinstance(item, _Star):
                loop = self.node(None, -1, nxt)
                self.out1[loop] = self.node(_any if item.cross_slash else _not_slash, loop)
                nxt = loop
            elif isinstance(item, _AnyDirs):
                slash = self.node(_literal("/"), nxt)
                loop = self.node(None, -1, slash)
                self.out1[loop] = self.node(_any, loop)
                nxt = self.node(None, loop, nxt)
            else:
                starts = [self.build(choice, nxt) for choice in item.choices]
                head = starts[-1]
                for start in reversed(starts[:-1]):
                    head = self.node(None, start, head)
                nxt = head
        return nxt


class GlobMatcher:
    """A compiled glob: call it with a '/'-separated path relative to the search directory."""

    def __init__(self, pattern: str) -> None:
        if len(pattern) > MAX_GLOB_CHARS:
            raise ToolError(f"The glob is too long ({len(pattern)} characters; at most 1000).")
        pattern = pattern.removeprefix("./")
        self.anchored = "/" in pattern.rstrip("/")
        items, _ = _parse(pattern.rstrip("/"), 0, 0)
        self.steps = 0  # work done so far, in NFA node visits and cached moves
        self._nfa = _Nfa()
        self._accept = self._nfa.node(None)
        self._start = self._closure([self._nfa.build(items, self._accept)])
        self._moves: dict[tuple[frozenset[int], str], frozenset[int]] = {}

    def _closure(self, nodes: list[int]) -> frozenset[int]:
        """The predicate nodes and the accepting node reachable from `nodes` without input."""
        nfa, seen, todo = self._nfa, set(), list(nodes)
        found: set[int] = set()
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            self.steps += 1
            if nfa.pred[node] is not None or node == self._accept:
                found.add(node)
            else:
                todo.append(nfa.out1[node])
                todo.append(nfa.out2[node])
        return frozenset(found)

    def _move(self, state: frozenset[int], ch: str) -> frozenset[int]:
        key = (state, ch)
        cached = self._moves.get(key)
        self.steps += 1
        if cached is not None:
            return cached
        nfa = self._nfa
        targets = []
        for node in state:
            pred = nfa.pred[node]
            self.steps += 1
            if pred is not None and pred(ch):
                targets.append(nfa.out1[node])
        result = self._closure(targets)
        if len(self._moves) < MAX_CACHED_STATES:
            self._moves[key] = result
        return result

    def __call__(self, relative: str) -> bool:
        target = relative if self.anchored else relative.rsplit("/", 1)[-1]
        state = self._start
        for ch in target:
            state = self._move(state, ch)
            if not state:
                return False
        return self._accept in state


def compile_glob(pattern: str) -> GlobMatcher:
    """A matcher for '/'-separated paths relative to the search directory."""
    return GlobMatcher(pattern)
