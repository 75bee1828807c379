"""How a run looks in a terminal: the answer on stdout, tool activity and errors on stderr."""

from __future__ import annotations

import asyncio
import io
import os
from pathlib import Path
from typing import Any

from bots.app import open_app
from bots.platforms.terminal.surface import (
    TERMINAL_RULES,
    StdinLines,
    TerminalSurface,
    TerminalSurfaces,
    run_chat,
)
from bots.settings import load_settings
from bots.surface.contract import Notice, RunFinished, RunStarted
from core.events import MessageEnd, MessageUpdate, ToolExecutionEnd, ToolExecutionStart
from core.messages import (
    AssistantMessage,
    Author,
    Text,
    Thinking,
    ToolCall,
    ToolResultMessage,
    Usage,
)
from core.models.base import TextDelta, ThinkingDelta
from storage.base import RunOutcome
from tests.waiting import eventually

KEY = "terminal:default"
ADA = Author(id="local:ada", name="ada")


def make_surface(*, stream: bool = True) -> tuple[TerminalSurface, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return TerminalSurface(KEY, out=out, err=err, stream=stream), out, err


def text_delta(text: str) -> MessageUpdate:
    partial = AssistantMessage(model="m", provider="p", content=[Text(text=text)])
    return MessageUpdate(message=partial, delta=TextDelta(partial=partial, index=0, delta=text))


def assistant_end(text: str) -> MessageEnd:
    return MessageEnd(message=AssistantMessage(model="m", provider="p", content=[Text(text=text)]))


def tool_end(name: str, text: str, *, is_error: bool = False, duration: float = 0.12) -> Any:
    result = ToolResultMessage(
        tool_call_id="call-1", tool_name=name, content=[Text(text=text)], is_error=is_error
    )
    return ToolExecutionEnd("call-1", name, result, duration)


def finished(
    outcome: RunOutcome, final_text: str = "", error_text: str | None = None
) -> RunFinished:
    return RunFinished(KEY, 1, outcome, Usage(), final_text, error_text)


async def test_answer_streams_to_stdout_and_tool_activity_goes_to_stderr() -> None:
    surface, out, err = make_surface()
    await surface.emit(RunStarted(KEY, 1, ADA))
    await surface.emit(text_delta("Let me "))
    await surface.emit(text_delta("look."))
    assert out.getvalue() == "Let me look."  # streamed as it arrives

    await surface.emit(
        ToolExecutionStart("call-1", "read", {"path": "README.md"}, "Read README.md")
    )
    await surface.emit(tool_end("read", "# Teammate\n..."))
    await surface.emit(text_delta("It is a chat assistant."))
    await surface.emit(assistant_end("It is a chat assistant."))
    await surface.emit(finished("done", "It is a chat assistant."))
    await surface.close()

    # The status line never glues onto half a line of the answer.
    assert out.getvalue() == "Let me look.\nIt is a chat assistant.\n"
    assert err.getvalue() == "⚙ Read README.md\n  ✓ read 0.1s\n"
    assert surface.finished is not None and surface.finished.outcome == "done"
    assert surface.closed.is_set()


async def test_thinking_is_not_printed() -> None:
    surface, out, err = make_surface()
    partial = AssistantMessage(model="m", provider="p")
    await surface.emit(
        MessageUpdate(message=partial, delta=ThinkingDelta(partial=partial, index=0, delta="hm"))
    )
    assert out.getvalue() == err.getvalue() == ""


def thinking_end(thinking: str, *, calls_tools: bool = True, text: str = "") -> MessageEnd:
    """A completed reply of a 5.5 model: summarized thinking, maybe text, maybe a tool call."""
    content: list[Thinking | Text | ToolCall] = [Thinking(thinking=thinking, signature="sig")]
    if text:
        content.append(Text(text=text))
    if calls_tools:
        content.append(ToolCall(id="call-1", name="read", arguments={"path": "deploy.log"}))
    return MessageEnd(
        message=AssistantMessage(
            model="m",
            provider="p",
            content=content,
            stop_reason="tool_use" if calls_tools else "stop",
        )
    )


async def test_thinking_narration_is_a_line_on_stderr_before_the_tools() -> None:
    surface, out, err = make_surface()
    await surface.emit(RunStarted(KEY, 1, ADA))
    await surface.emit(thinking_end("Checking the deploy log.\nIt should say why."))
    await surface.emit(
        ToolExecutionStart("call-1", "read", {"path": "deploy.log"}, "Read deploy.log")
    )
    await surface.emit(tool_end("read", "disk full"))
    await surface.emit(thinking_end("The disk was full: say so.", calls_tools=False))
    await surface.emit(text_delta("The disk was full."))
    await surface.emit(assistant_end("The disk was full."))
    await surface.emit(finished("done", "The disk was full."))
    await surface.close()

    assert err.getvalue() == (
        "Checking the deploy log. It should say why.\n⚙ Read deploy.log\n  ✓ read 0.1s\n"
    )
    assert out.getvalue() == "The disk was full.\n"  # the answer's own thinking: never


async def test_thinking_narration_is_dim_and_italic_on_a_terminal() -> None:
    out, err = io.StringIO(), io.StringIO()
    surface = TerminalSurface(KEY, out=out, err=err, styled=True)
    await surface.emit(thinking_end("Checking the deploy log."))
    assert err.getvalue() == "\x1b[2;3mChecking the deploy log.\x1b[0m\n"
    assert out.getvalue() == ""


async def test_a_reply_with_text_is_not_narrated_again_and_ask_shows_no_narration() -> None:
    surface, out, err = make_surface()
    await surface.emit(text_delta("Let me look."))
    await surface.emit(thinking_end("Musing.", text="Let me look."))
    assert (out.getvalue(), err.getvalue()) == ("Let me look.\n", "")

    quiet, out, err = make_surface(stream=False)
    await quiet.emit(thinking_end("Checking the deploy log."))
    assert (out.getvalue(), err.getvalue()) == ("", "")


async def test_a_failed_tool_shows_the_first_line_of_its_error() -> None:
    surface, _, err = make_surface()
    await surface.emit(
        ToolExecutionStart("call-1", "read", {"path": "missing.txt"}, "Read missing.txt")
    )
    await surface.emit(
        tool_end("read", "File not found: missing.txt\nTry ls first.", is_error=True)
    )
    assert err.getvalue() == "⚙ Read missing.txt\n  ✗ read: File not found: missing.txt\n"


async def test_ask_mode_prints_only_the_final_answer() -> None:
    surface, out, err = make_surface(stream=False)
    await surface.emit(text_delta("Let me look."))
    await surface.emit(assistant_end("Let me look."))
    await surface.emit(text_delta("Done: 42"))
    await surface.emit(finished("done", "Done: 42"))
    await surface.close()
    assert out.getvalue() == "Done: 42\n"
    assert err.getvalue() == ""


async def test_errors_and_notices_go_to_stderr_once() -> None:
    surface, out, err = make_surface(stream=False)
    refusal = "Daily budget reached: this conversation has used $1.00 of $1.00 today."
    await surface.emit(Notice(refusal, "warning"))
    await surface.emit(finished("error", "", refusal))  # the same words twice: shown once
    assert err.getvalue() == f"! {refusal}\n"
    assert out.getvalue() == ""
    assert surface.failed

    surface, _, err = make_surface()
    await surface.emit(finished("error", "", "The model is overloaded right now.\nTry later."))
    assert err.getvalue() == "✗ The model is overloaded right now.\n"


async def test_an_unexpected_failure_shows_its_reference() -> None:
    surface, _, err = make_surface()
    await surface.emit(Notice("Something went wrong on my side (reference ab12cd34).", "error"))
    await surface.close()
    assert "reference ab12cd34" in err.getvalue()
    assert surface.failed and surface.finished is None


async def test_a_failed_runs_reference_is_shown_once() -> None:
    surface, _, err = make_surface()
    text = "Something went wrong on my side (reference ab12cd34). The team can look it up."
    failed = RunFinished(KEY, 1, "error", Usage(), "", text, reference="ab12cd34")
    await surface.emit(failed)
    assert err.getvalue().count("ab12cd34") == 1
    assert surface.failed


async def test_a_stopped_run_is_marked_as_stopped_not_failed() -> None:
    surface, out, err = make_surface()
    await surface.emit(text_delta("Once upon a"))
    await surface.emit(finished("aborted", "", "Stopped by ada."))
    assert out.getvalue() == "Once upon a\n"
    assert err.getvalue() == "■ Stopped by ada.\n"
    assert not surface.failed


async def test_a_tool_call_is_shown_by_the_label_the_loop_gives_else_its_name() -> None:
    surface, _out, err = make_surface()
    await surface.emit(ToolExecutionStart("t1", "read", {"path": "a.txt"}, "Read a.txt"))
    await surface.emit(ToolExecutionStart("t2", "mystery", {"x": 1}))
    await surface.emit(ToolExecutionStart("t3", "read", {}, "Read " + "x" * 300))
    first, second, third = err.getvalue().splitlines()
    assert (first, second) == ("⚙ Read a.txt", "⚙ mystery")
    assert len(third) == len("⚙ ") + 100 and third.endswith("…")


async def test_interrupted_runs_are_reported_for_terminal_conversations_only() -> None:
    err = io.StringIO()
    surfaces = TerminalSurfaces(err=err, current_key=KEY)
    assert surfaces.for_ref("slack:T:C:1", {"surface": "slack"}) is None
    here = surfaces.for_ref(KEY, {"platform": "terminal", "conversation": KEY})
    other = surfaces.for_ref("terminal:work", {"platform": "terminal"})
    assert here is not None and other is not None
    await here.emit(Notice("My previous answer here was interrupted.", "warning"))
    await other.emit(Notice("My previous answer here was interrupted.", "warning"))
    assert err.getvalue().splitlines() == [
        "! My previous answer here was interrupted.",
        "[terminal:work] ! My previous answer here was interrupted.",
    ]


# -- the chat loop, in process -------------------------------------------------------------------


async def test_chat_commands(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "data", model="scripted")
    read_end, write_end = os.pipe()
    out, err = io.StringIO(), io.StringIO()
    reply = "This is the scripted model: it answers the same to everything.\n"
    try:
        async with open_app(settings, platform_rules=TERMINAL_RULES) as app:
            chat = asyncio.create_task(
                run_chat(
                    app,
                    "t",
                    lines=StdinLines(read_end),
                    out=out,
                    err=err,
                    interactive=False,
                    model_id="scripted",
                )
            )
            os.write(write_end, b"hi\n")
            await eventually("the answer", lambda: out.getvalue() == reply)
            await eventually("the run to end", lambda: not app.runner.is_running("terminal:t"))
            os.write(write_end, b"/stop\n/nonsense\n/reset\n")
            await eventually("the reset", lambda: "Conversation reset" in err.getvalue())
            assert "Nothing is running." in err.getvalue()
            assert "Unknown command /nonsense" in err.getvalue()

            os.write(write_end, b"//etc/hosts is a path\n")
            os.close(write_end)  # end of input: the running answer finishes, then chat ends
            write_end = -1
            assert await asyncio.wait_for(chat, 10) == 0
            assert out.getvalue() == reply * 2
            conversation = await app.store.get_conversation("terminal:t")
            assert conversation is not None
            loaded = await app.store.load(conversation.id)
            # After the reset only the new exchange is seen; the // escape sent "/etc/hosts...".
            texts = [stored.message.text() for stored in loaded.messages]
            assert len(texts) == 2 and texts[0].endswith("\n/etc/hosts is a path")
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


HOSTILE = "\x1b]52;c;ZXZpbA==\x07\x1b[2J\x1b]0;pwned\x07\u202eevil\x00\x9b"


async def test_nothing_a_terminal_would_obey_reaches_it_from_a_tool_or_the_model() -> None:
    # An MCP server's tool name and error, a tool's output and the model's own text are not
    # ours: OSC 52 (write the clipboard), clear screen, set title, bidi overrides, NUL and C1
    # controls are left out; the text around them is shown (issue 23, Also).
    for stream in (True, False):
        surface, out, err = make_surface(stream=stream)
        await surface.emit(RunStarted(KEY, 1, ADA))
        await surface.emit(
            ToolExecutionStart("call-1", f"mcp__x{HOSTILE}", {}, f"Look {HOSTILE}up")
        )
        await surface.emit(tool_end(f"mcp__x{HOSTILE}", f"bad {HOSTILE}thing", is_error=True))
        answer = f"Done {HOSTILE}now."
        if stream:
            await surface.emit(text_delta(answer))
            await surface.emit(assistant_end(answer))
        await surface.emit(finished("done", answer, error_text=f"odd {HOSTILE}end"))
        await surface.close()
        shown = out.getvalue() + err.getvalue()
        assert not any(ch in shown for ch in "\x1b\x07\x00\x9b\u202e"), repr(shown)
        assert "Done ]52;c;ZXZpbA==[2J]0;pwnedevilnow." in out.getvalue()
        assert "Look" in err.getvalue() and "bad" in err.getvalue()


def test_printable_keeps_text_newlines_and_tabs() -> None:
    from bots.platforms.terminal.text import printable

    assert printable("a\tb\nc — ü 日本") == "a\tb\nc — ü 日本"
    assert printable("x\x1b[31my\r") == "x[31my"
