"""Telling text, images and binary apart by content, and preparing images for a model.

Owns: `sniff_image` (magic bytes → image format), `prepare_image` (decode with Pillow, fit
within 2000×2000, re-encode as a type models accept, within a size budget), `decode_text` (bytes
→ text and the encoding to write it back with, or None for binary).

Must not: import anything of ours outside `core`; look at file names.
"""

from __future__ import annotations

import base64
import codecs
import io
from dataclasses import dataclass

from PIL import Image as PILImage
from PIL import UnidentifiedImageError

MAX_IMAGE_SIDE = 2000
# Models reject larger images; base64 inflates by 4/3.
MAX_IMAGE_BYTES = 3_750_000
MAX_IMAGE_PIXELS = 100_000_000

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


def prepare_image(data: bytes) -> PreparedImage:
    """Decode an image, fit it within MAX_IMAGE_SIDE on both sides and within MAX_IMAGE_BYTES.

    An image already small enough in an accepted format is sent unchanged.
    """
    try:
        with PILImage.open(io.BytesIO(data)) as probe:
            fmt = probe.format or ""
            width, height = probe.size
            if width * height > MAX_IMAGE_PIXELS:
                raise ImageError(f"the image is too large to decode ({width}×{height} pixels)")
            probe.load()
            image = probe.copy()
    except (UnidentifiedImageError, OSError, SyntaxError, PILImage.DecompressionBombError) as exc:
        raise ImageError(f"the image cannot be decoded ({exc})") from None
    original = (width, height)
    fits = width <= MAX_IMAGE_SIDE and height <= MAX_IMAGE_SIDE
    if fits and fmt in _SENDABLE and len(data) <= MAX_IMAGE_BYTES:
        return PreparedImage(
            base64.b64encode(data).decode("ascii"), _SENDABLE[fmt], original, original, False
        )
    if not fits:
        image.thumbnail((MAX_IMAGE_SIDE, MAX_IMAGE_SIDE), PILImage.Resampling.LANCZOS)
    encoded, mime = _encode(image)
    side = max(image.size)
    while len(encoded) > MAX_IMAGE_BYTES and side > 200:
        side = int(side * 0.75)
        image.thumbnail((side, side), PILImage.Resampling.LANCZOS)
        encoded, mime = _encode(image)
    return PreparedImage(
        base64.b64encode(encoded).decode("ascii"),
        mime,
        original,
        image.size,
        image.size != original,
    )


def _encode(image: PILImage.Image) -> tuple[bytes, str]:
    """PNG when it is small enough (keeps text sharp and transparency), JPEG otherwise."""
    buffer = io.BytesIO()
    png_ready = image if image.mode in ("RGB", "RGBA", "L", "LA", "P") else image.convert("RGBA")
    png_ready.save(buffer, format="PNG", optimize=True)
    if buffer.tell() <= MAX_IMAGE_BYTES:
        return buffer.getvalue(), "image/png"
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="JPEG", quality=85)
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
