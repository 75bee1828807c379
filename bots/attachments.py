"""Files that come with a message: images go to the model, other files into the workspace.

Owns: building the attributed `UserMessage` for an `Incoming` (header, text, inline images
fitted to the API's per-image rules by `tools.content.fit_image` in a worker thread: at most
2000 px a side and 5 MB of base64, so history never holds an image a request must refuse; one
that cannot be fitted is saved as a file and the text says why), saving other attachments
under the channel workspace's `attachments/` with safe, unique names, and files out: the files
a tool result offers to attach (`details["files_out"]`, a list of `{"path", "name",
"mime_type"}` with `path` relative to the workspace), read at once so what a surface posts is
what the tool wrote. Both go through the tools' confined IO
(`tools.workspace`): the workspace is shared with sandboxed `bash`, which can plant links, so
no link is ever followed, by name or by a race. File system work happens in a worker thread,
never on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from bots.incoming import Attachment, Incoming
from bots.prompt import attributed_text
from bots.surface.contract import FileOut
from bots.workspaces import UNSAFE
from core.messages import Image, Text, ToolResultMessage, UserMessage
from core.tools import ToolError
from tools.content import ImageError, PreparedImage, fit_image, sniff_image
from tools.workspace import read_file_in_workspace, write_file_in_workspace

log = logging.getLogger(__name__)

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
MAX_IMAGE_INPUT_BYTES = 32 * 1024 * 1024  # a bigger image is saved as a file, never decoded
# A JPEG is decoded scaled down (a 48-megapixel phone photo costs a few), other formats whole.
MAX_IMAGE_PIXELS = 25_000_000
MAX_JPEG_PIXELS = 100_000_000
MAX_ATTACHMENT_BYTES = 64 * 1024 * 1024
SAME_NAME_CHECKS = 20  # files of one name looked at for an identical, earlier copy
MAX_FILES_OUT = 10
MAX_FILE_OUT_BYTES = 25 * 1024 * 1024  # what Discord accepts without boosts; Slack takes more
MAX_FILES_OUT_BYTES = 50 * 1024 * 1024  # all the files of one tool result together


async def user_message(incoming: Incoming, workspace: Path) -> UserMessage:
    """The message the model reads for `incoming`, attachments saved or inlined."""
    text = attributed_text(incoming.author, incoming.timestamp, incoming.text)
    images: list[Image] = []
    for attachment in incoming.attachments:
        problem = ""
        if _is_image(attachment):
            try:
                fitted = await asyncio.to_thread(fit_attached_image, attachment.data)
            except ImageError as exc:
                log.info("an attached image could not be used: %s", exc)
                problem = f"could not be shown to you as an image ({exc})"
            else:
                images.append(Image(data=fitted.data_b64, mime_type=fitted.mime_type))
                if fitted.resized:
                    (w, h), (sw, sh) = fitted.original_size, fitted.size
                    text += f"\n(attached image {attachment.name!r}, {w}×{h}, scaled to {sw}×{sh})"
                continue
        try:
            saved = await asyncio.to_thread(save_attachment, workspace, attachment)
        except ToolError as exc:
            log.warning("an attachment was not saved: %s", exc)
            text += f"\n(attached file {attachment.name!r} could not be saved: {exc})"
        else:
            text += f"\n(attached file {attachment.name!r}, saved in the workspace as {saved})"
        if problem:
            # Said in the text, so the model can tell the person (the rest is answered as usual).
            text += f"\n(the attached image {attachment.name!r} {problem}; tell the person)"
    content: str | list[Text | Image] = [Text(text=text), *images] if images else text
    return UserMessage(
        content=content,
        author=incoming.author,
        timestamp=incoming.timestamp,
        platform_message_id=incoming.platform_message_id,
    )


def _is_image(attachment: Attachment) -> bool:
    return attachment.mime_type in IMAGE_TYPES or sniff_image(attachment.data[:16]) is not None


def fit_attached_image(data: bytes) -> PreparedImage:
    """`data` fitted to the API's per-image rules (blocking: decodes). Raises ImageError for
    an image too big to decode, corrupt or of a format Pillow cannot read."""
    if len(data) > MAX_IMAGE_INPUT_BYTES:
        raise ImageError(f"it is larger than {MAX_IMAGE_INPUT_BYTES // 2**20} MiB")
    jpeg = sniff_image(data[:16]) == "JPEG"
    return fit_image(data, max_pixels=MAX_JPEG_PIXELS if jpeg else MAX_IMAGE_PIXELS)


def save_attachment(workspace: Path, attachment: Attachment) -> str:
    """Write `attachment` under `workspace/attachments/` (an existing file keeps its name; the
    new one gets `name-N.ext`); its path relative to the workspace. Raises `ToolError` if a
    link is in the way or the file is too big: nothing is written then."""
    wanted = f"attachments/{safe_file_name(attachment.name)}"
    already = _saved_before(workspace, wanted, attachment.data)
    if already is not None:
        return already
    return write_file_in_workspace(
        workspace, wanted, attachment.data, max_bytes=MAX_ATTACHMENT_BYTES, unique=True
    )


def _saved_before(workspace: Path, wanted: str, data: bytes) -> str | None:
    """The name this very content was saved under, if a platform's retry of the same event
    brings it again (attachments are saved before the delivery is found to be a repeat)."""
    stem, dot, suffix = wanted.rpartition(".")
    if not dot or "/" in suffix:
        stem, dot, suffix = wanted, "", ""
    for n in range(SAME_NAME_CHECKS):
        candidate = wanted if n == 0 else f"{stem}-{n}{dot}{suffix}"
        try:
            if read_file_in_workspace(workspace, candidate, max_bytes=len(data)) == data:
                return candidate
        except ToolError:  # missing, bigger, or not a plain file: not this content
            continue
    return None


async def files_out(result: ToolResultMessage, workspace: Path) -> list[FileOut]:
    """The files `result` offers to attach, each inside `workspace`; others are ignored."""
    details = result.details
    offered = details.get("files_out") if isinstance(details, dict) else None
    if not isinstance(offered, list) or not offered:
        return []
    return await asyncio.to_thread(_checked_files, offered[:MAX_FILES_OUT], workspace)


def _checked_files(offered: list[Any], workspace: Path) -> list[FileOut]:
    files: list[FileOut] = []
    budget = MAX_FILES_OUT_BYTES
    for entry in offered:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            continue
        path: str = entry["path"]
        try:
            data = read_file_in_workspace(
                workspace, path, max_bytes=min(MAX_FILE_OUT_BYTES, budget)
            )
        except ToolError as exc:
            log.warning("a tool offered a file that cannot be attached; ignored: %s", exc)
            continue
        budget -= len(data)
        name = entry.get("name")
        mime = entry.get("mime_type")
        files.append(
            FileOut(
                path=path,
                name=name if isinstance(name, str) and name else Path(path).name,
                mime_type=mime if isinstance(mime, str) and mime else "application/octet-stream",
                data=data,
            )
        )
    return files


def safe_file_name(name: str) -> str:
    base = Path(name).name
    cleaned = UNSAFE.sub("_", base).strip("._")[:100]
    return cleaned or "file"
