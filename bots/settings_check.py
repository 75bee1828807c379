"""What is not a setting, and where a bad value was written: the checks behind
`bots.settings.load_settings`'s one-line errors (issue 28).

Owns: refusing a key or section of the TOML file that no setting has, and a `TEAMMATE_*`
variable (environment or `.env`) that names none, each as one line naming it, where it was
found and the nearest setting; `NOT_SETTINGS`, the `TEAMMATE_*` variables that are read
elsewhere and are not settings; and naming where an invalid value came from (the file's line
and key path, or the variable).

A misspelt setting silently ignored would leave a team believing a budget or a prompt is in
force: it must stop the start instead.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import AliasChoices, BaseModel
from pydantic_core import ErrorDetails

from bots.config_file import ConfigFile, key_path

PREFIX = "TEAMMATE_"
DELIMITER = "__"

# TEAMMATE_* variables read elsewhere, never settings: keep in step with the code that reads
# them (tests/bots/test_settings_names.py looks for every one).
NOT_SETTINGS: dict[str, str] = {
    "TEAMMATE_CONFIG": "the TOML file's path (bots.settings.config_path)",
    "TEAMMATE_TEST_DATABASE_URL": "the PostgreSQL server of tests and benchmarks",
    "TEAMMATE_CHAOS_LONG": "opt-in long chaos tests (tests/chaos)",
}
_NAMED_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

Keys = tuple[str, ...]


# -- the shape of the settings ------------------------------------------------------------


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            options = [a for a in get_args(annotation) if a is not type(None)]
            if len(options) != 1:
                return annotation
            annotation = options[0]
        else:
            return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _child(model: type[BaseModel], field: str) -> tuple[str, type[BaseModel] | None]:
    """What a field holds: "model" (a section), "map" (tables by any name, each a section),
    "free" (a table of anything) or "leaf"."""
    annotation = _unwrap(model.model_fields[field].annotation)
    if _is_model(annotation):
        return "model", annotation
    if get_origin(annotation) is dict:
        value = _unwrap(get_args(annotation)[1])
        return ("map", value) if _is_model(value) else ("free", None)
    return "leaf", None


def _aliases(model: type[BaseModel], field: str) -> list[str]:
    alias = model.model_fields[field].validation_alias
    if isinstance(alias, AliasChoices):
        return [choice for choice in alias.choices if isinstance(choice, str)]
    return [alias] if isinstance(alias, str) else []


def _field_named(model: type[BaseModel], key: str, *, top: bool) -> str | None:
    for field in model.model_fields:
        names = [field, *_aliases(model, field)]
        if key in names or (top and key.lower() in (n.lower() for n in names)):
            return field
    return None


def _nearest(key: str, names: Sequence[str]) -> str | None:
    found = difflib.get_close_matches(key.lower(), names, n=1, cutoff=0.6)
    return found[0] if found else None


# -- the file -----------------------------------------------------------------------------


# What is no setting: (the line saying so, the short name that line is about).
Unknown = tuple[str, str]


def unknown_in_file(model: type[BaseModel], config: ConfigFile) -> list[Unknown]:
    """Each key or section of the file that is no setting."""
    return [
        (
            _file_line(config, keys, is_table, nearest),
            f"[{key_path(keys)}]" if is_table else key_path(keys),
        )
        for keys, is_table, nearest in _walk_file(model, config.data, (), top=True)
    ]


def _walk_file(
    model: type[BaseModel], table: dict[str, Any], at: Keys, *, top: bool
) -> Iterator[tuple[Keys, bool, Keys | None]]:
    for key, value in table.items():
        field = _field_named(model, key, top=top)
        if field is None:
            nearest = _nearest(key, list(model.model_fields))
            yield (*at, key), isinstance(value, dict), None if nearest is None else (*at, nearest)
            continue
        kind, inner = _child(model, field)
        if inner is None or not isinstance(value, dict):
            continue
        if kind == "model":
            yield from _walk_file(inner, value, (*at, key), top=False)
        else:
            for name, entry in value.items():
                if isinstance(entry, dict):
                    yield from _walk_file(inner, entry, (*at, key, name), top=False)


def _file_line(config: ConfigFile, keys: Keys, is_table: bool, nearest: Keys | None) -> str:
    what = f"section `[{key_path(keys)}]`" if is_table else f"setting `{key_path(keys)}`"
    line = f"{config.where(keys)}: unknown {what}"
    if nearest is not None:
        shown = f"[{key_path(nearest)}]" if is_table else key_path(nearest)
        line += f" (did you mean `{shown}`?)"
    return line


# -- the environment ------------------------------------------------------------------------


def unknown_variables(
    model: type[BaseModel], environ: Mapping[str, str], source: str, allowed: set[str]
) -> list[Unknown]:
    """Each `TEAMMATE_*` variable of `environ` that names no setting (`source`:
    "environment" or ".env"); `allowed` are variables named by the configuration (an MCP
    server's `env` and `headers`)."""
    lines: list[Unknown] = []
    for name in environ:
        upper = name.upper()
        if not upper.startswith(PREFIX) or upper in NOT_SETTINGS or upper in allowed:
            continue
        keys = upper[len(PREFIX) :].lower().split(DELIMITER)
        problem = _env_problem(model, keys)
        if problem is not None:
            line = f"{name} ({source}): not a setting"
            if problem:
                line += f" (did you mean {problem}?)"
            lines.append((line, name))
    return lines


def _env_problem(model: type[BaseModel], keys: list[str]) -> str | None:
    """None if the variable is a setting; else the nearest variable that is ("" if none)."""
    current: type[BaseModel] | None = model
    at: list[str] = []
    index = 0
    while index < len(keys):
        if current is None:
            return None  # inside a table of free keys
        key = keys[index]
        top = current is model
        fields = [f for f in current.model_fields if not (top and _aliases(current, f))]
        if key not in fields:
            if top and _field_named(current, key, top=True) is not None:
                return _aliases(current, _field_named(current, key, top=True) or "")[0]
            nearest = _nearest(key, fields)
            if nearest is None:
                return ""
            whole = [*at, nearest, *keys[index + 1 :]]  # the rest may be right
            return _variable(whole if _env_problem(model, whole) is None else [*at, nearest])
        kind, current = _child(current, key)
        at.append(key)
        if kind == "leaf" and index + 1 < len(keys):
            return _variable(at)
        if kind == "map" and index + 1 < len(keys):
            at.append(keys[index + 1])
            index += 1
        index += 1
    return None


def _variable(keys: Sequence[str]) -> str:
    return PREFIX + DELIMITER.join(keys).upper()


def named_by_configuration(config: ConfigFile | None, environ: Mapping[str, str]) -> set[str]:
    """Variables an MCP server's `env` or `headers` names (they hold credentials for it)."""
    named: set[str] = set()
    servers = config.data.get("mcp", {}).get("servers", {}) if config is not None else {}
    if isinstance(servers, dict):
        for server in servers.values():
            for table in ("env", "headers"):
                values = server.get(table, {}) if isinstance(server, dict) else {}
                if isinstance(values, dict):
                    named.update(v.upper() for v in values.values() if isinstance(v, str))
    for name, value in environ.items():  # `[mcp]` given as TEAMMATE_MCP* variables
        if name.upper().startswith(PREFIX + "MCP"):
            named.update(v.upper() for v in _NAMED_VARIABLE.findall(value))
    return named


# -- where a bad value came from ------------------------------------------------------------


def describe(
    error: ErrorDetails,
    model: type[BaseModel],
    config: ConfigFile | None,
    environs: Sequence[Mapping[str, str]],
    overrides: Mapping[str, Any],
) -> str | None:
    """`teammate.toml, line 4: budgets.channel_usd_per_day` or the variable, for the value
    `error` is about; None when neither holds it (a default, or given by the caller)."""
    loc = list(error["loc"])
    if not loc or str(loc[0]) in overrides:
        return None
    names = [str(k) for k in loc if not isinstance(k, int)]
    field = _field_named(model, names[0], top=True)
    for end in range(len(names), 0, -1):  # the environment wins over the file
        candidates = [_variable(names[:end])]
        if end == 1 and field is not None:
            candidates += [a.upper() for a in _aliases(model, field)]
        for environ in environs:
            for name in environ:
                if name.upper() in candidates:
                    return name
    if config is not None and config.holds(loc):
        return f"{config.where(loc)}: {key_path(loc)}"
    return None
