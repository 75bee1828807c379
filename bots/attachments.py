"""Files that come with a message: images go to the model, other files into the workspace.

Owns: building the attributed `UserMessage` for an `Incoming` (header, text, inline images),
saving other attachments under the channel workspace's `attachments/` with safe, unique names,
and files out: the files a tool result offers to attach (`details["files_out"]`, a list of
`{"path", "name", "mime_type"}` with `path` relative to the workspace), checked to be regular
files inside the workspace. File system work happens in a worker thread, never on the event
loop.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from pathlib import Path
from typing import Any

from bots.incoming import Attachment, Incoming
from bots.prompt import attributed_text
from bots.surface import FileOut
from bots.workspaces import UNSAFE
from core.messages import Image, Text, ToolResultMessage, UserMessage

log = logging.getLogger(__name__)

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
MAX_INLINE_IMAGE_BYTES = 5 * 1024 * 1024


async def user_message(incoming: Incoming, workspace: Path) -> UserMessage:
    """The message the model reads for `incoming`, attachments saved or inlined."""
    text = attributed_text(incoming.author, incoming.timestamp, incoming.text)
    images: list[Image] = []
    for attachment in incoming.attachments:
        if attachment.mime_type in IMAGE_TYPES and len(attachment.data) <= MAX_INLINE_IMAGE_BYTES:
            data = base64.b64encode(attachment.data).decode()
            images.append(Image(data=data, mime_type=attachment.mime_type))
        else:
            saved = await asyncio.to_thread(save_attachment, workspace, attachment)
            text += f"\n(attached file {attachment.name!r}, saved in the workspace as {saved})"
    content: str | list[Text | Image] = [Text(text=text), *images] if images else text
    return UserMessage(
        content=content,
        author=incoming.author,
        timestamp=incoming.timestamp,
        platform_message_id=incoming.platform_message_id,
    )


def save_attachment(workspace: Path, attachment: Attachment) -> str:
    """Write `attachment` under `workspace/attachments/`; its path relative to the workspace."""
    folder = workspace / "attachments"
    folder.mkdir(exist_ok=True)
    name = safe_file_name(attachment.name)
    target = folder / name
    counter = 1
    while target.exists():
        target = folder / f"{Path(name).stem}-{counter}{Path(name).suffix}"
        counter += 1
    target.write_bytes(attachment.data)
    return f"attachments/{target.name}"


MAX_FILES_OUT = 10


async def files_out(result: ToolResultMessage, workspace: Path) -> list[FileOut]:
    """The files `result` offers to attach, each inside `workspace`; others are ignored."""
    details = result.details
    offered = details.get("files_out") if isinstance(details, dict) else None
    if not isinstance(offered, list) or not offered:
        return []
    return await asyncio.to_thread(_checked_files, offered[:MAX_FILES_OUT], workspace)


def _checked_files(offered: list[Any], workspace: Path) -> list[FileOut]:
    root = workspace.resolve()
    files: list[FileOut] = []
    for entry in offered:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            continue
        path = (root / entry["path"]).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            log.warning("a tool offered a file outside the workspace or missing; ignored")
            continue
        name = entry.get("name")
        mime = entry.get("mime_type")
        files.append(
            FileOut(
                path=path,
                name=name if isinstance(name, str) and name else path.name,
                mime_type=mime if isinstance(mime, str) and mime else "application/octet-stream",
            )
        )
    return files


def safe_file_name(name: str) -> str:
    base = Path(name).name
    cleaned = UNSAFE.sub("_", base).strip("._")[:100]
    return cleaned or "file"
