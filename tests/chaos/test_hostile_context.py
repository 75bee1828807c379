"""A message bigger than the model's context (issue 13): refused in plain words before any
model call, kept out of history (so the thread is not poisoned for every later message), and
the next message is answered normally. The real runner on SQLite, ScriptedModel."""

from __future__ import annotations

from pathlib import Path

from core.messages import UserMessage
from core.models.scripted import Reply, ScriptedModel
from storage.sqlite import SqliteStore
from tests.bots.runner_helpers import KEY, history, incoming, make_runner
from tests.fakes.recording_surface import RecordingSurface


async def test_a_message_over_the_context_is_refused_before_the_model_is_called(
    tmp_path: Path,
) -> None:
    store = await SqliteStore.open(tmp_path / "teammate.db")
    model = ScriptedModel([Reply(text="a normal answer")])
    runner = make_runner(store, tmp_path, model)
    try:
        window = model.info.context_window
        huge = "lorem ipsum " * (window // 2)  # about 1.5 windows at 4 characters a token
        surface = RecordingSurface("huge")
        await runner.submit(incoming(huge), surface)
        await runner.wait(KEY)
        assert model.requests == []  # refused before any model call
        said = " ".join(n.text for n in surface.notices())
        assert "too long" in said and "tokens" in said
        assert "Traceback" not in said
        assert surface.closed == 1
        assert not any(
            isinstance(m, UserMessage) and "lorem ipsum" in m.text() for m in await history(store)
        )

        after = RecordingSurface("after")
        await runner.submit(incoming("a short question"), after)
        await runner.wait(KEY)
        assert [f.final_text for f in after.finished()] == ["a normal answer"]
        sent = model.requests[0].messages
        assert not any("lorem ipsum" in m.text() for m in sent if isinstance(m, UserMessage))
    finally:
        await runner.close()
        await store.close()
