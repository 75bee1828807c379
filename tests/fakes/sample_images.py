"""Real images for tests, generated with Pillow: a noisy photo (JPEG compresses noise badly, so
it is big for its size, as phone photos are) and plain images of any size."""

from __future__ import annotations

import io
import random

from PIL import Image as PILImage


def noisy_photo(size: tuple[int, int], *, quality: int = 95, seed: int = 1) -> bytes:
    """A JPEG of random noise: some 1.6 bytes a pixel at quality 95."""
    noise = random.Random(seed).randbytes(size[0] * size[1] * 3)
    buffer = io.BytesIO()
    PILImage.frombytes("RGB", size, noise).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def plain(
    size: tuple[int, int], fmt: str = "PNG", color: tuple[int, int, int] = (200, 30, 30)
) -> bytes:
    buffer = io.BytesIO()
    PILImage.new("RGB", size, color).save(buffer, format=fmt)
    return buffer.getvalue()
