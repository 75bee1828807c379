"""What an audit entry may hold: secrets masked, sizes bounded, only known actions."""

from __future__ import annotations

from pathlib import Path

import pytest

from bots.features.audit import MAX_ITEMS, MAX_TEXT, actor_of, bounded_detail, record_action
from core.messages import Author
from storage.sqlite import SqliteStore


def test_secret_named_keys_and_known_secrets_are_masked_at_any_depth() -> None:
    detail = bounded_detail(
        {
            "headers": {"Authorization": "Bearer abc", "x": ["token=hunter22 ok"]},
            "api_key": "sk-1",
            "Password": {"nested": "anything"},
            "note": "the value hunter22 twice: hunter22",
        },
        secrets=["hunter22"],
    )
    assert detail == {
        "headers": {"Authorization": "[redacted]", "x": ["token=[redacted] ok"]},
        "api_key": "[redacted]",
        "Password": "[redacted]",
        "note": "the value [redacted] twice: [redacted]",
    }


def test_sizes_and_depth_are_bounded() -> None:
    deep: dict[str, object] = {"a": {"b": {"c": {"d": {"e": "too deep"}}}}}
    detail = bounded_detail(
        {"long": "x" * 100_000, "many": list(range(1000)), "deep": deep, "odd": object()}
    )
    assert len(detail["long"]) == MAX_TEXT and detail["long"].endswith("…")
    assert detail["many"][:3] == [0, 1, 2] and detail["many"][-1] == f"… {1000 - MAX_ITEMS} more"
    assert len(detail["many"]) == MAX_ITEMS + 1
    assert detail["deep"] == {"a": {"b": {"c": "…"}}}
    assert detail["odd"].startswith("<object object")


def test_the_actor_names_the_platform_of_the_channel() -> None:
    assert actor_of("slack:T1:C1", Author(id="U1", name="Ann")) == "slack:U1"
    assert actor_of("discord:9:8", "42") == "discord:42"


async def test_an_unknown_action_is_refused_and_nothing_written(tmp_path: Path) -> None:
    async with SqliteStore.open(tmp_path / "t.db") as store:
        with pytest.raises(ValueError, match="unknown audit action"):
            await record_action(
                store, actor="slack:U1", action="drop.tables", target="x", origin="slack"
            )
        long_target = "t" * 10_000
        await record_action(
            store, actor="slack:U1", action="run.stop", target=long_target, origin="slack"
        )
        (entry,) = await store.audit_entries(limit=5)
    assert len(entry.target) == 300 and entry.detail == {}
