"""Which models Teammate knows: their limits, prices and thinking support, and `create_model`.

Owns: the per-model table (`ANTHROPIC_MODELS`), `DEFAULT_MODEL`, `anthropic_model_info` and the
`create_model` factory that settings and the CLI use to turn a model id into a `Model`.

Must not: import the `anthropic` SDK at module level. The factory is the one place that imports
`core.models.anthropic`, and only when an Anthropic model is asked for, so listing or validating
model ids stays cheap and works without the SDK.

Prices are USD per million tokens as published on Anthropic's pricing and model pages (checked
for the 2026-10 model line-up). `cache_write` is the 5-minute cache write price (the adapter
only asks for 5-minute caching); `cache_read` is the cache hit price.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.models.base import Model, ModelInfo, Prices

if TYPE_CHECKING:
    from core.models.anthropic import ThinkingMode

log = logging.getLogger(__name__)

# The current Sonnet: the best combination of speed and intelligence, and not deprecated.
DEFAULT_MODEL = "claude-sonnet-5-5"


@dataclass(frozen=True, slots=True)
class AnthropicModelSpec:
    """What the adapter must know about one Claude model beyond `ModelInfo`.

    `adaptive_thinking`: accepts `thinking: {"type": "adaptive"}`.
    `thinks_by_default`: thinks even when the request has no `thinking` field (these models
    reject `{"type": "disabled"}`, so "off" can only mean "don't ask").
    `preserved_thinking`: a replayed thinking block is checked against its prefix (system,
    tools, every earlier message); a changed prefix is a 400 unless the request asks for
    `drop_block` (docs/architecture.md, "Preserved thinking").
    `display_omitted`: thinking text is omitted unless the request asks for it; on these models
    the text between tool calls comes inside thinking, so the adapter asks for it.
    """

    info: ModelInfo
    adaptive_thinking: bool
    thinks_by_default: bool = False
    deprecated: bool = False
    preserved_thinking: bool = False
    display_omitted: bool = False


def _spec(
    model_id: str,
    *,
    prices: tuple[float, float, float, float],
    context_window: int,
    max_output_tokens: int,
    adaptive_thinking: bool,
    thinks_by_default: bool = False,
    deprecated: bool = False,
    preserved_thinking: bool = False,
    display_omitted: bool = False,
) -> AnthropicModelSpec:
    input_price, output_price, cache_read, cache_write = prices
    return AnthropicModelSpec(
        info=ModelInfo(
            id=model_id,
            provider="anthropic",
            context_window=context_window,
            max_output_tokens=max_output_tokens,
            prices=Prices(
                input=input_price,
                output=output_price,
                cache_read=cache_read,
                cache_write=cache_write,
            ),
            supports_thinking=adaptive_thinking,
            supports_images=True,
        ),
        adaptive_thinking=adaptive_thinking,
        thinks_by_default=thinks_by_default,
        deprecated=deprecated,
        preserved_thinking=preserved_thinking,
        display_omitted=display_omitted,
    )


_M = 1_000_000
_K = 1_000

# prices: (input, output, cache read, 5-minute cache write), USD per million tokens.
ANTHROPIC_MODELS: dict[str, AnthropicModelSpec] = {
    spec.info.id: spec
    for spec in (
        _spec(
            "claude-sonnet-5-5",
            preserved_thinking=True,
            display_omitted=True,
            prices=(2.0, 10.0, 0.10, 2.50),
            context_window=1 * _M,
            max_output_tokens=128 * _K,
            adaptive_thinking=True,
            thinks_by_default=True,
        ),
        _spec(
            "claude-sonnet-5",
            display_omitted=True,
            prices=(2.0, 10.0, 0.20, 2.50),
            context_window=1 * _M,
            max_output_tokens=128 * _K,
            adaptive_thinking=True,
            thinks_by_default=True,
        ),
        _spec(
            "claude-sonnet-4-6",
            prices=(3.0, 15.0, 0.30, 3.75),
            context_window=1 * _M,
            max_output_tokens=64 * _K,
            adaptive_thinking=True,
        ),
        _spec(
            "claude-sonnet-4-5",
            prices=(3.0, 15.0, 0.30, 3.75),
            context_window=200 * _K,
            max_output_tokens=64 * _K,
            adaptive_thinking=False,
            deprecated=True,
        ),
        _spec(
            "claude-opus-5-5",
            preserved_thinking=True,
            display_omitted=True,
            prices=(4.0, 20.0, 0.20, 5.00),
            context_window=1 * _M,
            max_output_tokens=128 * _K,
            adaptive_thinking=True,
            thinks_by_default=True,
        ),
        _spec(
            "claude-opus-5",
            prices=(5.0, 25.0, 0.50, 6.25),
            context_window=1 * _M,
            max_output_tokens=128 * _K,
            adaptive_thinking=True,
            thinks_by_default=True,
        ),
        *(
            _spec(
                model_id,
                prices=(5.0, 25.0, 0.50, 6.25),
                context_window=1 * _M,
                max_output_tokens=128 * _K,
                adaptive_thinking=True,
            )
            for model_id in ("claude-opus-4-8", "claude-opus-4-7", "claude-opus-4-6")
        ),
        _spec(
            "claude-opus-4-5",
            prices=(5.0, 25.0, 0.50, 6.25),
            context_window=200 * _K,
            max_output_tokens=64 * _K,
            adaptive_thinking=False,
            deprecated=True,
        ),
        _spec(
            "claude-opus-4-1",
            prices=(15.0, 75.0, 1.50, 18.75),
            context_window=200 * _K,
            max_output_tokens=32 * _K,
            adaptive_thinking=False,
        ),
        _spec(
            "claude-haiku-4-5",
            prices=(1.0, 5.0, 0.10, 1.25),
            context_window=200 * _K,
            max_output_tokens=64 * _K,
            adaptive_thinking=False,
        ),
    )
}

# A dated snapshot id ("claude-haiku-4-5-20251001") has its alias's limits and prices.
_SNAPSHOT_SUFFIX = re.compile(r"-\d{8}$")


def anthropic_model_spec(model_id: str) -> AnthropicModelSpec:
    """The spec for `model_id`; an unknown id gets conservative limits and zero prices (its cost
    cannot be known, and saying $0 is logged rather than guessed)."""
    spec = ANTHROPIC_MODELS.get(model_id) or ANTHROPIC_MODELS.get(
        _SNAPSHOT_SUFFIX.sub("", model_id)
    )
    if spec is not None:
        if spec.info.id != model_id:
            return AnthropicModelSpec(
                info=spec.info.model_copy(update={"id": model_id}),
                adaptive_thinking=spec.adaptive_thinking,
                thinks_by_default=spec.thinks_by_default,
                deprecated=spec.deprecated,
                preserved_thinking=spec.preserved_thinking,
                display_omitted=spec.display_omitted,
            )
        return spec
    log.warning("unknown Anthropic model %r: no prices (cost reported as 0)", model_id)
    return AnthropicModelSpec(
        info=ModelInfo(id=model_id, provider="anthropic", max_output_tokens=8_192),
        adaptive_thinking=False,
    )


def anthropic_model_info(model_id: str) -> ModelInfo:
    return anthropic_model_spec(model_id).info


def create_model(
    model_id: str = DEFAULT_MODEL,
    *,
    api_key: str | None = None,
    base_url: str | None = None,
    thinking: ThinkingMode = "adaptive",
    max_tokens: int | None = None,
    max_retries: int | None = None,
    **options: Any,
) -> Model:
    """The `Model` for `model_id`: `"scripted"` gives a `ScriptedModel` with a fixed demo reply;
    anything else is a Claude model id served by `AnthropicModel`.

    `api_key` and `base_url` default to the SDK's own `ANTHROPIC_API_KEY` and
    `ANTHROPIC_BASE_URL`. `options` go to `AnthropicModel` unchanged (e.g. `retry`, `client`).
    """
    if model_id == "scripted":
        from core.models.scripted import Reply, ScriptedModel

        return ScriptedModel(
            default=Reply(text="This is the scripted model: it answers the same to everything.")
        )
    from core.models.anthropic import DEFAULT_MAX_RETRIES, AnthropicModel

    if anthropic_model_spec(model_id).deprecated:
        log.warning("model %s is deprecated; choose a current model", model_id)

    return AnthropicModel(
        model_id,
        api_key=api_key,
        base_url=base_url,
        thinking=thinking,
        max_tokens=max_tokens,
        max_retries=DEFAULT_MAX_RETRIES if max_retries is None else max_retries,
        **options,
    )
