"""Which models Teammate knows: their limits, prices and thinking support, and `create_model`.

Owns: the per-model table (`ANTHROPIC_MODELS`), the retired ids (`RETIRED_MODELS`),
`DEFAULT_MODEL`, `anthropic_model_spec` / `anthropic_model_info`, `model_status` (what doctor
and `/config model` say about an id) and the `create_model` factory that settings and the CLI
use to turn a model id into a `Model`.

Must not: import the `anthropic` SDK at module level. The factory is the one place that imports
`core.models.anthropic`, and only when an Anthropic model is asked for, so listing or validating
model ids stays cheap and works without the SDK.

Checked against the models overview, each model's overview page, the pricing page and the model
deprecations page (platform.claude.com/docs, 2026-12). Prices are USD per million tokens;
`cache_write` is the 5-minute cache write price (the adapter only asks for 5-minute caching);
`cache_read` is the cache hit price. Where the docs and an earlier table disagreed, the docs won.

An id the table does not know is never free: it is priced at the highest current price of each
kind (`ESTIMATED_PRICES`, flagged `estimated`) so `/usage` and the daily budgets count it, gets
the smallest limits of any current model, and is warned about once. A retired id is refused
(`RetiredModelError`): requests to it fail at the API, so it must not start.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from core.models.base import Model, ModelInfo, Prices

if TYPE_CHECKING:
    from core.models.anthropic import ThinkingMode

log = logging.getLogger(__name__)

# Models that run here, with no key and no network (a demo, and the tests' fixed reply).
LOCAL_MODELS = frozenset({"demo", "scripted"})

# The current Sonnet: the best combination of speed and intelligence, and not deprecated.
DEFAULT_MODEL = "claude-sonnet-5-5"


@dataclass(frozen=True, slots=True)
class AnthropicModelSpec:
    """What the adapter must know about one Claude model beyond `ModelInfo`.

    `adaptive_thinking`: accepts `thinking: {"type": "adaptive"}`.
    `thinks_by_default`: thinks even when the request has no `thinking` field (some of these
    models reject `{"type": "disabled"}`, so "off" can only mean "don't ask").
    `preserved_thinking`: a replayed thinking block is checked against its prefix (system,
    tools, every earlier message); a changed prefix is a 400 unless the request asks for
    `drop_block` (docs/architecture.md, "Preserved thinking").
    `display_omitted`: thinking text is omitted unless the request asks for it; on these models
    the text between tool calls comes inside thinking, so the adapter asks for it.
    `deprecated`: still served but retiring (`retires`, when the docs give a date); choose
    `replacement`.
    `known`: False for the stand-in spec of an id the table does not know.
    """

    info: ModelInfo
    adaptive_thinking: bool
    thinks_by_default: bool = False
    deprecated: bool = False
    preserved_thinking: bool = False
    display_omitted: bool = False
    retires: str | None = None
    replacement: str | None = None
    known: bool = True


@dataclass(frozen=True, slots=True)
class RetiredModel:
    """An id the API no longer serves: when (per the deprecations page) and what to use."""

    retired: str
    replacement: str


class RetiredModelError(ValueError):
    """A retired model id was asked for; the message says when it retired and what to use."""

    def __init__(self, model_id: str, retired: RetiredModel) -> None:
        super().__init__(
            f"model {model_id} was retired on {retired.retired} and no longer answers; "
            f"use {retired.replacement} instead"
        )
        self.model_id = model_id
        self.retired = retired


def _spec(
    model_id: str,
    *,
    prices: tuple[float, float, float, float],
    context_window: int,
    max_output_tokens: int,
    adaptive_thinking: bool,
    thinks_by_default: bool = False,
    deprecated: bool = False,
    retires: str | None = None,
    replacement: str | None = None,
    preserved_thinking: bool = False,
    display_omitted: bool = False,
    long_context: tuple[int, tuple[float, float, float, float]] | None = None,
) -> AnthropicModelSpec:
    threshold, long_prices = long_context if long_context else (None, None)
    return AnthropicModelSpec(
        info=ModelInfo(
            id=model_id,
            provider="anthropic",
            context_window=context_window,
            max_output_tokens=max_output_tokens,
            prices=_prices(
                prices,
                long_context_threshold=threshold,
                long_context=_prices(long_prices) if long_prices else None,
            ),
            supports_thinking=adaptive_thinking,
            supports_images=True,
        ),
        adaptive_thinking=adaptive_thinking,
        thinks_by_default=thinks_by_default,
        deprecated=deprecated,
        retires=retires,
        replacement=replacement,
        preserved_thinking=preserved_thinking,
        display_omitted=display_omitted,
    )


def _prices(prices: tuple[float, float, float, float], **tiers: Any) -> Prices:
    input_price, output_price, cache_read, cache_write = prices
    return Prices(
        input=input_price,
        output=output_price,
        cache_read=cache_read,
        cache_write=cache_write,
        **tiers,
    )


_M = 1_000_000
_K = 1_000

# prices: (input, output, cache read, 5-minute cache write), USD per million tokens.
# preserved_thinking: the docs list exactly Sonnet/Opus/Haiku 5.5 and Fable/Mythos 5.1 and 5.2
# as running the prefix check. Mythos is on the Claude API for verified organizations only.
ANTHROPIC_MODELS: dict[str, AnthropicModelSpec] = {
    spec.info.id: spec
    for spec in (
        *(
            _spec(
                model_id,
                preserved_thinking=True,
                display_omitted=True,
                prices=(8.0, 40.0, 0.20, 10.0),
                context_window=1 * _M,
                max_output_tokens=128 * _K,
                adaptive_thinking=True,
                thinks_by_default=True,
            )
            for model_id in ("claude-fable-5-2", "claude-mythos-5-2")
        ),
        *(
            _spec(
                model_id,
                preserved_thinking=True,
                display_omitted=True,
                prices=(10.0, 50.0, 0.25, 12.50),
                context_window=1 * _M,
                max_output_tokens=128 * _K,
                adaptive_thinking=True,
                thinks_by_default=True,
            )
            for model_id in ("claude-fable-5-1", "claude-mythos-5-1")
        ),
        *(
            _spec(
                model_id,
                display_omitted=True,
                prices=(10.0, 50.0, 1.0, 12.50),
                context_window=1 * _M,
                max_output_tokens=128 * _K,
                adaptive_thinking=True,
                thinks_by_default=True,
            )
            for model_id in ("claude-fable-5", "claude-mythos-5")
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
            display_omitted=True,
            prices=(5.0, 25.0, 0.50, 6.25),
            context_window=1 * _M,
            max_output_tokens=128 * _K,
            adaptive_thinking=True,
            thinks_by_default=True,
        ),
        *(
            _spec(
                model_id,
                display_omitted=True,
                prices=(5.0, 25.0, 0.50, 6.25),
                context_window=1 * _M,
                max_output_tokens=128 * _K,
                adaptive_thinking=True,
            )
            for model_id in ("claude-opus-4-8", "claude-opus-4-7")
        ),
        _spec(
            "claude-opus-4-6",
            prices=(5.0, 25.0, 0.50, 6.25),
            context_window=1 * _M,
            max_output_tokens=128 * _K,
            adaptive_thinking=True,
        ),
        _spec(
            "claude-opus-4-5",
            prices=(5.0, 25.0, 0.50, 6.25),
            context_window=200 * _K,
            max_output_tokens=64 * _K,
            adaptive_thinking=False,
            deprecated=True,
            replacement="claude-opus-5-5",
        ),
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
            "claude-haiku-5-5",
            preserved_thinking=True,
            display_omitted=True,
            # "For prompts up to 100,000 tokens"; a longer prompt is priced 5x on every token.
            prices=(0.10, 0.50, 0.01, 0.125),
            long_context=(100 * _K, (0.50, 2.50, 0.05, 0.625)),
            context_window=1 * _M,
            max_output_tokens=128 * _K,
            adaptive_thinking=True,
            thinks_by_default=True,
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

# Ids the API no longer serves (model deprecations page; Anthropic-operated platforms).
RETIRED_MODELS: dict[str, RetiredModel] = {
    "claude-sonnet-4-5": RetiredModel("2026-11-30", "claude-sonnet-5-5"),
    "claude-opus-4-1": RetiredModel("2026-08-05", "claude-opus-5-5"),
    "claude-opus-4-0": RetiredModel("2026-06-15", "claude-opus-5-5"),
    "claude-opus-4": RetiredModel("2026-06-15", "claude-opus-5-5"),
    "claude-sonnet-4-0": RetiredModel("2026-06-15", "claude-sonnet-5-5"),
    "claude-sonnet-4": RetiredModel("2026-06-15", "claude-sonnet-5-5"),
}

# A dated snapshot id ("claude-haiku-4-5-20251001") has its alias's limits and prices.
_SNAPSHOT_SUFFIX = re.compile(r"-\d{8}$")


def _current(spec: AnthropicModelSpec) -> bool:
    return not spec.deprecated


# The most any current model charges for each kind of token: an unknown id is priced here so
# a budget trips too early rather than never.
ESTIMATED_PRICES = Prices(
    input=max(s.info.prices.input for s in ANTHROPIC_MODELS.values() if _current(s)),
    output=max(s.info.prices.output for s in ANTHROPIC_MODELS.values() if _current(s)),
    cache_read=max(s.info.prices.cache_read for s in ANTHROPIC_MODELS.values() if _current(s)),
    cache_write=max(s.info.prices.cache_write for s in ANTHROPIC_MODELS.values() if _current(s)),
    estimated=True,
)
# The smallest limits of any current model: a request every model accepts.
_ESTIMATED_CONTEXT = min(s.info.context_window for s in ANTHROPIC_MODELS.values() if _current(s))
_ESTIMATED_OUTPUT = min(s.info.max_output_tokens for s in ANTHROPIC_MODELS.values() if _current(s))

_warned_unknown: set[str] = set()


def _base_id(model_id: str) -> str:
    return _SNAPSHOT_SUFFIX.sub("", model_id)


def retired_model(model_id: str) -> RetiredModel | None:
    """Why `model_id` (an alias or a dated snapshot) no longer runs, or None if it may."""
    return RETIRED_MODELS.get(model_id) or RETIRED_MODELS.get(_base_id(model_id))


def anthropic_model_spec(model_id: str) -> AnthropicModelSpec:
    """The spec for `model_id` (a dated snapshot gets its alias's).

    Raises `RetiredModelError` for a retired id. An unknown id gets `ESTIMATED_PRICES` (flagged
    `estimated`), the smallest current limits, no thinking request and `known=False`; the first
    time each one is seen, a warning is logged."""
    spec = ANTHROPIC_MODELS.get(model_id) or ANTHROPIC_MODELS.get(_base_id(model_id))
    if spec is not None:
        if spec.info.id != model_id:
            return replace(spec, info=spec.info.model_copy(update={"id": model_id}))
        return spec
    retired = retired_model(model_id)
    if retired is not None:
        raise RetiredModelError(model_id, retired)
    if model_id not in _warned_unknown:
        _warned_unknown.add(model_id)
        log.warning(
            "unknown Anthropic model %r: its cost is estimated at $%g/$%g per million "
            "input/output tokens (the most any current model charges) so budgets count it",
            model_id,
            ESTIMATED_PRICES.input,
            ESTIMATED_PRICES.output,
        )
    return AnthropicModelSpec(
        info=ModelInfo(
            id=model_id,
            provider="anthropic",
            context_window=_ESTIMATED_CONTEXT,
            max_output_tokens=_ESTIMATED_OUTPUT,
            prices=ESTIMATED_PRICES,
        ),
        adaptive_thinking=False,
        known=False,
    )


def anthropic_model_info(model_id: str) -> ModelInfo:
    return anthropic_model_spec(model_id).info


StatusKind = Literal["current", "deprecated", "retired", "unknown"]


@dataclass(frozen=True, slots=True)
class ModelStatus:
    """What Teammate can say about a model id before calling it: `kind`, and one sentence
    (`advice`) saying what it means and what to do, empty for a current model."""

    model_id: str
    kind: StatusKind
    advice: str = ""


def model_status(model_id: str) -> ModelStatus:
    """Whether `model_id` is a current, deprecated, retired or unknown Claude model, with what
    to do about it. Logs nothing and never raises."""
    retired = retired_model(model_id)
    if retired is not None and _base_id(model_id) not in ANTHROPIC_MODELS:
        return ModelStatus(
            model_id,
            "retired",
            f"retired on {retired.retired}: requests to it fail. Use {retired.replacement}.",
        )
    spec = ANTHROPIC_MODELS.get(model_id) or ANTHROPIC_MODELS.get(_base_id(model_id))
    if spec is None:
        return ModelStatus(
            model_id,
            "unknown",
            "not in Teammate's model catalog (a typo, or newer than this build): its cost is "
            f"estimated at ${ESTIMATED_PRICES.input:g}/${ESTIMATED_PRICES.output:g} per million "
            "input/output tokens, the most any current model charges, so budgets still count "
            f"it. Check the id, or pick a known one such as {DEFAULT_MODEL}.",
        )
    if spec.deprecated:
        when = f"retires on {spec.retires}" if spec.retires else "will be retired"
        instead = f" Use {spec.replacement}." if spec.replacement else " Choose a current model."
        return ModelStatus(model_id, "deprecated", f"deprecated: it {when}.{instead}")
    return ModelStatus(model_id, "current")


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
    """The `Model` for `model_id`: `"demo"` the keyless demo model (core.models.demo),
    `"scripted"` a `ScriptedModel` with one fixed reply (tests and benchmarks);
    anything else is a Claude model id served by `AnthropicModel`.

    `api_key` and `base_url` default to the SDK's own `ANTHROPIC_API_KEY` and
    `ANTHROPIC_BASE_URL`. `options` go to `AnthropicModel` unchanged (e.g. `retry`, `client`).
    Raises `RetiredModelError` for a retired id.
    """
    if model_id == "demo":
        from core.models.demo import create_demo_model

        return create_demo_model()
    if model_id == "scripted":
        from core.models.scripted import Reply, ScriptedModel

        return ScriptedModel(
            default=Reply(text="This is the scripted model: it answers the same to everything.")
        )
    from core.models.anthropic import DEFAULT_MAX_RETRIES, AnthropicModel

    spec = anthropic_model_spec(model_id)  # a retired id raises here, before any request
    if spec.deprecated:
        log.warning("model %s is %s", model_id, model_status(model_id).advice)

    return AnthropicModel(
        model_id,
        api_key=api_key,
        base_url=base_url,
        thinking=thinking,
        max_tokens=max_tokens,
        max_retries=DEFAULT_MAX_RETRIES if max_retries is None else max_retries,
        **options,
    )
