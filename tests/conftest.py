"""Test-wide guards: no real model call and no traffic beyond this machine, ever."""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

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
