"""Teammate in a terminal: `teammate chat` and `teammate ask` on the shared runner.

Owns: `TerminalSurface` (on the shared `bots.surface.base.SurfaceBase`: the answer on stdout;
tool activity, a reply's thinking narration, notices and errors as compact lines on stderr),
`TerminalSurfaces` (reporting interrupted terminal runs after a restart), reading stdin lines
without blocking the event loop, and the chat and ask loops with their slash commands and
Ctrl-C handling.

Must not: touch storage or models directly (the runner does), or print a secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from bots.app import App
from bots.budgets import utc_day_start
from bots.incoming import Incoming
from bots.platforms.terminal.approvals import ApprovalHooks, ReadLine, TerminalApprovals
from bots.platforms.terminal.text import printable, usage_line
from bots.runner import ConversationRunner
from bots.surface.base import SurfaceBase
from bots.surface.contract import FileOut, Notice, NoticeLevel, RunFinished, Surface
from bots.surface.narration import thinking_narration
from core.events import ToolExecutionEnd, ToolExecutionStart
from core.messages import AssistantMessage, Author

PLATFORM = "terminal"
DEFAULT_CONVERSATION = "default"

TERMINAL_RULES = """\
You are talking with one person in a terminal. Your reply is printed as plain text: Markdown is \
not rendered, so use it lightly (short paragraphs, `-` lists, fenced code blocks for code and \
commands) and avoid tables and headings. Keep lines readable in an 80-100 column window."""

HELP = """\
Type a message and press Enter. Lines typed while Teammate works are passed to it as they come.
  /stop    stop the running answer (Ctrl-C does the same)
  /reset   start this conversation afresh (earlier messages are no longer seen)
  /usage   tokens and cost of this conversation, in total and today
  /help    this help
  /exit    quit (Ctrl-D too; at end of piped input the running answer is finished first)
Start a message with // to send a line that begins with /."""

_SUMMARY_LIMIT = 100
_ERROR_LIMIT = 160
_DIM_ITALIC = "\x1b[2;3m"
_RESET = "\x1b[0m"


def conversation_key(name: str) -> str:
    return f"{PLATFORM}:{name}"


