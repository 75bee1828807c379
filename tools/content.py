"""Telling text, images and binary apart by content, preparing images for a model, and turning
HTML into Markdown.

Owns: `sniff_image` (magic bytes → image format), `image_pixels` (a header's size), `prepare_image`
(decode with Pillow, fit within 2000×2000, re-encode as a type models accept, within the API's
per-image budget), `fit_image` (the same refused by pixel count before decoding, a few at a
time: what the `read` tool, MCP results and attachments use), `decode_text` (bytes
→ text and the encoding to write it back with, or None for binary), `html_to_markdown` (the
conversion itself) and `convert_html` (the same in a child process with a deadline).

Why a child process for HTML: BeautifulSoup and markdownify are pure Python. A 2 MB page takes
tens of seconds, and a thread would not help, because pure-Python work holds the GIL and the
event loop (every conversation) would still stall. A process can also be killed at its
deadline, which a thread cannot, and its memory is capped. It costs a Python start-up (a few
hundred milliseconds) per HTML page, small beside a network fetch.

Must not: import anything of ours outside `core`; look at file names.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import contextlib
import io
import json
import os
import re
import sys
import threading
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bs4 import BeautifulSoup, Tag
from markdownify import MarkdownConverter
from PIL import Image as PILImage
from PIL import UnidentifiedImageError

# Within 2000 px a side an image never trips the API's many-images rule (and the API would
# scale a larger one down anyway).
MAX_IMAGE_SIDE = 2000
# The API's per-image limit is on the base64 text (4/3 of the bytes).
MAX_IMAGE_BASE64_CHARS = 5_000_000
MAX_IMAGE_BYTES = MAX_IMAGE_BASE64_CHARS // 4 * 3
MAX_IMAGE_PIXELS = 100_000_000
_JPEG_QUALITIES = (85, 70, 55)
# Decoded images are large: only this many are decoded at once, process-wide.
IMAGE_DECODES = threading.BoundedSemaphore(2)

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)
_SENDABLE = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}


def sniff_image(head: bytes) -> str | None:
    """The image format named by the file's first bytes, or None."""
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    for magic, fmt in _MAGIC:
        if head.startswith(magic):
            return fmt
    return None


@dataclass(frozen=True, slots=True)
class PreparedImage:
    data_b64: str
    mime_type: str
    original_size: tuple[int, int]
    size: tuple[int, int]
    resized: bool


class ImageError(ValueError):
    """The bytes claim to be an image but cannot be used as one."""


