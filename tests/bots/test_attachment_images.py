"""Attached images are fitted to the Messages API's per-image rules before they are stored, and
the strict fake API accepts what comes out (and refuses what would not have been fitted)."""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import pytest
from PIL import Image as PILImage

from bots.attachments import user_message
from bots.incoming import Attachment
from core.messages import AssistantMessage, Image, Message, Text, UserMessage
from core.models.anthropic import AnthropicModel, RetryPolicy
from core.models.base import ModelRequest, StreamEnd
from tests.bots.runner_helpers import incoming
from tests.fakes.anthropic_server import FakeAnthropic, text_reply
from tests.fakes.sample_images import noisy_photo, plain
from tools.content import MAX_IMAGE_BASE64_CHARS, MAX_IMAGE_SIDE

API_KEY = "sk-ant-api03-test-key"


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    server = FakeAnthropic(api_key=API_KEY)
    await server.start()
    yield server
    await server.close()


@pytest.fixture
async def client(fake: FakeAnthropic) -> AsyncIterator[anthropic.AsyncAnthropic]:
    sdk = anthropic.AsyncAnthropic(
        api_key=API_KEY, base_url=fake.url, max_retries=0, _strict_response_validation=True
    )
    yield sdk
    await sdk.close()


@pytest.fixture
def model(client: anthropic.AsyncAnthropic) -> AnthropicModel:
    return AnthropicModel(client=client, retry=RetryPolicy(max_retries=0))


async def refusal_of(client: anthropic.AsyncAnthropic, *parts: Text | Image) -> str:
    """What the API answers to `parts` sent as they are, unfitted (the request the adapter
    would have sent before the fix: it now fits every request itself)."""
    blocks = [
        {"type": "text", "text": part.text}
        if isinstance(part, Text)
        else {
            "type": "image",
            "source": {"type": "base64", "media_type": part.mime_type, "data": part.data},
        }
        for part in parts
    ]
    with pytest.raises(anthropic.APIStatusError) as refused:
        await client.messages.create(
            model="claude-sonnet-5-5",
            max_tokens=100,
            messages=[{"role": "user", "content": blocks}],  # type: ignore[list-item]
        )
    return f"{refused.value.status_code} {refused.value}"


async def answer(model: AnthropicModel, *messages: Message) -> AssistantMessage:
    request = ModelRequest(system_prompt="You are Teammate.", messages=list(messages), tools=[])
    ends = [event async for event in model.stream(request) if isinstance(event, StreamEnd)]
    return ends[0].message


def images_in(message: UserMessage) -> list[Image]:
    assert isinstance(message.content, list)
    return [part for part in message.content if isinstance(part, Image)]


def text_of(message: UserMessage) -> str:
    assert isinstance(message.content, list) and isinstance(message.content[0], Text)
    return message.content[0].text


def size_of(image: Image) -> tuple[int, int]:
    with PILImage.open(io.BytesIO(base64.b64decode(image.data))) as opened:
        return opened.size


async def test_big_photos_strips_and_large_images_are_fitted_and_accepted(
    fake: FakeAnthropic, model: AnthropicModel, tmp_path: Path
) -> None:
    photo = noisy_photo((1800, 1320), quality=100)
    assert 3.75 * 2**20 < len(photo) < 5 * 2**20  # under the old raw cap, over the API's
    files = (
        Attachment("photo.jpg", "image/jpeg", photo),
        Attachment("strip.png", "image/png", plain((9000, 100))),
        Attachment("square.png", "image/png", plain((3000, 3000))),
    )
    message = await user_message(incoming("what are these?", attachments=files), tmp_path)

    photo_in, strip_in, square_in = images_in(message)
    for image in (photo_in, strip_in, square_in):
        assert len(image.data) <= MAX_IMAGE_BASE64_CHARS
        assert max(size_of(image)) <= MAX_IMAGE_SIDE
    assert (photo_in.mime_type, size_of(photo_in)) == ("image/jpeg", (1800, 1320))
    assert (strip_in.mime_type, size_of(strip_in)) == ("image/png", (2000, 22))
    assert (square_in.mime_type, size_of(square_in)) == ("image/png", (2000, 2000))
    assert "'strip.png', 9000×100, scaled to 2000×22" in text_of(message)
    assert not (tmp_path / "attachments").exists()  # fitted images are not saved as files

    fake.add(text_reply("Noise, a strip and a square."))
    reply = await answer(model, message)
    assert reply.stop_reason == "stop", reply.error_message


