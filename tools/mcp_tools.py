"""An MCP server's tools as ordinary `AgentTool`s.

Owns: what the model sees of a server's tool (`ListedTool`: its name prefixed by the server and
fitted to the model API's pattern `^[a-zA-Z0-9_-]{1,64}$`, its description and input schema
bounded), and `McpTool`, which calls it and turns the result into what our tools return: text
truncated like ours (`tools.truncation`), images checked and fitted like `read`'s, embedded
resources as text, binary ones named but not sent; an error result or a failed call becomes an
`is_error` observation (`ToolError`), never an exception out of the loop.

Arguments are passed to the server as the model wrote them: the server validates them against
its own schema and says what is wrong.

Must not: import anything of ours outside `core` and `tools`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
import json
import re
from typing import Any, ClassVar

import mcp_types
from pydantic import BaseModel, ConfigDict

from core.messages import Image, Text, ToolResultContent
from core.models.base import ToolSpec
from core.tools import AgentTool, ToolContext, ToolError, ToolResult
from tools.content import ImageError, prepare_image, sniff_image
from tools.mcp_client import McpCallFailed, McpServer, McpUnavailable, Redactor
from tools.truncation import DEFAULT_MAX_BYTES, format_size, truncate_head

MAX_NAME_CHARS = 64
MAX_REMOTE_NAME_CHARS = 128
MAX_DESCRIPTION_CHARS = 2000
MAX_SCHEMA_BYTES = 16 * 1024
MAX_IMAGES_PER_RESULT = 4
# Base64 of the largest image `read` would accept before fitting it (tools.content).
MAX_IMAGE_B64_CHARS = 12 * 1024 * 1024

_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_-]")
_PERMISSIVE_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class McpArguments(BaseModel):
    """Whatever the model wrote: the server checks it against its own schema."""

    model_config = ConfigDict(extra="allow")


class ListedTool(BaseModel):
    """A server's tool as the model sees it (bounded), and the server's own name for it."""

    model_config = ConfigDict(frozen=True)

    name: str  # ours: `server__tool`
    remote_name: str  # the server's
    description: str
    input_schema: dict[str, Any]


def tool_name(server: str, remote: str, taken: set[str]) -> str:
    """`server__remote` with characters outside the pattern replaced, at most 64 characters,
    distinct from `taken` (a short hash of the server's name is appended when needed)."""
    base = f"{server}__{_NOT_IN_NAME.sub('_', remote)}"
    if len(base) <= MAX_NAME_CHARS and base not in taken:
        return base
    digest = hashlib.sha256(remote.encode()).hexdigest()
    for length in (8, 16, 64):
        suffix = "_" + digest[:length]
        name = base[: MAX_NAME_CHARS - len(suffix)] + suffix
        if name not in taken:
            return name
    raise ValueError(f"no free name for {remote!r}")  # a sha256 collision


def listed_tools(server: str, tools: list[mcp_types.Tool]) -> list[ListedTool]:
    """The server's tools fitted for the model, in the server's order; a tool whose name is
    empty or over 128 characters is skipped."""
    taken: set[str] = set()
    result: list[ListedTool] = []
    for tool in tools:
        if not tool.name or len(tool.name) > MAX_REMOTE_NAME_CHARS:
            continue
        name = tool_name(server, tool.name, taken)
        taken.add(name)
        description, schema = _fitted(tool.description or tool.title or "", tool.input_schema)
        result.append(
            ListedTool(
                name=name,
                remote_name=tool.name,
                description=description,
                input_schema=schema,
            )
        )
    return result


def _fitted(description: str, schema: Any) -> tuple[str, dict[str, Any]]:
    if len(description) > MAX_DESCRIPTION_CHARS:
        description = description[: MAX_DESCRIPTION_CHARS - 1] + "…"
    try:
        size = len(json.dumps(schema, ensure_ascii=False))
    except (TypeError, ValueError):
        size = MAX_SCHEMA_BYTES + 1
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return description, dict(_PERMISSIVE_SCHEMA)
    if size > MAX_SCHEMA_BYTES:
        note = (
            f"\n(Its input schema, {format_size(size)}, was too large to pass on: give the "
            "arguments its description asks for.)"
        )
        return description + note, dict(_PERMISSIVE_SCHEMA)
    fitted = dict(schema)
    fitted["type"] = "object"
    fitted.setdefault("properties", {})
    return description, fitted


class McpTool(AgentTool[McpArguments]):
    """One tool of one MCP server. Made per tool by `make_tool` (a class per name, since the
    tool contract keeps name, label and description on the class)."""

    name: ClassVar[str] = "mcp"
    label: ClassVar[str] = "MCP"
    description: ClassVar[str] = ""
    parameters: ClassVar[type[BaseModel]] = McpArguments

    def __init__(self, server: McpServer, listed: ListedTool) -> None:
        self.server = server
        self.listed = listed

    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description,
            input_schema=json.loads(json.dumps(self.listed.input_schema)),
        )

    async def execute(self, call_id: str, params: McpArguments, ctx: ToolContext) -> ToolResult:
        arguments = params.model_dump()
        try:
            result = await self.server.call(self.listed.remote_name, arguments, signal=ctx.signal)
        except (McpUnavailable, McpCallFailed) as exc:
            raise ToolError(str(exc), details={"server": self.server.name}) from None
        content, details = await result_content(result, self.server.redact)
        details.update(server=self.server.name, tool=self.listed.remote_name)
        if result.is_error:
            raise ToolError(
                _text_of(content) or "The tool failed.", details=details, content=content
            )
        return ToolResult(content=content, details=details)


