"""HTTP mode's gate: the signature is checked on the raw bytes before anything is parsed, bodies
are capped at what Slack sends, and refusals are counted one-liners (issue 23, item 1: one
unsigned 4 MiB form body stalled the event loop for every conversation; a `payload=` of nested
brackets was a 500 with a RecursionError traceback in the log, every time)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp
import pytest

from bots.platforms.slack.http_gate import RELEASE_PER_TURN, AckFirst
from core.models.scripted import ScriptedModel
from tests.bots.platforms.slack.e2e_harness import SECRET, message_event, running
from tests.fakes.slack_server import FakeSlack, signed_request


async def post_unsigned(url: str, body: bytes, content_type: str) -> tuple[int, str]:
    headers = {"Content-Type": content_type}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as got,
    ):
        return got.status, await got.text()


async def test_unsigned_and_hostile_bodies_are_refused_before_parsing(
    fake_slack: FakeSlack, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedModel([])
    caplog.set_level(logging.INFO)
    async with running(fake_slack, tmp_path, model) as app:
        big_form = b"a=" + b"x" * (900 * 1024)
        nested = b"payload=" + b"%5B" * (300 * 1024)
        statuses = [
            await post_unsigned(app.url, big_form, "application/x-www-form-urlencoded"),
            await post_unsigned(app.url, nested, "application/x-www-form-urlencoded"),
            await post_unsigned(app.url, b'{"type": "event_callback"}', "application/json"),
        ]
        # Signed with the right secret but hostile: refused with a clear 400, not a 500.
        signed_nested = await signed_request(
            app.url, nested.decode(), SECRET, content_type="application/x-www-form-urlencoded"
        )
        too_big = await post_unsigned(app.url, b"a=" + b"x" * (4 * 1024 * 1024), "text/plain")
        # And a genuine event still gets its acknowledgement.
        genuine = await signed_request(
            app.url, fake_slack.event_callback(message_event(fake_slack, "hello")), SECRET
        )
        await app.settle()
    assert [status for status, _ in statuses] == [401, 401, 401]
    assert signed_nested.status == 400
    assert too_big[0] == 413
    assert genuine.status == 200
    assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text
    refusals = [
        r for r in caplog.records if "refused" in r.getMessage() and "Slack" in r.getMessage()
    ]
    assert refusals and all(r.exc_info is None for r in refusals)
    assert len(refusals) <= 3  # counted, not a line (and a traceback) per request


async def test_an_events_work_waits_until_the_requests_being_handled_are_acknowledged(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    """Acknowledgements first (issue 23, "Measured"): the work after an ack competed with the
    acks still to send, so a burst's last acks waited for its first answers. The work now
    starts once no request is being handled, or `max_defer_s` later at most."""
    model = ScriptedModel([])
    async with running(fake_slack, tmp_path, model) as app:
        assert app.bot.gate is not None
        ack_first = app.bot.gate.ack_first
        ack_first.max_defer_s = 30.0
        ack_first.enter()  # another request of the burst, still being handled
        event = message_event(fake_slack, "hello")
        genuine = await signed_request(app.url, fake_slack.event_callback(event), SECRET)
        assert genuine.status == 200  # acknowledged (and journaled) at once
        await asyncio.sleep(0.3)
        assert app.bot.pending_events == 1
        assert not app.replies("C1", event["ts"])  # its work has not started
        ack_first.leave()  # the burst is acknowledged: now its work
        await app.settle()
        assert app.replies("C1", event["ts"])

        # A steady stream of requests does not starve the work: held `max_defer_s` at most.
        ack_first.max_defer_s = 0.2
        ack_first.enter()
        try:
            later = message_event(fake_slack, "again")
            assert (await signed_request(app.url, fake_slack.event_callback(later), SECRET)).status
            await asyncio.wait_for(app.settle(), 10)
            assert app.replies("C1", later["ts"])
        finally:
            ack_first.leave()


async def test_ack_first_releases_every_held_waiter_together() -> None:
    ack_first = AckFirst(max_defer_s=30.0)
    await asyncio.wait_for(ack_first.quiet(), 1)  # nothing being handled: no wait
    ack_first.enter()
    ack_first.enter()
    held = [asyncio.create_task(ack_first.quiet()) for _ in range(3)]
    await asyncio.sleep(0.05)
    ack_first.leave()
    await asyncio.sleep(0.05)
    assert not any(task.done() for task in held)  # one request still being handled
    ack_first.leave()
    await asyncio.sleep(0.2)
    assert all(task.done() for task in held)


async def test_held_work_waits_out_a_gap_between_a_bursts_requests() -> None:
    """The requests in flight acknowledged together (one group commit) and the next ones a
    few ms later: the work is not released in that gap, only once it has been quiet for
    `quiet_s`."""
    ack_first = AckFirst(max_defer_s=30.0, quiet_s=0.1)
    ack_first.enter()
    held = asyncio.create_task(ack_first.quiet())
    await asyncio.sleep(0.01)
    ack_first.leave()  # all acknowledged...
    await asyncio.sleep(0.02)
    ack_first.enter()  # ...and the next request comes
    await asyncio.sleep(0.15)
    assert not held.done()
    ack_first.leave()
    await asyncio.sleep(0.02)
    assert not held.done()
    await asyncio.wait_for(held, 1)


async def test_held_work_is_released_a_slice_a_turn() -> None:
    """A burst's held work starts `RELEASE_PER_TURN` a turn of the loop, in order, so that a
    request arriving meanwhile is not held behind all of it at once."""
    ack_first = AckFirst(max_defer_s=30.0, quiet_s=0.0)
    ack_first.enter()
    started: list[int] = []

    async def work(n: int) -> None:
        await ack_first.quiet()
        started.append(n)

    count = RELEASE_PER_TURN * 2 + 3
    tasks = [asyncio.create_task(work(n)) for n in range(count)]
    await asyncio.sleep(0.05)
    ack_first.leave()
    seen = []
    for _ in range(5):
        await asyncio.sleep(0)
        seen.append(len(started))
    await asyncio.gather(*tasks)
    assert started == list(range(count))
    assert seen[0] <= RELEASE_PER_TURN  # not all in the first turn
    assert max(b - a for a, b in zip([0, *seen], seen, strict=False)) <= RELEASE_PER_TURN
