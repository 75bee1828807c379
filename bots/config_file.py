"""The TOML configuration file as written: its parsed table, and where each key is.

Owns: reading the file once (`read_config`; a syntax error is one line naming the file, the
line and the column), finding the line a key path was written on (`ConfigFile.line_of`), and
showing a key path the way the file spells it (`key_path`: `channels."slack:T1:C1".model`).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_BARE = r"[A-Za-z0-9_-]+"
_KEY = rf"(?:{_BARE}|\"(?:[^\"\\]|\\.)*\"|'[^']*')"
_DOTTED = rf"{_KEY}(?:\s*\.\s*{_KEY})*"
_HEADER = re.compile(rf"^\s*\[\[?\s*({_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_ASSIGN = re.compile(rf"^\s*({_DOTTED})\s*=")
_SYNTAX_AT = re.compile(r"^(.*) \(at line (\d+), column (\d+)\)$")


class ConfigFileError(Exception):
    """The file cannot be read or is not TOML (one line naming it)."""


Path_ = tuple[str, ...]


@dataclass(frozen=True)
class ConfigFile:
    path: Path
    data: dict[str, Any]
    lines: dict[Path_, int] = field(default_factory=dict)  # key path (lowercased head) -> line

    def line_of(self, keys: Sequence[str | int]) -> int | None:
        """The line of the longest prefix of `keys` written in the file (a key inside an inline
        table is found as its table's line)."""
        wanted = _normal([str(k) for k in keys if not isinstance(k, int)])
        for end in range(len(wanted), 0, -1):
            found = self.lines.get(wanted[:end])
            if found is not None:
                return found
        return None

    def holds(self, keys: Sequence[str | int]) -> bool:
        """Whether the file sets this key path, or a table or value that contains it."""
        table: Any = self.data
        for depth, key in enumerate(keys):
            if not isinstance(table, dict) or isinstance(key, int):
                return depth > 0
            match = _find(table, str(key), top=depth == 0)
            if match is None:
                return False
            table = table[match]
        return True

    def where(self, keys: Sequence[str | int]) -> str:
        line = self.line_of(keys)
        return f"{self.path}, line {line}" if line is not None else str(self.path)


def _find(table: dict[str, Any], key: str, *, top: bool) -> str | None:
    if key in table:
        return key
    if top:  # top-level names are matched without regard to case, as pydantic-settings does
        return next((k for k in table if k.lower() == key.lower()), None)
    return None


def _normal(keys: Sequence[str]) -> Path_:
    return (keys[0].lower(), *keys[1:]) if keys else ()


def read_config(path: Path) -> ConfigFile:
    """The parsed file, or a `ConfigFileError` naming it (and the line and column of a
    syntax error)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path}: not UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = _SYNTAX_AT.match(str(exc))
        if found is None:
            raise ConfigFileError(f"{path}: not valid TOML: {exc}") from None
        reason, line, column = found.groups()
        raise ConfigFileError(
            f"{path}, line {line}, column {column}: not valid TOML: {reason}"
        ) from None
    except RecursionError:  # the parser recurses per level of nesting
        raise ConfigFileError(f"{path}: values nested too deeply") from None
    return ConfigFile(path, data, _key_lines(text))


def _key_lines(text: str) -> dict[Path_, int]:
    """Each key path's first line: table headers, and `key = value` lines within a table."""
    lines: dict[Path_, int] = {}
    table: Path_ = ()
    open_quote: str | None = None  # inside a multi-line string
    for number, line in enumerate(text.splitlines(), start=1):
        if open_quote is not None:
            if line.count(open_quote) % 2 == 1:
                open_quote = None
            continue
        header = _HEADER.match(line)
        if header is not None:
            table = _normal(_split(header.group(1)))
            lines.setdefault(table, number)
            continue
        assign = _ASSIGN.match(line)
        if assign is not None:
            lines.setdefault(_normal([*table, *_split(assign.group(1))]), number)
        for quote in ('"""', "'''"):
            if line.count(quote) % 2 == 1:
                open_quote = quote
    return lines


def _split(dotted: str) -> list[str]:
    keys = []
    for key in re.findall(_KEY, dotted):
        if key.startswith('"'):
            try:
                keys.append(json.loads(key))
            except ValueError:  # a TOML escape JSON lacks (\\UXXXXXXXX)
                keys.append(key[1:-1])
        elif key.startswith("'"):
            keys.append(key[1:-1])
        else:
            keys.append(key)
    return keys


def key_path(keys: Sequence[str | int]) -> str:
    """`budgets.channel_usd_per_day`, `channels."slack:T1:C1".model`, `tools.enabled[0]`."""
    shown = ""
    for key in keys:
        if isinstance(key, int):
            shown += f"[{key}]"
            continue
        part = key if re.fullmatch(_BARE, key) else json.dumps(key)
        shown += f".{part}" if shown else part
    return shown
