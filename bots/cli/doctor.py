"""`teammate doctor`: what is configured and whether it works, one line per check (settings,
data dir, database, models, sandbox, ripgrep, then each registered platform's own checks and
the MCP servers'); and `teammate mcp list`: each MCP server started once, with its tools.

Owns: the checks of what every platform shares (storage above all) and the doctor's exit
status (1 if any check failed). Must not: check a platform itself (its `Platform.doctor` does,
for each in `bots.serve.PLATFORMS`), or print a secret (a database URL is shown redacted).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

from bots.cli.common import settings_from, start_logging
from bots.mcp_report import check_mcp, print_mcp_list
from bots.model_report import check_models
from bots.platform import Report, Status
from bots.sandbox_report import report_sandbox
from bots.serve import PLATFORMS
from bots.settings import Settings, SettingsError, config_path
from storage.base import DatabaseDamaged
from storage.postgres import PostgresStore, is_postgres_url, redact_url
from storage.sqlite import SqliteStore
from storage.sqlite_migrations import MIGRATIONS
from tools.bash import probe_sandbox


def doctor_command(args: argparse.Namespace) -> int:
    return asyncio.run(doctor(args, sys.stdout))


def mcp_list_command(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    start_logging(settings, args)
    return asyncio.run(print_mcp_list(settings, sys.stdout))


@dataclass(slots=True)
class Check:
    status: Status
    name: str
    detail: str


async def doctor(args: argparse.Namespace, out: TextIO) -> int:
    """One line per check; exit 1 if any check fails."""
    checks: list[Check] = []

    def report(status: Status, name: str, detail: str) -> None:
        check = Check(status, name, detail)
        checks.append(check)
        out.write(f"{check.status:<5} {check.name}: {check.detail}\n")
        out.flush()

    try:
        settings = settings_from(args)
    except SettingsError as exc:
        report("fail", "settings", str(exc))
        return 1
    toml = config_path()
    report(
        "ok",
        "settings",
        f"loaded (TOML file: {toml})" if toml else "loaded (no TOML file; environment only)",
    )
    start_logging(settings, args)

    reachable = await _check_storage(settings, report)
    # Stored channel models are read where the database could be checked.
    await check_models(settings, report, read_store=reachable)
    report_sandbox(settings, await asyncio.to_thread(probe_sandbox), report)
    _check_ripgrep(settings, report)
    for platform in PLATFORMS:
        await platform.doctor(settings, report)
    await check_mcp(settings, report)

    failed = [check for check in checks if check.status == "fail"]
    out.write(f"{len(failed)} check(s) failed\n" if failed else "all checks passed\n")
    return 1 if failed else 0


async def _check_storage(settings: Settings, report: Report) -> bool:
    """The data dir, then the database in it (or PostgreSQL); whether the store could be
    checked at all."""
    data_ok = await asyncio.to_thread(_writable, settings.data_dir)
    if data_ok is None:
        report("ok", "data dir", f"{settings.data_dir.resolve()} is writable")
    else:
        report("fail", "data dir", f"{settings.data_dir}: {data_ok}")

    if settings.database_url is not None:
        await _check_postgres(settings.database_url.get_secret_value(), report)
    elif data_ok is None:
        await _check_database(settings.database_path, report)
    else:
        report("fail", "database", "not checked (the data dir is not writable)")
    return data_ok is None or settings.database_url is not None


def _check_ripgrep(settings: Settings, report: Report) -> None:
    rg = shutil.which("rg")
    if rg:
        report("ok", "ripgrep", rg)
    elif settings.tools.grep_engine == "ripgrep":
        report("fail", "ripgrep", "not found, but tools.grep_engine is 'ripgrep'")
    else:
        report("warn", "ripgrep", "not found; grep uses its slower Python engine")


async def _check_database(path: Path, report: Report) -> None:
    """Open the store (which runs SQLite's quick check), then the full integrity check; a file
    the store refuses as damaged is still checked in full, read-only, to say what is wrong."""
    problems: list[str]
    try:
        async with SqliteStore.open(path) as store:
            report("ok", "database", f"{path} opens (schema version {len(MIGRATIONS)})")
            problems = await store.integrity_check()
    except DatabaseDamaged as exc:
        report("fail", "database", str(exc))
        problems = await SqliteStore.check_file(path)
    except Exception as exc:
        report("fail", "database", f"{path}: {exc}")
        return
    if not problems:
        report("ok", "database integrity", "no damage found (full check)")
        return
    first = " ".join(problems[0].split())[:200]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    report("fail", "database integrity", f"{len(problems)} problem(s): {first}{more}")


async def _check_postgres(url: str, report: Report) -> None:
    """Reach the PostgreSQL database (opening checks and migrates its schema) and say which
    server and schema version it is; the URL is shown without its password."""
    shown = redact_url(url)
    if not is_postgres_url(url):
        report("fail", "database", f"TEAMMATE_DATABASE_URL: {shown} is not a postgresql:// URL")
        return
    try:
        async with asyncio.timeout(15), PostgresStore.open(url) as store:
            about = await store.describe()
    except Exception as exc:
        password = urlsplit(url).password
        detail = str(exc).replace(password, "***") if password else str(exc)
        report("fail", "database", f"PostgreSQL at {shown} is not reachable or usable: {detail}")
        return
    report(
        "ok",
        "database",
        f"PostgreSQL {about['server_version']} at {shown} is reachable (schema "
        f"{about['schema']!r}, schema version {about['version']})",
    )


def _writable(directory: Path) -> str | None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".doctor-"):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None
