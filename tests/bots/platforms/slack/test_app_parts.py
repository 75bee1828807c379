"""The Slack app's IO helpers against FakeSlack: display names, file downloads, backfill."""

from __future__ import annotations

from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bots.platforms.slack.backfill import MAX_MESSAGES, thread_backfill
from bots.platforms.slack.events import SlackFile
from bots.platforms.slack.files import LOGIN_PAGE_TEXT, FileFetcher
from bots.platforms.slack.users import UserNames, readable_mentions
from tests.fakes.slack_server import FakeSlack


def slack_file(info: dict[str, Any], **changes: Any) -> SlackFile:
    """A parsed file as Slack would list it: on files.slack.com (the fetcher maps that host to
    the fake, as for any Slack-compatible server)."""
    url = info["url_private_download"].split("/files/", 1)[1]
    fields: dict[str, Any] = {
        "id": info["id"],
        "name": info["name"],
        "mimetype": info["mimetype"],
        "url_private_download": f"https://files.slack.com/files/{url}",
        "size": info["size"],
    }
    fields.update(changes)
    return SlackFile(**fields)


# -- display names ---------------------------------------------------------------------------


async def test_names_are_looked_up_once_and_fall_back_to_the_id(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    fake_slack.add_user("UALICE", "alice", display_name="Alice A.", real_name="Alice Archer")
    fake_slack.add_user("UBOB", "bob", display_name="", real_name="Bob Builder")
    names = UserNames(slack_client)
    assert await names.name("UALICE") == "Alice A."
    assert await names.name("UALICE") == "Alice A."
    assert await names.name("UBOB") == "Bob Builder"
    assert await names.name("UNOBODY") == "UNOBODY"  # users.info fails: the id stands in
    assert len(fake_slack.calls_to("users.info")) == 3


async def test_the_cache_is_bounded_and_expires(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    now = [0.0]
    for n in range(5):
        fake_slack.add_user(f"U{n}", f"user{n}")
    names = UserNames(slack_client, ttl_s=10.0, max_entries=3, clock=lambda: now[0])
    for n in range(5):
        await names.name(f"U{n}")
    assert len(names) == 3
    assert names.cached("U0") is None and names.cached("U4") == "user4"
    now[0] = 11.0
    assert names.cached("U4") is None  # expired: looked up again
    await names.name("U4")
    assert len(fake_slack.calls_to("users.info")) == 6


async def test_mentions_become_names_within_a_lookup_budget(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    fake_slack.add_user("UALICE", "alice", display_name="Alice")
    fake_slack.add_user("UBOB", "bob", display_name="Bob")
    names = UserNames(slack_client)
    text = await readable_mentions("ask <@UALICE> and <@UBOB|bob>", names, max_lookups=1)
    assert text == "ask @Alice and <@UBOB|bob>"
    assert await readable_mentions("<@UBOB>", names, max_lookups=0) == "<@UBOB>"


# -- files -----------------------------------------------------------------------------------


async def test_a_file_is_downloaded_with_the_bot_token(fake_slack: FakeSlack) -> None:
    info = fake_slack.add_file("notes.txt", b"hello", "text/plain")
    fetcher = FileFetcher(fake_slack.bot_token, api_url=fake_slack.api_url)
    try:
        fetched = await fetcher.fetch([slack_file(info)])
    finally:
        await fetcher.aclose()
    assert fetched.problems == ()
    [attachment] = fetched.attachments
    assert (attachment.name, attachment.mime_type, attachment.data) == (
        "notes.txt",
        "text/plain",
        b"hello",
    )


async def test_the_sign_in_page_is_reported_not_saved(fake_slack: FakeSlack) -> None:
    info = fake_slack.add_file("notes.txt", b"hello", "text/plain")
    fetcher = FileFetcher("xoxb-wrong-token", api_url=fake_slack.api_url)
    try:
        fetched = await fetcher.fetch([slack_file(info)])
    finally:
        await fetcher.aclose()
    assert fetched.attachments == ()
    assert LOGIN_PAGE_TEXT in fetched.note()


async def test_the_token_never_goes_to_a_host_that_is_not_slack(fake_slack: FakeSlack) -> None:
    info = fake_slack.add_file("notes.txt", b"hello", "text/plain")
    elsewhere = slack_file(info, url_private_download="https://files.example.com/x/notes.txt")
    fetcher = FileFetcher(fake_slack.bot_token, api_url=fake_slack.api_url)
    try:
        fetched = await fetcher.fetch([elsewhere])
    finally:
        await fetcher.aclose()
    assert fetched.attachments == ()
    assert "not on Slack" in fetched.note()


async def test_sizes_are_bounded_per_file_and_per_message(fake_slack: FakeSlack) -> None:
    small = fake_slack.add_file("a.bin", b"a" * 600)
    lying = fake_slack.add_file("b.bin", b"b" * 600)
    fetcher = FileFetcher(
        fake_slack.bot_token, api_url=fake_slack.api_url, max_file_bytes=700, max_message_bytes=1000
    )
    try:
        fetched = await fetcher.fetch(
            [
                slack_file(small),
                slack_file(lying, size=10),  # says 10 bytes: counted while streaming
                slack_file(small, size=None),
            ]
        )
        too_big = await fetcher.fetch([slack_file(small, size=5000)])
    finally:
        await fetcher.aclose()
    assert [a.name for a in fetched.attachments] == ["a.bin"]
    assert len(fetched.problems) == 2 and all("larger than" in p for p in fetched.problems)
    assert too_big.attachments == () and "larger than" in too_big.note()


# -- backfill --------------------------------------------------------------------------------


async def test_backfill_attributes_and_marks_teammates_own_replies(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    fake_slack.add_user("UALICE", "alice", display_name="Alice")
    parent = fake_slack.seed_message("C1", "the deploy failed &amp; rolled back", user="UALICE")
    fake_slack.seed_message(
        "C1",
        "I can look",
        user=fake_slack.bot_user_id,
        thread_ts=parent["ts"],
        bot_id=fake_slack.bot_id,
    )
    fake_slack.seed_message(
        "C1",
        "beep",
        thread_ts=parent["ts"],
        user="",
        bot_id="BOTHER",
        username="ci-bot",
        subtype="bot_message",
    )
    fake_slack.seed_message("C1", "joined", thread_ts=parent["ts"], subtype="channel_join")
    mention = fake_slack.seed_message("C1", "<@UBOT> why?", user="UALICE", thread_ts=parent["ts"])
    fake_slack.seed_message("C1", "later", user="UALICE", thread_ts=parent["ts"])
    names = UserNames(slack_client)
    backfill = await thread_backfill(
        slack_client,
        channel_id="C1",
        thread_ts=parent["ts"],
        before_ts=mention["ts"],
        bot_user_id=fake_slack.bot_user_id,
        bot_id=fake_slack.bot_id,
        names=names,
    )
    assert [(b.author.name, b.text, b.from_assistant) for b in backfill] == [
        ("Alice", "the deploy failed & rolled back", False),
        ("Teammate", "I can look", True),
        ("ci-bot (a bot)", "beep", False),
    ]


async def test_backfill_keeps_the_newest_messages_within_bounds(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    fake_slack.replies_page_size = 7  # several pages
    parent = fake_slack.seed_message("C1", "start", user="UALICE")
    for n in range(MAX_MESSAGES + 20):
        fake_slack.seed_message("C1", f"m{n}", user="UALICE", thread_ts=parent["ts"])
    mention = fake_slack.seed_message("C1", "<@UBOT> now", user="UALICE", thread_ts=parent["ts"])
    backfill = await thread_backfill(
        slack_client,
        channel_id="C1",
        thread_ts=parent["ts"],
        before_ts=mention["ts"],
        bot_user_id=fake_slack.bot_user_id,
        bot_id=fake_slack.bot_id,
        names=UserNames(slack_client),
    )
    assert 0 < len(backfill) <= MAX_MESSAGES
    assert backfill[-1].text == f"m{MAX_MESSAGES + 19}"  # the newest before the mention


async def test_backfill_failure_is_not_fatal(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    backfill = await thread_backfill(
        slack_client,
        channel_id="C1",
        thread_ts="1.000001",
        before_ts="2.000001",
        bot_user_id=fake_slack.bot_user_id,
        bot_id=fake_slack.bot_id,
        names=UserNames(slack_client),
    )
    assert backfill == ()


async def test_concurrent_lookups_of_one_person_share_one_call(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    import asyncio

    fake_slack.add_user("UALICE", "alice", display_name="Alice")
    fake_slack.delay("users.info", 0.2)
    names = UserNames(slack_client)
    found = await asyncio.gather(*(names.name("UALICE") for _ in range(10)))
    assert found == ["Alice"] * 10
    assert len(fake_slack.calls_to("users.info")) == 1


async def test_slack_markup_reads_as_people_see_it(
    fake_slack: FakeSlack, slack_client: AsyncWebClient
) -> None:
    names = UserNames(slack_client)
    text = (
        "in <#C1|general> and <#C2>, <!here> <!subteam^S1|@ops>: "
        "<https://x.io/a?b=1|the docs>, <https://y.io>, <mailto:a@b.c|a@b.c>; a < b > c"
    )
    assert await readable_mentions(text, names, max_lookups=0) == (
        "in #general and #C2, @here @ops: the docs (https://x.io/a?b=1), https://y.io, a@b.c; "
        "a < b > c"
    )