def image_pixels(data: bytes) -> tuple[int, int] | None:
    """Width and height from an image's header, without decoding its pixels (None if over
    Pillow's own bomb limit; (0, 0) if the header cannot be read)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PILImage.DecompressionBombWarning)
            with PILImage.open(io.BytesIO(data)) as probe:
                return probe.size
    except PILImage.DecompressionBombError:
        return None  # over Pillow's own hard limit: certainly over ours
    except Exception:
        return (0, 0)


def fit_image(data: bytes, *, max_pixels: int) -> PreparedImage:
    """`prepare_image`, but an image of more than `max_pixels` (by its header) is refused before
    anything is decoded, and at most `IMAGE_DECODES` images decode at once. Blocking: call it
    in a worker thread. Raises ImageError."""
    size = image_pixels(data)
    if size is None or size[0] * size[1] > max_pixels:
        dims = "" if size is None else f" ({size[0]}×{size[1]})"
        raise ImageError(
            f"it has too many pixels{dims}; at most {max_pixels // 1_000_000} megapixels "
            "can be read. Scale it down first"
        )
    with IMAGE_DECODES:
        return prepare_image(data)


def prepare_image(data: bytes) -> PreparedImage:
    """Decode an image, fit it within MAX_IMAGE_SIDE on both sides and within MAX_IMAGE_BYTES.

    An image already small enough in an accepted format is sent unchanged. A large one is
    scaled while it decodes where the format allows (JPEG draft mode), and is never copied:
    Pillow keeps RGB as 4 bytes a pixel, so each full-size copy of a 25-megapixel image is
    100 MB.
    """
    try:
        with PILImage.open(io.BytesIO(data)) as image:
            return _prepare(image, data)
    except (UnidentifiedImageError, OSError, SyntaxError, PILImage.DecompressionBombError) as exc:
        raise ImageError(f"the image cannot be decoded ({exc})") from None


def _prepare(image: PILImage.Image, data: bytes) -> PreparedImage:
    fmt = image.format or ""
    width, height = original = image.size
    if width * height > MAX_IMAGE_PIXELS:
        raise ImageError(f"the image is too large to decode ({width}×{height} pixels)")
    fits = width <= MAX_IMAGE_SIDE and height <= MAX_IMAGE_SIDE
    if fits and fmt in _SENDABLE and len(data) <= MAX_IMAGE_BYTES:
        image.load()  # it must decode to be worth sending
        return PreparedImage(
            base64.b64encode(data).decode("ascii"), _SENDABLE[fmt], original, original, False
        )
    if fits:
        image.load()
    else:
        image.thumbnail((MAX_IMAGE_SIDE, MAX_IMAGE_SIDE), PILImage.Resampling.LANCZOS)
    encoded, mime = _encode(image, photo=fmt == "JPEG")
    side = max(image.size)
    while len(encoded) > MAX_IMAGE_BYTES and side > 200:
        side = int(side * 0.75)
        image.thumbnail((side, side), PILImage.Resampling.LANCZOS)
        encoded, mime = _encode(image, photo=fmt == "JPEG")
    if len(encoded) > MAX_IMAGE_BYTES:  # not reached in practice: 200 px of JPEG is small
        raise ImageError("the image cannot be made small enough to send")
    return PreparedImage(
        base64.b64encode(encoded).decode("ascii"),
        mime,
        original,
        image.size,
        image.size != original,
    )


def _encode(image: PILImage.Image, *, photo: bool) -> tuple[bytes, str]:
    """PNG when it is small enough (keeps screenshots' text sharp and transparency), else JPEG
    at the first quality that fits (or the smallest tried; the caller then scales down). A
    photo (a JPEG to begin with) skips PNG: it would be large and slow to compress."""
    if not photo:
        buffer = io.BytesIO()
        png_ready = (
            image if image.mode in ("RGB", "RGBA", "L", "LA", "P") else image.convert("RGBA")
        )
        png_ready.save(buffer, format="PNG", optimize=True)
        if buffer.tell() <= MAX_IMAGE_BYTES:
            return buffer.getvalue(), "image/png"
    rgb = image.convert("RGB")
    for quality in _JPEG_QUALITIES:
        buffer = io.BytesIO()
        rgb.save(buffer, format="JPEG", quality=quality)
        if buffer.tell() <= MAX_IMAGE_BYTES:
            break
    return buffer.getvalue(), "image/jpeg"


_CONTROL_BYTES = frozenset(range(0, 32)) - {9, 10, 12, 13, 27, 8}


def decode_text(data: bytes) -> tuple[str, str] | None:
    """(text, encoding) for text, None for binary. The encoding writes the text back byte for
    byte: 'utf-8-sig' keeps a BOM, 'utf-16' its BOM, and 'latin-1' stands in for any 8-bit
    encoding that is not UTF-8 (it round-trips every byte)."""
    if data.startswith(codecs.BOM_UTF8):
        try:
            return data.decode("utf-8-sig"), "utf-8-sig"
        except UnicodeDecodeError:
            return None
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return data.decode("utf-16"), "utf-16"
        except UnicodeDecodeError:
            return None
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    sample = data[:8192]
    controls = sum(1 for b in sample if b in _CONTROL_BYTES)
    if controls > len(sample) * 0.05:
        return None
    return data.decode("latin-1"), "latin-1"


# -- HTML → Markdown -------------------------------------------------------------------------

# Only the start of a page is converted: conversion costs seconds per 100 KB of dense markup,
# and what comes back is cut to a few tens of KB of text anyway.
HTML_CONVERT_MAX_BYTES = 256 * 1024
# Elements nested deeper than this become plain text: markdownify recurses once per level, and
# thousands of levels end in RecursionError.
HTML_MAX_DEPTH = 100
HTML_CONVERT_TIMEOUT_S = 15.0
# The converting process's address-space cap; a pathological page fails there, not here.
HTML_WORKER_MEMORY_BYTES = 1024 * 1024 * 1024
_STRIPPED_TAGS = ("script", "style", "nav", "noscript", "iframe", "svg", "template", "form")
# Removed from the raw bytes before the cap is applied, so inline code cannot use up the budget
# (their content is never shown). A linear scan, no regular expression.
_RAW_STRIPPED = (b"script", b"style", b"svg", b"noscript", b"template")
_TAG_NAME_END = frozenset(b" \t\n\r\f/>")
_ROOT = Path(__file__).resolve().parent.parent
_CHILD_ENV = ("PATH", "LD_LIBRARY_PATH", "TMPDIR")
# Each child is a Python process of some 70 MB that keeps a core busy for seconds.
MAX_CONCURRENT_CONVERSIONS = 2
_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


class ConversionError(ValueError):
    """The page could not be converted (too slow, too big, or the converter failed)."""


@dataclass(frozen=True, slots=True)
class Converted:
    text: str
    cut: bool  # only the first HTML_CONVERT_MAX_BYTES (after stripping code) were converted
    flattened: bool  # nesting beyond HTML_MAX_DEPTH was turned into plain text


class _BoundedConverter(MarkdownConverter):
    """markdownify, bounded two ways: an element more than `max_depth` levels down is rendered
    as its plain text (collected iteratively) instead of being recursed into, and once more than
    `budget` characters of text were produced the rest of the page is skipped (it would be cut
    from the result anyway)."""

    def __init__(self, max_depth: int, budget: int | None, **options: Any) -> None:
        super().__init__(**options)
        self.max_depth = max_depth
        self.budget = budget
        self.depth = 0
        self.produced = 0
        self.flattened = False

    def process_tag(self, node: Tag, parent_tags: set[str] | None = None) -> str:
        if self.budget is not None and self.produced > self.budget:
            return ""
        if self.depth >= self.max_depth:
            self.flattened = True
            text = node.get_text(" ", strip=True)
            self.produced += len(text)
            return f" {text} "
        self.depth += 1
        try:
            # (the stubs omit process_tag and process_text)
            return str(super().process_tag(node, parent_tags=parent_tags))  # type: ignore[misc]
        finally:
            self.depth -= 1

    def process_text(self, node: Any, parent_tags: set[str] | None = None) -> str:
        text = str(super().process_text(node, parent_tags=parent_tags))  # type: ignore[misc]
        self.produced += len(text)
        return text


def strip_raw_blocks(html: bytes) -> bytes:
    """`html` without <script>, <style>, <svg>, <noscript> and <template> blocks (an unclosed one
    runs to the end, as browsers read it). Linear in the size of the page."""
    for name in _RAW_STRIPPED:
        lowered = html.lower()
        opener, closer = b"<" + name, b"</" + name
        kept: list[bytes] = []
        position = 0
        search = 0
        while (start := lowered.find(opener, search)) >= 0:
            after = start + len(opener)
            if after < len(lowered) and lowered[after] not in _TAG_NAME_END:
                search = after  # <scripts>, <svgfoo>: another tag
                continue
            opening_end = lowered.find(b">", after)
            if opening_end > 0 and lowered[opening_end - 1] == ord("/"):
                end = opening_end + 1  # <svg ... />
            else:
                close = lowered.find(closer, after)
                end = len(html) if close < 0 else lowered.find(b">", close)
                end = len(html) if end < 0 else end + 1
            kept.append(html[position:start])
            position = search = end
        kept.append(html[position:])
        html = b"".join(kept)
    return html


def html_to_markdown(html: bytes | str, charset: str | None = None) -> str:
    """Readable Markdown from an HTML page: scripts, styles, navigation and forms removed.
    CPU-heavy for big pages: call `convert_html` from async code."""
    return _convert(html if isinstance(html, bytes) else html.encode("utf-8"), charset).text


def _convert(html: bytes, charset: str | None, budget: int | None = None) -> Converted:
    html = strip_raw_blocks(html)
    cut = len(html) > HTML_CONVERT_MAX_BYTES
    soup = BeautifulSoup(
        html[:HTML_CONVERT_MAX_BYTES], "html.parser", from_encoding=charset or None
    )
    for tag in soup(list(_STRIPPED_TAGS)):
        tag.decompose()
    title = ""
    if soup.title is not None:  # shown once, as the heading, wherever the page put it
        title = soup.title.get_text(strip=True)
        soup.title.decompose()
    if soup.head is not None:
        soup.head.decompose()
    root = soup.body or soup
    converter = _BoundedConverter(HTML_MAX_DEPTH, budget, heading_style="ATX", bullets="-")
    try:
        text = converter.process_tag(root, parent_tags=set())
    except RecursionError:  # a backstop: the depth limit should make this unreachable
        raise ConversionError("the page is nested too deeply to convert") from None
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text).strip()
    if title and not text.startswith(f"# {title}"):
        text = f"# {title}\n\n{text}"
    return Converted(text, cut, converter.flattened)


async def convert_html(
    html: bytes,
    charset: str | None = None,
    *,
    timeout_s: float = HTML_CONVERT_TIMEOUT_S,
    max_chars: int | None = None,
) -> Converted:
    """`html_to_markdown` in a child Python process, killed at `timeout_s` (or when the caller
    is cancelled), so the event loop never runs the conversion. Conversion stops soon after
    `max_chars` characters of text, and at most `max_chars` + 1 come back (so the caller can
    tell it was cut). Raises ConversionError."""
    async with _conversion_slots():
        return await _convert_in_child(html, charset, timeout_s, max_chars)


def _conversion_slots() -> asyncio.Semaphore:
    """At most MAX_CONCURRENT_CONVERSIONS children at once (per event loop: a semaphore
    belongs to one loop); more pages wait their turn within their fetch's own deadline."""
    loop = asyncio.get_running_loop()
    slots = _SLOTS.get(loop)
    if slots is None:
        slots = _SLOTS[loop] = asyncio.Semaphore(MAX_CONCURRENT_CONVERSIONS)
    return slots


async def _convert_in_child(
    html: bytes, charset: str | None, timeout_s: float, max_chars: int | None
) -> Converted:
    try:
        process = await _start_child()
    except OSError as exc:  # out of processes or memory: say so, as for any other failure
        raise ConversionError(f"the converter could not be started ({exc})") from None
    header = json.dumps({"charset": charset, "max_chars": max_chars}).encode() + b"\n"
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await process.communicate(header + html)
    except TimeoutError:
        raise ConversionError(
            f"converting the page took longer than {timeout_s:g} s and was stopped"
        ) from None
    finally:
        if process.returncode is None:  # timed out or cancelled: nobody wants the result
            process.kill()
            await asyncio.shield(process.wait())
    try:
        answer = json.loads(out)
    except ValueError:
        last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise ConversionError(f"the converter failed ({last[0][:200]})") from None
    if "error" in answer:
        raise ConversionError(str(answer["error"]))
    return Converted(str(answer["text"]), bool(answer["cut"]), bool(answer["flattened"]))


async def _start_child() -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",  # no user site, no PYTHON* variables: only our code and the installed packages
        "-c",
        f"import sys; sys.path.insert(0, {str(_ROOT)!r}); "
        "from tools.content import _conversion_worker; _conversion_worker()",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        # Nothing of ours (no API keys) is handed to a process that parses hostile pages.
        env={
            "LC_ALL": "C.UTF-8",
            **{name: os.environ[name] for name in _CHILD_ENV if name in os.environ},
        },
    )


def _conversion_worker() -> None:
    """The child side of `convert_html`: one request on stdin, one JSON answer on stdout."""
    with contextlib.suppress(OSError):  # on a busy machine the bot's loop gets the CPU first
        os.nice(10)
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (HTML_WORKER_MEMORY_BYTES, HTML_WORKER_MEMORY_BYTES))
    except (ImportError, ValueError, OSError):
        pass  # best effort: the deadline still applies
    header, _, html = sys.stdin.buffer.read().partition(b"\n")
    request = json.loads(header)
    try:
        converted = _convert(html, request["charset"], request["max_chars"])
    except ConversionError as exc:
        answer: dict[str, Any] = {"error": str(exc)}
    except MemoryError:
        answer = {"error": "the page needs too much memory to convert"}
    else:
        text = converted.text
        if request["max_chars"] is not None:
            text = text[: request["max_chars"] + 1]
        answer = {"text": text, "cut": converted.cut, "flattened": converted.flattened}
    sys.stdout.buffer.write(json.dumps(answer).encode())
