"""The test suite can never call a real model or reach beyond this machine."""

from __future__ import annotations

import os
import socket

import pytest

from core.messages import UserMessage
from core.models.base import ModelRequest, StreamEnd
from core.models.catalog import create_model
from tests.conftest import RealNetworkCall


def test_connecting_beyond_this_machine_fails_loudly() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, pytest.raises(RealNetworkCall):
        sock.connect(("203.0.113.7", 443))  # TEST-NET-3: never routed, never tried


def test_no_real_key_and_no_real_endpoint_are_visible() -> None:
    assert "ANTHROPIC_API_KEY" not in os.environ
    assert os.environ["ANTHROPIC_BASE_URL"].startswith("http://127.0.0.1:9/")


async def test_a_default_model_built_in_tests_cannot_reach_the_real_api() -> None:
    model = create_model(api_key="sk-ant-would-be-real", max_retries=0)
    request = ModelRequest(system_prompt="s", messages=[UserMessage(content="hi")])
    final = [e async for e in model.stream(request) if isinstance(e, StreamEnd)][-1].message
    assert final.stop_reason == "error" and final.error_kind == "connection"
    assert "sk-ant-would-be-real" not in (final.error_message or "")
