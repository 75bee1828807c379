"""The bot's own file IO for a conversation never follows a link out of the workspace.

Sandboxed `bash` (or anyone with the workspace) can plant `attachments -> /somewhere` or swap a
file a tool offers to attach for a link to a host file. The next upload must not land outside,
and no host file may be handed to a surface to post in chat.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from bots.incoming import Attachment
from bots.surface.contract import FileOut, SurfaceEvent
from bots.workspaces import workspace_name
from core.messages import UserMessage
from core.models.scripted import Reply, ScriptedModel, call
from core.tools import AgentTool, ToolContext, ToolResult
from storage.sqlite import SqliteStore
from tests.bots.runner_helpers import CHANNEL, KEY, incoming, make_runner
from tests.fakes.recording_surface import RecordingSurface


def workspace_of(tmp_path: Path) -> Path:
    workspace = tmp_path / "workspaces" / workspace_name(CHANNEL)
    workspace.mkdir(parents=True, exist_ok=True)
    return workspace


async def test_an_upload_never_follows_a_planted_attachments_link(
    store: SqliteStore, tmp_path: Path
) -> None:
    host = tmp_path / "host-dir"
    host.mkdir()
    (workspace_of(tmp_path) / "attachments").symlink_to(host)
    model = ScriptedModel([Reply(text="ok")])
    runner = make_runner(store, tmp_path, model)

    document = Attachment(name="evil.sh", mime_type="text/plain", data=b"#!/bin/sh\nrm -rf ~\n")
    await runner.submit(incoming("here is a file", attachments=(document,)), RecordingSurface())
    await runner.wait(KEY)

    assert list(host.iterdir()) == []  # nothing written through the link
    [sent] = model.requests[0].messages
    assert isinstance(sent, UserMessage)
    assert "evil.sh" in sent.text() and "could not be saved" in sent.text()


class OfferParams(BaseModel):
    name: str


class OfferTool(AgentTool[OfferParams]):
    """Writes a report and offers it to attach."""

    name = "offer"
    label = "Offer"
    description = "Offer a file to attach."
    parameters = OfferParams

    async def execute(self, call_id: str, params: OfferParams, ctx: ToolContext) -> ToolResult:
        (ctx.workspace / params.name).write_text("the report")
        offered = [{"path": params.name, "name": "report.txt", "mime_type": "text/plain"}]
        return ToolResult.text("written", details={"files_out": offered})


class SwappingSurface(RecordingSurface):
    """Swaps the offered file for a link to a host file as the event arrives (a racing command
    could), then takes what it would upload."""

    def __init__(self, workspace: Path, host_file: Path) -> None:
        super().__init__()
        self.workspace = workspace
        self.host_file = host_file
        self.uploaded: list[bytes] = []

    async def emit(self, event: SurfaceEvent) -> None:
        await super().emit(event)
        if isinstance(event, FileOut):
            offered = self.workspace / "r.txt"
            offered.unlink()
            offered.symlink_to(self.host_file)
            self.uploaded.append(event.data)


async def test_a_file_offered_to_attach_is_what_the_tool_wrote_never_a_host_file(
    store: SqliteStore, tmp_path: Path
) -> None:
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret-hash")
    workspace = workspace_of(tmp_path)
    model = ScriptedModel([Reply(tool_calls=[call("offer", {"name": "r.txt"})]), Reply(text="ok")])
    runner = make_runner(store, tmp_path, model, tools=[OfferTool()])
    surface = SwappingSurface(workspace, secret)

    await runner.submit(incoming("attach the report"), surface)
    await runner.wait(KEY)

    assert surface.uploaded == [b"the report"]


async def test_an_offered_link_to_a_host_file_is_not_attached(
    store: SqliteStore, tmp_path: Path
) -> None:
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret-hash")
    workspace = workspace_of(tmp_path)
    (workspace / "r.txt").symlink_to(secret)

    class OfferLink(OfferTool):
        async def execute(self, call_id: str, params: OfferParams, ctx: ToolContext) -> ToolResult:
            offered = [{"path": params.name, "name": "report.txt"}]
            return ToolResult.text("offered", details={"files_out": offered})

    model = ScriptedModel([Reply(tool_calls=[call("offer", {"name": "r.txt"})]), Reply(text="ok")])
    runner = make_runner(store, tmp_path, model, tools=[OfferLink()])
    surface = RecordingSurface()

    await runner.submit(incoming("attach the report"), surface)
    await runner.wait(KEY)

    assert [e for e in surface.events if isinstance(e, FileOut)] == []


async def test_a_repeated_delivery_does_not_save_its_files_again(
    store: SqliteStore, tmp_path: Path
) -> None:
    folder = workspace_of(tmp_path) / "attachments"
    folder.mkdir()
    (folder / "notes.txt").write_text("someone else's notes")  # a different file, same name
    model = ScriptedModel([Reply(text="ok")])
    runner = make_runner(store, tmp_path, model)
    notes = Attachment(name="notes.txt", mime_type="text/plain", data=b"our notes")

    for _ in range(3):  # the platform retries the same event
        await runner.submit(
            incoming("see attached", attachments=(notes,), delivery="Ev-retried"),
            RecordingSurface(),
        )
        await runner.wait(KEY)

    assert sorted(p.name for p in folder.iterdir()) == ["notes-1.txt", "notes.txt"]
    assert (folder / "notes-1.txt").read_bytes() == b"our notes"
    assert len(model.requests) == 1