def local_author() -> Author:
    """The person at this terminal: the OS user."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no USER/LOGNAME (some containers)
        name = "user"
    return Author(id=f"local:{name}", name=name)


def terminal_incoming(name: str, author: Author, text: str) -> Incoming:
    key = conversation_key(name)
    return Incoming(
        conversation_key=key,
        channel_key=key,  # a terminal conversation has its own workspace
        author=author,
        text=text,
        delivery_id=f"terminal:{uuid.uuid4()}",
        timestamp=time.time(),
        title=f"terminal conversation {name}",
    )


def _one_line(text: str, limit: int) -> str:
    line = " ".join(text.strip().splitlines()[0].split()) if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


class TerminalSurface(ApprovalHooks, SurfaceBase):
    """Shows one conversation's runs in a terminal.

    `stream=True` (chat) writes the answer to `out` as it arrives; `stream=False` (ask) writes
    only each run's final answer when the run finishes. Tool activity, notices and errors go
    to `err`, one compact line each; so does (when streaming) the narration of a reply that
    calls tools with thinking instead of text (the 5.5 models), dim and italic where `err` is
    a terminal (`styled`; by default: `err` is a tty and `NO_COLOR` is unset). `finished` is
    the last run's outcome (None if a run failed before reporting one); `closed` is set when
    the runner is done with this surface.

    Its lifecycle, which `ask` and `chat` read (`finished`, `closed`):

        showing ── run_finished: `finished` set ──▶ finished ── close: `closed` set ──▶ closed
           └───── close (a steered line's surface; a run that failed before its end) ──┘

    While showing, the answer's current line on `out` is open (`_out_open`) until a status
    line on `err`, the reply's end or the close ends it: no line is glued onto half of one.
    """

    def __init__(
        self,
        conversation_key: str,
        *,
        out: TextIO,
        err: TextIO,
        stream: bool = True,
        label: str = "",
        on_close: Callable[[], None] | None = None,
        styled: bool | None = None,
    ) -> None:
        self._key = conversation_key
        self._out = out
        self._err = err
        self._stream = stream
        self._label = f"[{label}] " if label else ""
        self._on_close = on_close
        self._styled = _is_terminal(err) if styled is None else styled
        self._out_open = False  # the answer's current line on `out` is unterminated
        self._notices: list[str] = []
        self.finished: RunFinished | None = None
        self.failed = False  # an error was shown (a run may have ended without RunFinished)
        self.closed = asyncio.Event()

    @property
    def ref(self) -> dict[str, Any]:
        return {"platform": PLATFORM, "conversation": self._key}

    # -- the hooks (bots.surface.base) -------------------------------------------------------

    async def on_text(self, message: AssistantMessage, delta: str) -> None:
        if self._stream and delta:
            self._write_out(delta)

    async def on_reply_ended(self, message: AssistantMessage) -> None:
        self._end_out_line()
        # A reply's own text has streamed to `out`; its thinking narrates on `err`.
        # `ask` shows neither: its output is the answer alone, whatever the model.
        narration = thinking_narration(message) if self._stream else ""
        if narration:
            self._narrate(narration)

    async def on_tool_started(self, event: ToolExecutionStart) -> None:
        self._line(f"⚙ {_one_line(event.label or event.tool_name, _SUMMARY_LIMIT)}")

    async def on_file(self, event: FileOut) -> None:
        self._line(f"📎 {event.name} ({event.path})")

    async def on_tool_ended(self, event: ToolExecutionEnd) -> None:
        self._line(_tool_end_line(event))

    async def on_notice(self, event: Notice) -> None:
        self._notices.append(event.text)
        if event.level == "error":
            self.failed = True
        self._line(f"{_NOTICE_MARK[event.level]} {_one_line(event.text, 400)}")

    async def on_run_finished(self, event: RunFinished) -> None:
        self._finish(event)

    async def close(self) -> None:
        self._end_out_line()
        self._flush()
        if not self.closed.is_set():
            self.closed.set()
            if self._on_close is not None:
                self._on_close()

    # -- rendering -------------------------------------------------------------------------

    def _finish(self, event: RunFinished) -> None:
        self.finished = event
        self.failed = self.failed or event.outcome == "error"
        self._end_out_line()
        if not self._stream and event.final_text.strip():
            self._out.write(printable(event.final_text.rstrip("\n")) + "\n")
            self._out.flush()
        if event.error_text and event.error_text not in self._notices:
            text = _one_line(event.error_text, 400)
            if event.reference and event.reference not in text:
                text += f" (reference {event.reference})"
            if event.outcome == "aborted":
                self._line(f"■ {text}")
            else:
                self._line(f"✗ {text}")

    def _write_out(self, text: str) -> None:
        text = printable(text)
        self._out.write(text)
        self._out.flush()
        self._out_open = not text.endswith("\n")

    def _end_out_line(self) -> None:
        if self._out_open:
            self._out.write("\n")
            self._out.flush()
            self._out_open = False

    def _line(self, text: str, *, style: tuple[str, str] = ("", "")) -> None:
        self._end_out_line()  # never glue a status line onto half a line of the answer
        self._err.write(f"{self._label}{style[0]}{printable(text)}{style[1]}\n")
        self._err.flush()

    def _narrate(self, text: str) -> None:
        line = " ".join(text.split())  # one line among the tool lines, however it was written
        self._line(line, style=(_DIM_ITALIC, _RESET) if self._styled else ("", ""))

    def _flush(self) -> None:
        for stream in (self._out, self._err):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()


# Plain marks of the terminal's own, one column wide, not the other platforms' emoji
# (`bots.surface.base.NOTICE_MARK`): a stopped answer ends with "■", any other error with "✗".
_NOTICE_MARK: dict[NoticeLevel, str] = {"info": "·", "warning": "!", "error": "✗"}


def _is_terminal(stream: TextIO) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    try:
        return stream.isatty()
    except (OSError, ValueError):  # closed, or not a real file
        return False


def _tool_end_line(event: ToolExecutionEnd) -> str:
    if event.is_error:
        reason = _one_line(event.result.text(), _ERROR_LIMIT) or "failed"
        return f"  ✗ {event.tool_name}: {reason}"
    return f"  ✓ {event.tool_name} {event.duration_s:.1f}s"


class TerminalSurfaces:
    """Surfaces for earlier terminal runs (a restart reports an interrupted answer on stderr)."""

    def __init__(self, *, err: TextIO, current_key: str) -> None:
        self._err = err
        self._current = current_key
        self.approvals: TerminalApprovals | None = None  # chat's: a resumed run asks there

    def for_ref(self, conversation_key: str, ref: dict[str, Any]) -> Surface | None:
        if ref.get("platform") != PLATFORM:
            return None
        label = "" if conversation_key == self._current else conversation_key
        surface = TerminalSurface(conversation_key, out=self._err, err=self._err, label=label)
        surface.approvals = None if label else self.approvals
        return surface


# -- reading stdin -------------------------------------------------------------------------------


class StdinLines:
    """Lines from a file descriptor, read by a daemon thread so the event loop never blocks.

    It reads the raw descriptor (not `sys.stdin`): a thread left blocked in `os.read` at exit
    holds no interpreter lock that shutdown needs. `None` marks end of input.
    """

    def __init__(self, fd: int = 0) -> None:
        self._fd = fd
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        threading.Thread(target=self._pump, name="stdin-lines", daemon=True).start()

    async def get(self) -> str | None:
        return await self._queue.get()

    def _pump(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                if buffer:
                    self._put(buffer.decode("utf-8", "replace"))
                self._put(None)
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if not self._put(line.decode("utf-8", "replace").rstrip("\r")):
                    return

    def _put(self, item: str | None) -> bool:
        loop = self._loop
        if loop is None or loop.is_closed():
            return False
        try:
            loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop closed meanwhile
            return False
        return True


@contextlib.contextmanager
def _sigint(handler: Callable[[], None]) -> Iterator[None]:
    """Route Ctrl-C to `handler` instead of KeyboardInterrupt while inside."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, handler)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or Windows
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)


