"""BodyDecoder properties, for any stack of layers and any way the bytes arrive in chunks:
it gives back exactly what was encoded when that fits the limit, and never more than the limit
plus one piece when it does not."""

from __future__ import annotations

import gzip
import itertools
import zlib

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tools.web_fetch import DECODE_CHUNK, BodyDecoder

ENCODERS = {
    "gzip": lambda data: gzip.compress(data, compresslevel=6),
    "deflate": zlib.compress,
    "raw-deflate": lambda data: (lambda c: c.compress(data) + c.flush())(
        zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    ),
}
HEADER_NAME = {"gzip": "gzip", "deflate": "deflate", "raw-deflate": "deflate"}

payloads = st.one_of(
    st.binary(max_size=5000),
    st.builds(lambda unit, n: unit * n, st.binary(min_size=1, max_size=8), st.integers(0, 40_000)),
)
layer_stacks = st.lists(st.sampled_from(sorted(ENCODERS)), max_size=3)


def encode(payload: bytes, layers: list[str]) -> tuple[bytes, str]:
    for layer in layers:
        payload = ENCODERS[layer](payload)
    return payload, ", ".join(HEADER_NAME[layer] for layer in layers)


def decode(body: bytes, header: str, limit: int, cuts: list[int]) -> tuple[bytes, BodyDecoder]:
    decoder = BodyDecoder(header, limit=limit)
    out = bytearray()
    edges = sorted({0, len(body), *(cut % (len(body) + 1) for cut in cuts)})
    for start, end in itertools.pairwise(edges):
        for piece in decoder.feed(body[start:end]):
            assert len(piece) <= DECODE_CHUNK
            out += piece
            if len(out) >= limit:
                return bytes(out), decoder
    for piece in decoder.finish():
        out += piece
    return bytes(out), decoder


@settings(max_examples=150, deadline=None)
@given(payloads, layer_stacks, st.lists(st.integers(min_value=0), max_size=12))
@example(b"", ["gzip", "raw-deflate"], [])  # the inner layer is larger than the whole body
def test_round_trip_in_any_chunking(payload: bytes, layers: list[str], cuts: list[int]) -> None:
    body, header = encode(payload, layers)
    limit = len(payload) + 1  # room for all of it: nothing may be cut
    out, decoder = decode(body, header, limit, cuts)
    assert out == payload and not decoder.cut


@settings(max_examples=150, deadline=None)
@given(
    payloads,
    layer_stacks,
    st.integers(min_value=1, max_value=20_000),
    st.lists(st.integers(min_value=0), max_size=12),
)
def test_never_more_than_the_limit_and_a_piece(
    payload: bytes, layers: list[str], limit: int, cuts: list[int]
) -> None:
    body, header = encode(payload, layers)
    out, _ = decode(body, header, limit, cuts)
    assert len(out) <= limit + DECODE_CHUNK
    assert payload.startswith(out)
