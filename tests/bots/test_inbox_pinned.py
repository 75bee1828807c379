"""What the inbox's records show people and the runner, pinned: the quote of a message that
goes unanswered (in the notices a stop sends), a stop's reason reaching the run's control
(it is the text shown in the aborted reply), and steering taken only while the loop runs."""

from __future__ import annotations

from pathlib import Path

from bots.inbox import QUOTE_CHARS, Queued, RunState, Unseen
from core.messages import Author, UserMessage
from core.models.scripted import Reply, ScriptedModel, call
from storage.base import InboxItem
from storage.sqlite import SqliteStore
from tests.bots.runner_helpers import KEY, SleepTool, incoming, make_runner
from tests.fakes.recording_surface import RecordingSurface

BOB = Author(id="U2", name="Bob")


def queued(text: str, author: Author | None = BOB) -> Queued:
    message = UserMessage(content=text, author=author)
    item = InboxItem(id=1, conversation_id=1, message=message, surface_ref={}, received_at=0.0)
    return Queued(item, None)


def test_the_quote_leaves_out_the_attribution_line_and_keeps_the_rest_on_one_line() -> None:
    # the stored text starts with the attribution line the runner adds; the rest is what was said
    said = "[Bob in #general]\nfirst line\nsecond   line\n\nthird"
    assert queued(said).quote() == "Bob: “first line second line third”"
    assert queued("just this").quote() == "Bob: “just this”"


def test_a_long_message_is_cut_to_quote_chars_with_an_ellipsis() -> None:
    exact = "x" * QUOTE_CHARS
    assert queued(f"header\n{exact}").quote() == f"Bob: “{exact}”"
    longer = "y" * (QUOTE_CHARS + 1)
    assert queued(f"header\n{longer}").quote() == f"Bob: “{'y' * (QUOTE_CHARS - 1)}…”"


def test_a_message_without_an_author_is_quoted_without_a_name() -> None:
    assert queued("header\nhello", author=None).quote() == "“hello”"
    assert queued("header\nhello", author=None).author is None


async def test_a_stop_before_the_loop_starts_reaches_the_control_with_its_reason() -> None:
    run = RunState(feed=None)  # type: ignore[arg-type]  # the feed is not used here
    assert run.id is None and run.control is None and run.stop_reason is None
    run.cancel("Ada stopped this.")
    control = run.new_control()
    assert control.cancelled and control.signal.reason == "Ada stopped this."
    # a retry's fresh control starts cancelled with the same reason
    again = run.new_control()
    assert again is not control and again.signal.reason == "Ada stopped this."


def test_steering_is_taken_only_while_the_loop_runs() -> None:
    run = RunState(feed=None)  # type: ignore[arg-type]
    message = queued("header\nsteer me")
    assert run.accepting is False
    run.steer(message)  # no control yet, and not accepting: nothing happens
    control = run.new_control()
    run.steer(message)  # a control, but the loop is not running yet
    assert control.take_steering() == [] and run.steered == {}
    run.accepting = True
    run.steer(message)
    assert control.take_steering() == [message.item.message]
    assert run.steered == {id(message.item.message): message}


def test_an_unseen_surface_keeps_the_ref_of_the_message_a_run_posted() -> None:
    # recovery edits that message after a restart, through this ref
    assert Unseen({"channel": "C9", "ts": "1.2"}).ref == {"channel": "C9", "ts": "1.2"}


async def test_the_stop_notices_quote_long_multi_line_messages_cut_and_attributed(
    store: SqliteStore, tmp_path: Path
) -> None:
    model = ScriptedModel([Reply(tool_calls=[call("sleep", {"seconds": 30})])])
    runner = make_runner(store, tmp_path, model, tools=[SleepTool()])
    surface = RecordingSurface()
    await runner.submit(incoming("sleep"), surface)
    await surface.wait_for(lambda s: s.tool_starts())
    bob = RecordingSurface("bob")
    long = "please look at this\n" + "z" * 100
    await runner.submit(incoming(long, author=BOB), bob)
    assert runner.stop(KEY) == "stopped"
    await runner.wait(KEY)
    quote = f"Bob: “please look at this {'z' * (QUOTE_CHARS - 21)}…”"
    [notice] = surface.notices()
    assert f"will not be answered: {quote}." in notice.text
    assert f"won't answer {quote};" in bob.notices()[-1].text
