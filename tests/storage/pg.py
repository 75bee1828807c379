"""A real PostgreSQL for tests and benchmarks: the local server if there is one, else a
throwaway cluster.

- `TEAMMATE_TEST_DATABASE_URL` names a server to use (its database must exist; trust or a
  password in the URL). Otherwise, a server on 127.0.0.1:5432 with trust auth and a database
  `test` is used if one answers.
- Otherwise a cluster is made in a temporary directory (`initdb`, trust auth, fsync off: it
  is thrown away) and started on a free port of 127.0.0.1 with its socket in that directory;
  as root it runs as the unprivileged `postgres` user (initdb refuses root). It is stopped
  and deleted when the process that started it is done with it, and it ends with that
  process however it ends (killed too): `postgres` is started as our child, not daemonized by
  `pg_ctl`, with the kernel asked to SIGKILL it when we end (`tools.parent_death`); its
  backends then see their postmaster gone and exit. (The kernel sends that signal when the
  starting *thread* ends, so it is started from a thread that lasts as long as the process.)
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
import queue
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from tools.parent_death import ends_with_parent

LOCAL_URL = "postgresql://postgres@127.0.0.1:5432/test"
UNPRIVILEGED_USER = "postgres"
READY_S = 60.0  # a hang guard for the cluster's start, not a speed check
STOP_S = 60.0


@dataclass(slots=True)
class PgServer:
    """Where the server listens: `url` is a database the tests may create schemas in."""

    url: str
    version: str
    throwaway: Path | None = None  # the cluster's directory when this process started it
    postmaster: subprocess.Popen[bytes] | None = None  # the throwaway cluster's server

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


async def _probe(url: str, timeout_s: float = 5) -> str | None:
    """The server's version if `url` answers within a few seconds, else None."""
    try:
        connection = await asyncpg.connect(url, timeout=timeout_s)
    except (TimeoutError, OSError, asyncpg.PostgresError):
        return None
    try:
        return str(await connection.fetchval("SHOW server_version"))
    finally:
        await connection.close()


async def fetch_value(url: str, query: str, *args: Any) -> Any:
    """One value from the server, on a connection of the test's own (not the store's)."""
    connection = await asyncpg.connect(url)
    try:
        return await connection.fetchval(query, *args)
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


def _as_owner() -> dict[str, Any]:
    """`Popen` arguments that run a server program as the unprivileged user ({} if we are)."""
    if os.geteuid() != 0:
        return {}
    owner = pwd.getpwnam(UNPRIVILEGED_USER)
    return {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}


_spawns: queue.SimpleQueue[Callable[[], None]] | None = None
_spawns_lock = threading.Lock()


def _in_lasting_thread(start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """Run `start` in a thread that lasts as long as the process: a child asking to die with
    its parent dies with the starting thread (a caller may be an `asyncio.to_thread` worker)."""
    global _spawns
    with _spawns_lock:
        if _spawns is None:
            _spawns = queue.SimpleQueue()
            jobs = _spawns

            def serve() -> None:
                while True:
                    jobs.get()()

            threading.Thread(target=serve, name="pg-spawner", daemon=True).start()
    done: queue.SimpleQueue[subprocess.Popen[bytes] | BaseException] = queue.SimpleQueue()

    def job() -> None:
        try:
            done.put(start())
        except BaseException as exc:  # handed to the caller, raised there
            done.put(exc)

    _spawns.put(job)
    result = done.get()
    if isinstance(result, BaseException):
        raise result
    return result


def _start_postmaster(
    bin_dir: Path, root: Path, port: int, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], str] | None:
    """`postgres` on `root/data`, our child for life (see the module), once it answers, with
    its version; None (stopped again) if it does not."""
    options = [
        "-p", str(port), "-k", str(root), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
        "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
        "-c", "max_connections=300", "-c", "shared_buffers=64MB",
    ]  # fmt: skip
    with open(root / "server.log", "ab") as log:
        process = _in_lasting_thread(
            lambda: subprocess.Popen(
                [str(bin_dir / "postgres"), "-D", str(root / "data"), *options],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                cwd=root, start_new_session=True,  # (a terminal's Ctrl-C is the tests', not its)
                preexec_fn=ends_with_parent(), **_as_owner(),
            )
        )  # fmt: skip
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    deadline = time.monotonic() + READY_S
    while process.poll() is None and time.monotonic() < deadline:
        version = asyncio.run(_probe(url, timeout_s=2))
        if version is not None:
            return process, version
        time.sleep(0.1)
    _stop_postmaster(process)
    return None


def _stop_postmaster(process: subprocess.Popen[bytes]) -> None:
    """PostgreSQL's immediate shutdown (SIGQUIT), then SIGKILL if it lingers."""
    if process.poll() is None:
        with contextlib.suppress(OSError):
            process.send_signal(signal.SIGQUIT)
    try:
        process.wait(STOP_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def restart_cluster(server: PgServer) -> None:
    """Stop the throwaway cluster (a fast shutdown: its connections are cut, as in a
    maintenance restart; not `immediate`: with fsync off a simulated crash would lose commits
    the store was told were durable), then start it again as it was, once it answers."""
    bin_dir = _bin_dir()
    assert server.throwaway is not None and server.postmaster is not None and bin_dir
    server.postmaster.send_signal(signal.SIGINT)
    server.postmaster.wait(STOP_S)
    port = urllib.parse.urlsplit(server.url).port
    assert port is not None
    started = _start_postmaster(bin_dir, server.throwaway, port, _server_env())
    if started is None:
        raise RuntimeError(f"the throwaway cluster did not start again (see {server.throwaway})")
    server.postmaster = started[0]


def _server_env() -> dict[str, str]:
    return {**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}


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
    env = _server_env()
    try:
        subprocess.run(
            [*prefix, str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
             "-E", "UTF8", "--no-sync", "--no-instructions"],
            check=True, capture_output=True, env=env, timeout=120,
        )  # fmt: skip
        started = _start_postmaster(bin_dir, root, port, env)
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
    if started is None:
        log = (root / "server.log").read_bytes()[-300:].decode(errors="replace").strip()
        unavailable_reason = f"the throwaway PostgreSQL cluster did not answer: {log}"
        shutil.rmtree(root, ignore_errors=True)
        return None
    process, version = started
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    return PgServer(url=url, version=version, throwaway=root, postmaster=process)


def stop_cluster(server: PgServer) -> None:
    if server.throwaway is None:
        return
    if server.postmaster is not None:
        _stop_postmaster(server.postmaster)
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