# -- ask -----------------------------------------------------------------------------------------


async def run_ask(
    app: App, name: str, prompt: str, *, out: TextIO, err: TextIO, read_line: ReadLine = None
) -> int:
    """One message, answered: 0 on success, 1 if the run failed, 130 if it was interrupted.
    `read_line` reads an approval's answer from the terminal (None: there is none: denied)."""
    key = conversation_key(name)
    author = local_author()
    runner = app.runner
    await runner.recover()
    surface = TerminalSurface(key, out=out, err=err, stream=False)
    surface.approvals = TerminalApprovals(runner.approvals, key, author, err, read_line)

    def interrupt() -> None:
        runner.stop(key, by=author)  # this run and anything queued behind it

    with _sigint(interrupt):
        result = await runner.submit(terminal_incoming(name, author, prompt), surface)
        if result == "steered":  # another run of ours in this process? never in `ask`
            await runner.wait(key)
        else:
            await surface.closed.wait()
    finished = surface.finished
    if finished is None:
        return 1
    if finished.outcome == "aborted":
        return 130
    if finished.outcome != "done" or surface.failed:
        return 1
    return 0


# -- chat ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Chat:
    app: App
    name: str
    author: Author
    out: TextIO
    err: TextIO
    interactive: bool
    approvals: TerminalApprovals | None = None  # the y/n questions a run asks

    @property
    def key(self) -> str:
        return conversation_key(self.name)

    @property
    def runner(self) -> ConversationRunner:
        return self.app.runner

    def say(self, text: str) -> None:
        self.err.write(text + "\n")
        self.err.flush()

    def prompt(self) -> None:
        if self.interactive:
            self.err.write("› ")
            self.err.flush()

    def interrupt(self) -> None:
        if self.runner.stop(self.key, by=self.author) == "stopped":
            self.say("\n^C stopping…")
        else:
            self.say("\n(Ctrl-C stops a running answer; type /exit or press Ctrl-D to quit.)")
            self.prompt()

    def idle(self) -> None:
        """A surface closed: a run ended, or a steered line was taken in (no prompt yet)."""
        if not self.runner.is_running(self.key):
            self.prompt()

    async def send(self, text: str) -> None:
        if self.approvals is not None and await self.approvals.answer(text):
            return  # the answer to an open approval question, not a message
        surface = TerminalSurface(
            self.key,
            out=self.out,
            err=self.err,
            stream=True,
            on_close=self.idle,
        )
        surface.approvals = self.approvals
        # A line typed while Teammate works is acknowledged on its own surface (a notice).
        await self.runner.submit(terminal_incoming(self.name, self.author, text), surface)

    async def command(self, line: str) -> bool:
        """Run a slash command; False means quit."""
        command = line.split()[0].lower()
        if command in ("/exit", "/quit"):
            await self.leave()
            return False
        if command == "/stop":
            if self.runner.stop(self.key, by=self.author) != "stopped":
                self.say("Nothing is running.")
        elif command == "/reset":
            if self.runner.is_running(self.key):
                self.runner.stop(self.key, by=self.author)
                await self.runner.wait(self.key)
            if await self.runner.reset(self.key):
                self.say("Conversation reset: Teammate no longer sees the earlier messages.")
            else:
                self.say("Nothing to reset.")
        elif command == "/usage":
            await self.show_usage()
        elif command == "/help":
            self.say(HELP)
        else:
            self.say(f"Unknown command {command}. /help lists the commands.")
        if not self.runner.is_running(self.key):
            self.prompt()
        return True

    async def leave(self) -> None:
        """Piped input ends here: its answers come first (what it said is answered now, not at
        the next start, out of context). Typed: the running answer is stopped, and what that
        drops is said (the stop's notice lists the messages left unanswered)."""
        if self.runner.is_running(self.key) and self.interactive:
            self.say("Leaving: stopping the answer in progress.")
            self.runner.stop(self.key, by=self.author)
        await self.runner.wait(self.key)

    async def show_usage(self) -> None:
        total = await self.runner.usage(self.key)
        today = await self.runner.usage(self.key, since=utc_day_start(time.time()))
        self.say(f"usage of {self.key}:")
        self.say(f"  today  {usage_line(today)}")
        self.say(f"  total  {usage_line(total)}")


async def run_chat(
    app: App,
    name: str,
    *,
    lines: StdinLines,
    out: TextIO,
    err: TextIO,
    interactive: bool,
    model_id: str,
    approvals: TerminalApprovals | None = None,
) -> int:
    """The interactive conversation. Returns the exit status (0). `approvals`: where its
    runs' approval questions are asked and answered (None: nothing is asked here)."""
    chat = _Chat(app, name, local_author(), out, err, interactive, approvals)
    await app.runner.recover()
    chat.say(f"Teammate · {model_id} · conversation {name!r} · /help for commands, /exit to quit")
    lines.start()
    chat.prompt()
    with _sigint(chat.interrupt):
        while True:
            line = await lines.get()
            if line is None:  # end of input: let the running answer finish, then quit
                await app.runner.wait(chat.key)
                if interactive:
                    chat.say("")
                break
            text = line.strip()
            if not text:
                chat.prompt()
                continue
            if text.startswith("/") and not text.startswith("//"):
                if not await chat.command(text):
                    break
                continue
            await chat.send(text[1:] if text.startswith("//") else text)
    return 0
