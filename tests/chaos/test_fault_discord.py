"""Platform outage on Discord (issue 13): its REST API answers 500 and 429 while an answer is
being posted. The real TeammateBot (discord.py) with the real runner and SQLite store against
FakeDiscord: the answer appears exactly once when Discord recovers."""

from __future__ import annotations

from core.models.scripted import Reply
from tests.bots.platforms.discord.conftest import fake_discord  # noqa: F401 (a fixture)
from tests.bots.platforms.discord.test_bot_e2e import (  # noqa: F401 (fixtures)
    Teammate,
    discord_settings,
    teammate,
)

ANSWER = "Discord came back and this arrived once."
POST_IN_A_CHANNEL = r"/channels/\d+/messages"


async def test_discord_failing_then_rate_limiting_delivers_the_answer_once(
    teammate: Teammate,  # noqa: F811
) -> None:
    fake = teammate.fake
    for _ in range(2):
        fake.fail_next("POST", POST_IN_A_CHANNEL, 500, {"message": "Internal Server Error"})
    fake.rate_limit_next("POST", POST_IN_A_CHANNEL, retry_after=0.2)
    teammate.model.add(Reply(text=ANSWER), Reply(text="and the next one"))
    asked = await teammate.mention("are you there?")
    thread = asked["id"]
    await teammate.shown(thread, ANSWER)
    key = f"discord:{next(iter(fake.guilds))}:{thread}"
    await teammate.runner.wait(key)
    assert sum(ANSWER in content for content in teammate.contents(thread)) == 1
    # The faults were met: two 500s and a 429 before the post that landed.
    assert len(fake.requests_to("POST", rf"/channels/{thread}/messages")) >= 4
    # Discord is healthy again: the next message is answered normally.
    await fake.dispatch("MESSAGE_CREATE", fake.message_payload(thread, "and now?"))
    await teammate.shown(thread, "and the next one")
    await teammate.runner.wait(key)
    assert sum(ANSWER in content for content in teammate.contents(thread)) == 1