@functools.lru_cache(maxsize=1024)
def _tool_class(name: str, label: str, description: str) -> type[McpTool]:
    attributes = {"name": name, "label": label, "description": description}
    return type(f"McpTool[{name}]", (McpTool,), attributes)


def make_tool(server: McpServer, listed: ListedTool) -> McpTool:
    label = f"{server.name}: {listed.remote_name}"[:80]
    return _tool_class(listed.name, label, listed.description)(server, listed)


async def result_content(
    result: mcp_types.CallToolResult, redact: Redactor
) -> tuple[list[ToolResultContent], dict[str, Any]]:
    """The model's view of a result: the text parts joined and truncated like `read`'s output,
    then up to four images. `redact` replaces configured secret values in text."""
    texts: list[str] = []
    images: list[ToolResultContent] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            texts.append(block.text)
        elif isinstance(block, mcp_types.ImageContent):
            if len(images) >= MAX_IMAGES_PER_RESULT:
                texts.append(f"[image omitted: more than {MAX_IMAGES_PER_RESULT} in one result]")
                continue
            image = await _image(block.data)
            if isinstance(image, Image):
                images.append(image)
            else:
                texts.append(image)
        elif isinstance(block, mcp_types.EmbeddedResource):
            texts.append(_resource_text(block.resource))
        elif isinstance(block, mcp_types.ResourceLink):
            texts.append(f"[resource link: {block.uri} ({block.name})]")
        elif isinstance(block, mcp_types.AudioContent):
            texts.append(f"[audio omitted ({block.mime_type}): not passed to the model]")
    if not texts and not images and result.structured_content is not None:
        texts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    text = "\n".join(texts)
    cut = truncate_head(text)
    details: dict[str, Any] = {"truncated": cut.truncated}
    shown = cut.content
    if cut.first_line_too_long:
        shown = text[: DEFAULT_MAX_BYTES // 4]
    if cut.truncated:
        shown += (
            f"\n\n[Output truncated: {cut.output_lines} of {cut.total_lines} lines, "
            f"{format_size(cut.output_bytes)} of {format_size(cut.total_bytes)} shown.]"
        )
    content: list[ToolResultContent] = []
    if shown or not images:
        content.append(Text(text=redact.scrub(shown) if shown else "(no output)"))
    content.extend(images)
    return content, details


def _resource_text(
    resource: mcp_types.TextResourceContents | mcp_types.BlobResourceContents,
) -> str:
    mime = f", {resource.mime_type}" if resource.mime_type else ""
    if isinstance(resource, mcp_types.TextResourceContents):
        return f"[resource {resource.uri}{mime}]\n{resource.text}"
    size = len(resource.blob) * 3 // 4
    return f"[binary resource {resource.uri}{mime}, about {format_size(size)}: not shown]"


async def _image(data_b64: str) -> Image | str:
    if len(data_b64) > MAX_IMAGE_B64_CHARS:
        return f"[image omitted: {format_size(len(data_b64) * 3 // 4)} is too large]"
    try:
        raw = base64.b64decode(data_b64, validate=True)
    except (binascii.Error, ValueError):
        return "[image omitted: its data is not valid base64]"
    if sniff_image(raw[:16]) is None:
        return "[image omitted: not a recognised image format]"
    try:
        prepared = await asyncio.to_thread(prepare_image, raw)  # decoding is CPU work
    except ImageError as exc:
        return f"[image omitted: {exc}]"
    return Image(data=prepared.data_b64, mime_type=prepared.mime_type)


def _text_of(content: list[ToolResultContent]) -> str:
    return "\n".join(part.text for part in content if isinstance(part, Text))
