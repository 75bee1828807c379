"""Test-wide guards: no real model call and no traffic beyond this machine, ever; and no
process a test started left running after it."""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests import processes

# A real model call must fail loudly, not quietly spend money: no key, and a base URL that
# nothing listens on. Tests that need the Anthropic API start a fake and point at it.
for _name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
    os.environ.pop(_name, None)
os.environ["ANTHROPIC_BASE_URL"] = "http://127.0.0.1:9/real-model-calls-are-forbidden-in-tests"


class RealNetworkCall(RuntimeError):
    """A test tried to reach something other than this machine."""


def _is_local(address: Any) -> bool:
    if not (isinstance(address, tuple) and address):
        return isinstance(address, str | bytes)  # an AF_UNIX path is local
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _guarded_connect(self: socket.socket, address: Any) -> None:
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address):
        raise RealNetworkCall(f"tests may only connect to this machine, not {address!r}")
    _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_local(address):
        raise RealNetworkCall(f"tests may only connect to this machine, not {address!r}")
    return _real_connect_ex(self, address)


socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]


@pytest.fixture
def workspace(tmp_path: Any) -> Iterator[Any]:
    path = tmp_path / "workspace"
    path.mkdir()
    yield path


# -- every process a test starts ends with it ---------------------------------------------------

# Orphans (a server whose `teammate` parent exited) are adopted by this process, so a leftover
# is found however it was started; see tests/processes.py.
_ADOPTING = processes.adopt_orphans()
_BEFORE_SESSION = processes.descendants() if _ADOPTING else set()
LEFTOVER_GRACE_S = 5.0  # a process being stopped right now (killed, not yet gone)
# Started by module or session fixtures (the PostgreSQL test server): they stop them later.
_LONG_LIVED: set[int] = set()


class LongLivedProcesses:
    """Notes what a module or session fixture starts: it may be set up in the middle of a
    test's setup (asked for by name), after that test's snapshot of running processes.
    A plugin, not a hook of this conftest: a session fixture is set up for the session's
    node, which a conftest below the root directory does not see."""

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[Any]) -> Iterator[Any]:
        if fixturedef.scope == "function":
            return (yield)
        before = processes.descendants()
        try:
            return (yield)
        finally:
            _LONG_LIVED.update(processes.descendants() - before)


def pytest_configure(config: pytest.Config) -> None:
    if _ADOPTING:
        config.pluginmanager.register(LongLivedProcesses(), "teammate-long-lived-processes")


@pytest.fixture(autouse=True)
def no_process_left_behind() -> Iterator[None]:
    """Fail a test that leaves a process it started running (then kill it, so it does not
    pile up). Set up before and torn down after every other function-scoped fixture. Not
    counted: what module and session fixtures keep running (`LongLivedProcesses`), nor what a
    process already running starts meanwhile (a PostgreSQL server's backends)."""
    if not _ADOPTING:
        yield
        return
    before = processes.descendants()
    yield
    started = processes.descendants(known=before | _LONG_LIVED)
    left = processes.still_running(started, LEFTOVER_GRACE_S)
    if left:
        listed = processes.describe(left)
        processes.kill(left)
        pytest.fail(f"the test left {len(left)} process(es) running:\n{listed}", pytrace=False)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """What a module or session fixture left running fails the run, named."""
    if not _ADOPTING:
        return
    started = processes.descendants(known=_BEFORE_SESSION)
    left = processes.still_running(started, LEFTOVER_GRACE_S)
    if left:
        listed = processes.describe(left)
        processes.kill(left)
        sys.stderr.write(f"\nthe test run left {len(left)} process(es) running:\n{listed}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    processes.reap_adopted()
