"""The throwaway PostgreSQL cluster of `tests/storage/pg.py` ends with the process that started
it, even one killed with SIGKILL (which can stop nothing): it used to be daemonized by
`pg_ctl` and ran on, with no client, after a killed test session."""

from __future__ import annotations

import asyncio
import shutil
import signal
import sys
from pathlib import Path

import pytest

from tests import processes
from tests.storage import pg

REPO = Path(__file__).resolve().parents[2]
START_GUARD_S = 120.0  # initdb and a start on a loaded machine: a hang guard

STARTER = """
import sys, time
from tests.storage import pg
server = pg.start_cluster()
if server is None:
    print("unavailable", pg.unavailable_reason, flush=True)
    sys.exit(3)
postmaster = (server.throwaway / "data" / "postmaster.pid").read_text().split()[0]
print(postmaster, server.throwaway, flush=True)
time.sleep(3600)
"""


@pytest.mark.skipif(not processes.adopt_orphans(), reason="finding orphans needs Linux")
async def test_the_cluster_ends_when_the_process_that_started_it_is_killed() -> None:
    if pg._bin_dir() is None or pg._as_user() is None:
        pytest.skip("no PostgreSQL server programs (or no unprivileged user) for a cluster")
    starter = await asyncio.create_subprocess_exec(
        sys.executable, "-c", STARTER, cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert starter.stdout is not None
    try:
        line = (await asyncio.wait_for(starter.stdout.readline(), START_GUARD_S)).decode()
        assert not line.startswith("unavailable"), line
        pid_text, directory = line.split()
        postmaster = int(pid_text)
        cluster = processes.descendants(postmaster) | {postmaster}
        assert len(cluster) > 1  # the postmaster and its helpers (checkpointer, …)
    finally:
        starter.send_signal(signal.SIGKILL)
        await starter.wait()

    left = await asyncio.to_thread(processes.still_running, cluster, 30.0)
    shutil.rmtree(directory, ignore_errors=True)  # what the killed starter could not
    assert not left, processes.describe(left)
