"""A conversation survives a JSON round trip exactly."""

from __future__ import annotations

from core.messages import dump_messages, load_messages
from tests.fakes.sample_messages import every_kind_of_message


def test_every_kind_of_content_round_trips_exactly() -> None:
    messages = every_kind_of_message()
    data = dump_messages(messages)
    restored = load_messages(data)
    assert restored == messages
    assert dump_messages(restored) == data
    assert [type(m) for m in restored] == [type(m) for m in messages]
