"""image_size: width and height read from headers agree with Pillow, for every sendable format."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image as PILImage

from core.image_size import base64_image_size, image_size


def encoded(size: tuple[int, int], fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    mode = "RGB" if fmt == "JPEG" else "RGBA"
    PILImage.new(mode, size, (10, 120, 200)).save(buffer, format=fmt, **options)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("fmt", "options"),
    [
        ("PNG", {}),
        ("GIF", {}),
        ("JPEG", {}),
        ("JPEG", {"progressive": True}),
        ("WEBP", {"lossless": True}),
        ("WEBP", {"quality": 50}),
    ],
)
@pytest.mark.parametrize("size", [(1, 1), (317, 9000), (9000, 40), (2001, 1999)])
def test_sizes_match_pillow(fmt: str, options: dict[str, object], size: tuple[int, int]) -> None:
    data = encoded(size, fmt, **options)
    assert image_size(data) == size
    assert base64_image_size(base64.b64encode(data).decode()) == size


def test_extended_webp_with_alpha_and_metadata() -> None:
    image = PILImage.new("RGBA", (640, 480), (0, 0, 0, 0))
    buffer = io.BytesIO()
    image.save(buffer, format="WEBP", exif=b"Exif\x00\x00" + b"\x00" * 32)
    assert buffer.getvalue()[12:16] == b"VP8X"
    assert image_size(buffer.getvalue()) == (640, 480)


def test_a_jpeg_frame_header_after_large_metadata_is_found() -> None:
    # Metadata segments (EXIF, ICC profiles) can push the frame header past the first window.
    icc = bytes(range(256)) * 1000  # 256 KB: split over several APP2 segments by Pillow
    data = encoded((1234, 567), "JPEG", icc_profile=icc)
    assert data.index(b"\xff\xc0") > 200_000
    assert base64_image_size(base64.b64encode(data).decode()) == (1234, 567)


@pytest.mark.parametrize(
    "data",
    [b"", b"hello world, not an image", b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff\xe0\x00", b"GIF89a"],
)
def test_unreadable_headers_give_none(data: bytes) -> None:
    assert image_size(data) is None
    assert base64_image_size(base64.b64encode(data).decode()) is None


def test_text_that_is_not_base64_gives_none() -> None:
    assert base64_image_size("0000" * 100) is None
    assert base64_image_size("!!!=") is None
