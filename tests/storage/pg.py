"""A real PostgreSQL for tests and benchmarks: the local server if there is one, else a
throwaway cluster.

- `TEAMMATE_TEST_DATABASE_URL` names a server to use (its database must exist; trust or a
  password in the URL). Otherwise, a server on 127.0.0.1:5432 with trust auth and a database
  `test` is used if one answers.
- Otherwise a cluster is made in a temporary directory (`initdb`, trust auth, fsync off: it
  is thrown away) and started on a free port of 127.0.0.1 with its socket in that directory;
  as root it runs as the unprivileged `postgres` user (initdb refuses root). It is stopped
  and deleted when the process that started it is done with it.
- Each test gets a fresh schema (named in the URL as `?search_path=...`), dropped afterwards,
  so tests never see each other's rows.

`find_server()` returns None, with the reason in `unavailable_reason`, when neither works;
callers skip then, saying why (never silently).
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg

LOCAL_URL = "postgresql://postgres@127.0.0.1:5432/test"
UNPRIVILEGED_USER = "postgres"


@dataclass(slots=True)
class PgServer:
    """Where the server listens: `url` is a database the tests may create schemas in."""

    url: str
    version: str
    throwaway: Path | None = None  # the cluster's directory when this process started it

    def schema_url(self, schema: str) -> str:
        joiner = "&" if "?" in self.url else "?"
        return f"{self.url}{joiner}search_path={schema}"

    async def create_schema(self, prefix: str = "t") -> str:
        schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
        connection = await asyncpg.connect(self.url)
        try:
            await connection.execute(f'CREATE SCHEMA "{schema}"')
        finally:
            await connection.close()
        return schema

    async def drop_schema(self, schema: str) -> None:
        connection = await asyncpg.connect(self.url)
        try:
            await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await connection.close()


unavailable_reason = ""


async def _probe(url: str) -> str | None:
    """The server's version if `url` answers within a few seconds, else None."""
    try:
        connection = await asyncpg.connect(url, timeout=5)
    except (TimeoutError, OSError, asyncpg.PostgresError):
        return None
    try:
        return str(await connection.fetchval("SHOW server_version"))
    finally:
        await connection.close()


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _bin_dir() -> Path | None:
    """The newest installed PostgreSQL's programs (Debian puts them off PATH)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    return Path(candidates[-1]).parent if candidates else None


def _as_user() -> list[str] | None:
    """The prefix that runs a server program unprivileged ([] if we already are)."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        return None
    runuser = shutil.which("runuser")
    return [runuser, "-u", UNPRIVILEGED_USER, "--"] if runuser else None


def start_cluster() -> PgServer | None:
    """initdb and start a throwaway cluster; None (with `unavailable_reason`) if impossible."""
    global unavailable_reason
    bin_dir = _bin_dir()
    if bin_dir is None:
        unavailable_reason = (
            "no PostgreSQL server programs (initdb) installed; scripts/setup installs them as "
            "root, or point TEAMMATE_TEST_DATABASE_URL at a server"
        )
        return None
    prefix = _as_user()
    if prefix is None:
        unavailable_reason = (
            f"running as root and there is no '{UNPRIVILEGED_USER}' user (or runuser) to run "
            "the throwaway cluster; scripts/setup creates it"
        )
        return None
    root = Path(tempfile.mkdtemp(prefix="teammate-pg-"))
    data = root / "data"
    data.mkdir()
    if prefix:
        owner = pwd.getpwnam(UNPRIVILEGED_USER)
        for path in (root, data):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    port = _free_port()
    env = {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
    try:
        subprocess.run(
            [*prefix, str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
             "-E", "UTF8", "--no-sync", "--no-instructions"],
            check=True, capture_output=True, env=env, timeout=120,
        )  # fmt: skip
        options = (
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300 "
            "-c shared_buffers=64MB"
        )
        subprocess.run(
            [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options,
             "-l", str(root / "server.log"), "-w", "-t", "60", "start"],
            check=True, capture_output=True, env=env, timeout=90,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        log = root / "server.log"
        if log.exists():
            detail += log.read_bytes()[-500:]
        unavailable_reason = (
            f"could not start a throwaway PostgreSQL cluster: {exc}; "
            f"{detail.decode(errors='replace').strip()[-300:]}"
        )
        shutil.rmtree(root, ignore_errors=True)
        return None
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    version = asyncio.run(_probe(url))
    if version is None:
        unavailable_reason = "the throwaway PostgreSQL cluster started but does not answer"
        stop_cluster(PgServer(url, "", root))
        return None
    return PgServer(url=url, version=version, throwaway=root)


def stop_cluster(server: PgServer) -> None:
    if server.throwaway is None:
        return
    bin_dir = _bin_dir()
    prefix = _as_user() or []
    if bin_dir is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                [*prefix, str(bin_dir / "pg_ctl"), "-D", str(server.throwaway / "data"),
                 "-m", "immediate", "-w", "stop"],
                capture_output=True, timeout=60,
            )  # fmt: skip
    shutil.rmtree(server.throwaway, ignore_errors=True)


def find_server() -> PgServer | None:
    """A server to test against: the named one, the local one, or a throwaway cluster."""
    global unavailable_reason
    named = os.environ.get("TEAMMATE_TEST_DATABASE_URL")
    if named:
        version = asyncio.run(_probe(named))
        if version is None:
            unavailable_reason = "TEAMMATE_TEST_DATABASE_URL is set but that server does not answer"
            return None
        return PgServer(url=named, version=version)
    if _listening(5432):
        version = asyncio.run(_probe(LOCAL_URL))
        if version is not None:
            return PgServer(url=LOCAL_URL, version=version)
    return start_cluster()


@contextlib.contextmanager
def server() -> Iterator[PgServer | None]:
    """`find_server()`, stopping a throwaway cluster afterwards."""
    found = find_server()
    try:
        yield found
    finally:
        if found is not None:
            stop_cluster(found)
