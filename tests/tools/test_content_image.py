"""prepare_image: images come out within the model's limits, decoded without full-size copies."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image as PILImage

from tests.fakes.sample_images import noisy_photo
from tools.content import (
    MAX_IMAGE_BASE64_CHARS,
    MAX_IMAGE_SIDE,
    ImageError,
    fit_image,
    prepare_image,
)


def encoded(size: tuple[int, int], fmt: str, mode: str = "RGB") -> bytes:
    buffer = io.BytesIO()
    image = PILImage.new(mode, size, color=(200, 30, 30) if mode == "RGB" else 128)
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def decoded(data_b64: str) -> PILImage.Image:
    return PILImage.open(io.BytesIO(base64.b64decode(data_b64)))


def test_small_image_is_sent_unchanged() -> None:
    data = encoded((300, 200), "PNG")
    prepared = prepare_image(data)
    assert base64.b64decode(prepared.data_b64) == data
    assert (prepared.mime_type, prepared.size, prepared.resized) == ("image/png", (300, 200), False)


@pytest.mark.parametrize(("fmt", "mime"), [("PNG", "image/png"), ("JPEG", "image/jpeg")])
def test_large_image_is_scaled_within_the_side_limit(fmt: str, mime: str) -> None:
    prepared = prepare_image(encoded((5000, 2500), fmt))
    assert prepared.original_size == (5000, 2500) and prepared.resized
    assert prepared.size == (MAX_IMAGE_SIDE, MAX_IMAGE_SIDE // 2)
    image = decoded(prepared.data_b64)
    assert image.size == prepared.size and prepared.mime_type in (mime, "image/png")
    assert image.convert("RGB").getpixel((10, 10))[0] > 150  # still the same picture


def test_bmp_is_re_encoded_as_a_type_models_accept() -> None:
    prepared = prepare_image(encoded((64, 64), "BMP"))
    assert prepared.mime_type == "image/png" and decoded(prepared.data_b64).size == (64, 64)


def test_broken_images_are_image_errors() -> None:
    with pytest.raises(ImageError, match="cannot be decoded"):
        prepare_image(encoded((400, 400), "PNG")[:200])
    with pytest.raises(ImageError, match="cannot be decoded"):
        prepare_image(b"\x89PNG\r\n\x1a\nnot really")


def test_a_photo_under_5_mib_but_over_5_mb_of_base64_is_reencoded_within_the_limit() -> None:
    photo = noisy_photo((1800, 1320), quality=100)
    assert 3.75 * 2**20 < len(photo) < 5 * 2**20  # what used to be sent as it was
    assert len(base64.b64encode(photo)) > MAX_IMAGE_BASE64_CHARS
    prepared = fit_image(photo, max_pixels=25_000_000)
    assert len(prepared.data_b64) <= MAX_IMAGE_BASE64_CHARS
    assert (prepared.mime_type, prepared.size) == ("image/jpeg", (1800, 1320))
    assert decoded(prepared.data_b64).size == (1800, 1320)


def test_a_screenshot_that_fits_as_png_stays_png() -> None:
    prepared = prepare_image(encoded((3000, 3000), "PNG"))
    assert (prepared.mime_type, prepared.size) == ("image/png", (2000, 2000))


def test_fit_image_refuses_too_many_pixels_by_the_header() -> None:
    with pytest.raises(ImageError, match=r"too many pixels \(6000×5000\)"):
        fit_image(encoded((6000, 5000), "PNG", mode="L"), max_pixels=25_000_000)