@pytest.mark.parametrize(
    ("attachment", "refusal"),
    [
        (Attachment("photo.jpg", "image/jpeg", b""), "image exceeds 5 MB maximum"),
        (
            Attachment("strip.png", "image/png", plain((9000, 100))),
            "exceed max allowed size: 8000 pixels",
        ),
    ],
)
async def test_the_fake_api_refuses_an_image_that_was_not_fitted(
    fake: FakeAnthropic,
    client: anthropic.AsyncAnthropic,
    model: AnthropicModel,
    attachment: Attachment,
    refusal: str,
) -> None:
    data = attachment.data or noisy_photo((1800, 1320), quality=100)
    image = Image(data=base64.b64encode(data).decode(), mime_type=attachment.mime_type)
    refused = await refusal_of(client, Text(text="as sent before the fix"), image)
    assert refused.startswith("400") and refusal in refused
    assert "messages.0.content.1.image.source.base64" in refused
    # Through the adapter, the same history is fitted: the image is left out, not refused.
    fake.add(text_reply("fine"))
    reply = await answer(model, UserMessage(content=[Text(text="stored before the fix"), image]))
    assert reply.stop_reason == "stop", reply.error_message


async def test_the_fake_api_refuses_a_large_side_once_a_request_holds_more_than_20_images(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic, model: AnthropicModel
) -> None:
    small = base64.b64encode(plain((10, 10))).decode()
    wide = Image(data=base64.b64encode(plain((2500, 10))).decode(), mime_type="image/png")
    parts: list[Text | Image] = [Text(text="many")]
    parts += [Image(data=small, mime_type="image/png") for _ in range(20)]
    refused = await refusal_of(client, *parts, wide)
    assert "for many-image requests: 2000 pixels" in refused
    # Twenty in all are fine, and the adapter fits twenty-one.
    fake.add(text_reply("twenty, fine"), text_reply("twenty-one, fitted"))
    reply = await answer(model, UserMessage(content=[*parts[:-1], wide]))
    assert reply.stop_reason == "stop", reply.error_message
    reply = await answer(model, UserMessage(content=[*parts, wide]))
    assert reply.stop_reason == "stop", reply.error_message


async def test_a_request_body_over_32_mb_is_refused_with_413(
    fake: FakeAnthropic, client: anthropic.AsyncAnthropic, model: AnthropicModel
) -> None:
    big = "A" * (4_900_000)  # under the per-image limit, stand-in bytes the fake does not decode
    parts: list[Text | Image] = [Text(text="too much")]
    parts += [Image(data=big, mime_type="image/png") for _ in range(7)]
    refused = await refusal_of(client, *parts)
    assert refused.startswith("413") and "maximum allowed number of bytes" in refused
    assert fake.requests == []  # refused before it was parsed
    # The adapter keeps the newest images within the budget: the request goes through.
    fake.add(text_reply("seen"))
    reply = await answer(model, UserMessage(content=parts))
    assert reply.stop_reason == "stop", reply.error_message


async def test_an_image_that_cannot_be_fitted_is_saved_with_a_note_and_the_rest_answered(
    fake: FakeAnthropic, model: AnthropicModel, tmp_path: Path
) -> None:
    files = (
        Attachment("broken.png", "image/png", b"\x89PNG\r\n\x1a\nnot really a png"),
        Attachment("fine.png", "image/png", plain((4, 4))),
    )
    message = await user_message(incoming("look at both", attachments=files), tmp_path)
    [image] = images_in(message)
    assert size_of(image) == (4, 4)
    text = text_of(message)
    assert "look at both" in text
    assert "'broken.png' could not be shown to you as an image" in text
    assert "saved in the workspace as attachments/broken.png" in text
    assert (tmp_path / "attachments" / "broken.png").read_bytes() == files[0].data
    fake.add(text_reply("One was broken."))
    assert (await answer(model, message)).stop_reason == "stop"


async def test_an_image_bomb_is_refused_by_its_header(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    PILImage.new("1", (10_000, 10_000)).save(buffer, "PNG")  # 100 megapixels, a small file
    bomb = Attachment("bomb.png", "image/png", buffer.getvalue())
    message = await user_message(incoming("and this?", attachments=(bomb,)), tmp_path)
    assert isinstance(message.content, str)  # no image went in
    assert "too many pixels (10000×10000)" in message.content
