"""A run that ends aborted always says why: the caller's stop reason when it was stopped, else
the model's own explanation, else a plain sentence (never an end without an explanation)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from core.events import AgentEnd, AgentEvent
from core.loop import MODEL_ABORTED_TEXT, AgentContext, RunControl, run_agent
from core.messages import AssistantMessage, UserMessage
from core.models.base import ModelRequest
from core.models.scripted import Reply, ScriptedModel, call


def context() -> AgentContext:
    return AgentContext("You are a test.", [UserMessage(content="go")])


async def end_of(events: AsyncIterator[AgentEvent]) -> AgentEnd:
    collected = [event async for event in events]
    last = collected[-1]
    assert isinstance(last, AgentEnd)
    return last


async def test_a_reply_the_model_ended_aborted_without_a_stop_ends_with_a_plain_reason() -> None:
    model = ScriptedModel([Reply(text="half an ans", stop_reason="aborted")])
    end = await end_of(run_agent(context(), model))
    assert (end.reason, end.error_message) == ("aborted", MODEL_ABORTED_TEXT)
    assert MODEL_ABORTED_TEXT == "The model stopped the reply before finishing."
    [reply] = end.messages
    assert isinstance(reply, AssistantMessage) and reply.text() == "half an ans"


async def test_a_reply_the_model_ended_aborted_keeps_the_models_own_explanation() -> None:
    script = [
        Reply(
            tool_calls=[call("echo", {"text": "a"})],
            stop_reason="aborted",
            error_message="The provider closed the stream.",
        )
    ]
    end = await end_of(run_agent(context(), ScriptedModel(script)))
    assert (end.reason, end.error_message) == ("aborted", "The provider closed the stream.")


async def test_a_stopped_run_still_ends_with_the_stop_reason_even_if_the_model_saw_it_first() -> (
    None
):
    control = RunControl()

    def stop_then_answer_aborted(request: ModelRequest) -> Reply:
        # The stop lands while the model is answering, and the model reports it as its own.
        control.cancel("Stopped by Ada.")
        return Reply(text="cut", stop_reason="aborted", error_message="The stream was aborted.")

    model = ScriptedModel([stop_then_answer_aborted])
    end = await end_of(run_agent(context(), model, control=control))
    assert (end.reason, end.error_message) == ("aborted", "Stopped by Ada.")
