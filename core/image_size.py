"""An image's width and height from its header, in pure Python, without decoding pixels.

Owns: `image_size` (PNG IHDR, GIF screen descriptor, WebP VP8/VP8L/VP8X, JPEG SOF markers)
and `base64_image_size` (the same from base64 text, decoding only as much as the header needs).

Must not: import Pillow or anything heavy (core stays light), or decode more than the header
needs: it runs on the event loop for every image of every request.
"""

from __future__ import annotations

import binascii

# The first try decodes this much base64 (48 KiB of image); a JPEG whose metadata segments
# come before its frame header may need more, so the window doubles up to the whole image.
_FIRST_WINDOW_CHARS = 64 * 1024

# JPEG start-of-frame markers carry the size; C4 (DHT), C8 (JPG) and CC (DAC) are not frames.
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers without a length field.
_STANDALONE = frozenset({0x01, *range(0xD0, 0xD9)})


class _NeedMore(Exception):
    """The header goes on past the bytes at hand."""


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from the header of a PNG, GIF, WebP or JPEG image; None if `data` does
    not start like one or its header is cut short or malformed."""
    try:
        return _size(data)
    except _NeedMore:
        return None


def base64_image_size(data_b64: str) -> tuple[int, int] | None:
    """`image_size` of base64 text, decoding a growing prefix until the header is read."""
    window = _FIRST_WINDOW_CHARS
    while True:
        whole = window >= len(data_b64)
        try:  # (the window is a multiple of 4 characters: whole base64 quanta)
            raw = binascii.a2b_base64(data_b64 if whole else data_b64[:window])
        except binascii.Error:
            return None
        try:
            return _size(raw)
        except _NeedMore:
            if whole:
                return None
            window *= 2


def _size(data: bytes) -> tuple[int, int] | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        _need(data, 24)
        if data[12:16] != b"IHDR":
            return None
        return _be(data, 16, 4), _be(data, 20, 4)
    if data.startswith((b"GIF87a", b"GIF89a")):
        _need(data, 10)
        return _le(data, 6, 2), _le(data, 8, 2)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_size(data)
    if data.startswith(b"\xff\xd8"):
        return _jpeg_size(data)
    if len(data) < 12:
        raise _NeedMore  # too short to tell
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    _need(data, 30)
    chunk = data[12:16]
    if chunk == b"VP8X":  # extended: 24-bit canvas width and height, each minus one
        return _le(data, 24, 3) + 1, _le(data, 27, 3) + 1
    if chunk == b"VP8 ":  # lossy: a key frame's start code, then 14-bit width and height
        if data[23:26] != b"\x9d\x01\x2a":
            return None
        return _le(data, 26, 2) & 0x3FFF, _le(data, 28, 2) & 0x3FFF
    if chunk == b"VP8L":  # lossless: a signature byte, then 14 bits each of width-1, height-1
        if data[20] != 0x2F:
            return None
        bits = _le(data, 21, 4)
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    at = 2
    while True:
        _need(data, at + 2)
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte before a marker
            at += 1
            continue
        if marker in _STANDALONE:
            at += 2
            continue
        if marker == 0xDA:  # start of scan: the frame header should have come before
            return None
        _need(data, at + 4)
        length = _be(data, at + 2, 2)
        if length < 2:
            return None
        if marker in _SOF_MARKERS:
            _need(data, at + 9)
            return _be(data, at + 7, 2), _be(data, at + 5, 2)
        at += 2 + length


def _need(data: bytes, size: int) -> None:
    if len(data) < size:
        raise _NeedMore


def _be(data: bytes, at: int, size: int) -> int:
    return int.from_bytes(data[at : at + size], "big")


def _le(data: bytes, at: int, size: int) -> int:
    return int.from_bytes(data[at : at + size], "little")
