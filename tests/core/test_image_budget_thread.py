"""A long thread gathers 30 large images (and two stored before attachments were fitted): every
request the adapter builds (`fit_request_images` inside it) passes the strict fake API's
rules, while the same history unfitted is refused."""

from __future__ import annotations

import base64
import json

from core.messages import (
    AssistantMessage,
    Image,
    Message,
    Text,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from core.models.anthropic import AnthropicModel
from core.models.base import ModelRequest
from core.models.image_budget import LEFT_OUT_TEXT
from tests.fakes.anthropic_server import MAX_BODY_BYTES, validate_request
from tests.fakes.sample_images import noisy_photo, plain
from tools.content import prepare_image


def test_every_request_of_a_thread_of_30_large_images_is_accepted() -> None:
    model = AnthropicModel(api_key="sk-ant-test")  # only its request building is used
    photos = [prepare_image(noisy_photo((1600, 1200), seed=n)).data_b64 for n in range(3)]
    assert all(len(p) > 2_000_000 for p in photos)
    legacy_huge = base64.b64encode(noisy_photo((2000, 1500), quality=100)).decode()  # > 5 MB
    legacy_wide = base64.b64encode(plain((9000, 100))).decode()
    history: list[Message] = [
        UserMessage(
            content=[
                Text(text="from before the fix"),
                Image(data=legacy_huge, mime_type="image/jpeg"),
            ]
        ),
        AssistantMessage(content=[Text(text="a big one")]),
        UserMessage(
            content=[Text(text="and this"), Image(data=legacy_wide, mime_type="image/png")]
        ),
        AssistantMessage(content=[Text(text="a wide one")]),
    ]
    for n in range(30):
        photo = Image(data=photos[n % 3], mime_type="image/jpeg")
        if n % 5 == 4:  # some come back from a tool
            call = ToolCall(id=f"toolu_{n}", name="read", arguments={"path": f"{n}.jpg"})
            history += [
                UserMessage(content=f"read {n}.jpg"),
                AssistantMessage(content=[call], stop_reason="tool_use"),
                ToolResultMessage(
                    tool_call_id=call.id, tool_name="read", content=[Text(text="image"), photo]
                ),
            ]
        else:
            history.append(UserMessage(content=[Text(text=f"picture {n}"), photo]))
        request = ModelRequest(system_prompt="You are Teammate.", messages=history, tools=[])
        params, _ = model._build_params(request)
        raw, _ = model._api_messages(history)
        assert validate_request({**params, "messages": raw}) is not None  # unfitted: refused
        body = json.dumps(params)
        assert validate_request(params) is None, n
        assert len(body.encode()) < MAX_BODY_BYTES
        # The newest image is always sent; the same history gives the same bytes.
        assert photo.data in json.dumps(params["messages"][-1])
        again, _ = model._build_params(request)
        assert json.dumps(again) == body
        history.append(AssistantMessage(content=[Text(text=f"seen {n}")]))
    assert LEFT_OUT_TEXT in body and legacy_wide not in body and legacy_huge not in body
