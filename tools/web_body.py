"""Decoding a response body's Content-Encoding, bounded at every layer.

Owns: `BodyDecoder` (gzip and deflate, stacked up to `MAX_ENCODING_LAYERS` deep, inflated in
pieces of at most `DECODE_CHUNK` and counted as they inflate, so a small stacked gzip cannot
expand to gigabytes before the cap is checked), `DecodeError`, and `ACCEPT_ENCODING`, what
web_fetch asks servers for (exactly what this module can undo).

Must not: import anything of ours.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

# Decoded output is produced in pieces of at most this size; nothing larger is ever inflated
# at once, whatever the compression ratio.
DECODE_CHUNK = 64 * 1024
MAX_ENCODING_LAYERS = 4
# What we can decode ourselves (brotli and zstd are not installed): asked for explicitly, so a
# server has no reason to send anything else.
ACCEPT_ENCODING = "gzip, deflate"
_ENCODING_ALIASES = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate"}
_GZIP_MAGIC = b"\x1f\x8b"


class DecodeError(ValueError):
    """The body does not decode as its Content-Encoding says."""


class _Inflater:
    """One gzip or deflate layer, inflated in pieces of at most DECODE_CHUNK and stopped
    (`cut`) once it has produced `limit` bytes."""

    def __init__(self, kind: str, limit: int) -> None:
        self.kind = kind
        self.limit = limit
        self.produced = 0
        self.cut = False
        self._head = b""  # deflate: the first bytes, until the zlib wrapper can be recognised
        self._ended = False  # the current stream (gzip member) is complete
        self._after_end = b""  # what followed it, until it is known to be a member or junk
        self._junk = False
        self._inflater: Any = zlib.decompressobj(16 + zlib.MAX_WBITS) if kind == "gzip" else None

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._inflater is None:
            self._head += data
            if len(self._head) < 2:
                return
            data, self._head = self._head, b""
            self._inflater = zlib.decompressobj(_deflate_wbits(data))
        yield from self._inflate(data)

    def finish(self) -> Iterator[bytes]:
        if self._inflater is None and self._head:
            self._inflater = zlib.decompressobj(-zlib.MAX_WBITS)
            yield from self._inflate(self._head)

    def _inflate(self, data: bytes) -> Iterator[bytes]:
        while not self.cut:
            if self._ended:
                # After the end of the stream: another gzip member (a valid body may be several
                # concatenated), or padding and junk, which are ignored to the end.
                if self.kind != "gzip" or self._junk:
                    return
                self._after_end += data
                if len(self._after_end) < len(_GZIP_MAGIC):
                    return
                if not self._after_end.startswith(_GZIP_MAGIC):
                    self._junk, self._after_end = True, b""
                    return
                data, self._after_end, self._ended = self._after_end, b"", False
                self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                out = self._inflater.decompress(data, DECODE_CHUNK)
            except zlib.error as exc:
                raise DecodeError(f"bad {self.kind} data: {exc}") from None
            if out:
                self.produced += len(out)
                self.cut = self.produced >= self.limit
                yield out
            if self._inflater.eof:
                self._ended = True
                data = self._inflater.unused_data
                continue
            data = self._inflater.unconsumed_tail
            # A full piece may leave output pending inside zlib: ask again until it is short.
            if not data and len(out) < DECODE_CHUNK:
                return


def _deflate_wbits(head: bytes) -> int:
    """`deflate` is meant to be zlib-wrapped, but some servers send raw deflate."""
    if head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0:
        return zlib.MAX_WBITS
    return -zlib.MAX_WBITS


class BodyDecoder:
    """Undoes a response's Content-Encoding layers as raw bytes arrive, bounded at every layer.

    The decoded output stops after `limit` bytes, and the raw input and every inner layer after
    twice that (compressed data can be a little larger than what it holds), so the work is
    bounded by a few times `limit` however the layers are stacked; decoded pieces are at most
    DECODE_CHUNK. Raises DecodeError for an encoding it cannot undo.
    """

    def __init__(self, content_encoding: str, *, limit: int) -> None:
        names = [part.strip().lower() for part in content_encoding.split(",")]
        names = [name for name in names if name and name != "identity"]
        if len(names) > MAX_ENCODING_LAYERS:
            raise DecodeError(
                f"the body is encoded {len(names)} times, more than {MAX_ENCODING_LAYERS}"
            )
        for name in names:
            if name not in _ENCODING_ALIASES:
                raise DecodeError(
                    f"the body is sent with Content-Encoding '{name}', which cannot be decoded "
                    f"(supported: {ACCEPT_ENCODING})"
                )
        self.limit = limit
        self.raw_bytes = 0
        self._raw_cut = False
        inner_limit = 2 * limit + 1024
        self._raw_limit = inner_limit if names else limit
        # Encodings are listed in the order they were applied: undo the last one first.
        self._layers = [
            _Inflater(_ENCODING_ALIASES[name], limit if index == 0 else inner_limit)
            for index, name in enumerate(names)
        ][::-1]

    @property
    def cut(self) -> bool:
        """Whether something was left undecoded because a limit was reached."""
        return self._raw_cut or any(layer.cut for layer in self._layers)

    def feed(self, raw: bytes) -> Iterator[bytes]:
        if self._raw_cut:
            return
        self.raw_bytes += len(raw)
        if self.raw_bytes >= self._raw_limit:
            self._raw_cut = True
            raw = raw[: len(raw) - (self.raw_bytes - self._raw_limit)]
        yield from self._through(0, raw)

    def finish(self) -> Iterator[bytes]:
        for index, layer in enumerate(self._layers):
            for piece in layer.finish():
                yield from self._through(index + 1, piece)

    def _through(self, index: int, data: bytes) -> Iterator[bytes]:
        if index == len(self._layers):
            for start in range(0, len(data), DECODE_CHUNK):
                yield data[start : start + DECODE_CHUNK]
            return
        for piece in self._layers[index].feed(data):
            yield from self._through(index + 1, piece)
