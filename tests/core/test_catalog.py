"""The model catalog: current models, retired ids, unknown ids priced conservatively, and
long-context pricing in `cost_of`."""

from __future__ import annotations

import logging

import pytest

from core.messages import Usage
from core.models.base import Prices, cost_of
from core.models.catalog import (
    ANTHROPIC_MODELS,
    DEFAULT_MODEL,
    ESTIMATED_PRICES,
    RETIRED_MODELS,
    RetiredModelError,
    anthropic_model_info,
    anthropic_model_spec,
    create_model,
    model_status,
)

# The lineup of the models overview and pricing pages, 2026-12.
CURRENT = {
    "claude-fable-5-2": (8.0, 40.0, 0.20, 10.0),
    "claude-mythos-5-2": (8.0, 40.0, 0.20, 10.0),
    "claude-fable-5-1": (10.0, 50.0, 0.25, 12.50),
    "claude-mythos-5-1": (10.0, 50.0, 0.25, 12.50),
    "claude-opus-5-5": (4.0, 20.0, 0.20, 5.0),
    "claude-sonnet-5-5": (2.0, 10.0, 0.10, 2.50),
    "claude-haiku-5-5": (0.10, 0.50, 0.01, 0.125),
}
PREFIX_CHECKED = {
    "claude-sonnet-5-5",
    "claude-opus-5-5",
    "claude-haiku-5-5",
    "claude-fable-5-1",
    "claude-mythos-5-1",
    "claude-fable-5-2",
    "claude-mythos-5-2",
}


@pytest.mark.parametrize("model_id", sorted(CURRENT))
def test_current_models_have_their_published_limits_and_prices(model_id: str) -> None:
    spec = anthropic_model_spec(model_id)
    prices = spec.info.prices
    assert (prices.input, prices.output, prices.cache_read, prices.cache_write) == CURRENT[model_id]
    assert spec.info.context_window == 1_000_000 and spec.info.max_output_tokens == 128_000
    assert spec.known and not spec.deprecated and not prices.estimated
    assert spec.adaptive_thinking and spec.thinks_by_default and spec.display_omitted


def test_exactly_the_docs_prefix_checked_models_preserve_thinking() -> None:
    assert {m for m, spec in ANTHROPIC_MODELS.items() if spec.preserved_thinking} == PREFIX_CHECKED


def test_every_catalog_model_is_priced_with_a_cache_discount() -> None:
    for model_id, spec in ANTHROPIC_MODELS.items():
        prices = spec.info.prices
        assert 0 < prices.cache_read < prices.input < prices.cache_write < prices.output, model_id
        assert not prices.estimated, model_id


def test_the_default_model_is_current() -> None:
    assert model_status(DEFAULT_MODEL).kind == "current"


def test_a_dated_snapshot_has_its_alias_spec_under_its_own_id() -> None:
    spec = anthropic_model_spec("claude-haiku-4-5-20251001")
    assert spec.info.id == "claude-haiku-4-5-20251001"
    assert spec.info.prices == anthropic_model_info("claude-haiku-4-5").prices
    assert model_status("claude-haiku-5-5-20261007").kind == "current"


@pytest.mark.parametrize("model_id", ["claude-opus-4-1", "claude-opus-4-1-20250805"])
def test_a_retired_model_is_refused_with_its_date_and_replacement(model_id: str) -> None:
    assert "claude-opus-4-1" not in ANTHROPIC_MODELS
    with pytest.raises(RetiredModelError, match=r"retired on 2026-08-05.*claude-opus-5-5"):
        anthropic_model_spec(model_id)
    with pytest.raises(RetiredModelError):
        create_model(model_id, api_key="sk-test")
    status = model_status(model_id)
    assert status.kind == "retired" and "claude-opus-5-5" in status.advice


def test_retired_and_current_tables_do_not_overlap() -> None:
    assert not set(RETIRED_MODELS) & set(ANTHROPIC_MODELS)
    for retired in RETIRED_MODELS.values():
        assert model_status(retired.replacement).kind == "current"


def test_a_deprecated_model_still_runs_and_names_its_replacement() -> None:
    spec = anthropic_model_spec("claude-opus-4-5")
    assert spec.deprecated and spec.info.prices.input == 5.0
    status = model_status("claude-opus-4-5")
    assert status.kind == "deprecated" and "claude-opus-5-5" in status.advice


def test_an_unknown_model_is_priced_at_the_most_any_current_model_charges(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="core.models.catalog"):
        first = anthropic_model_spec("claude-future-9-unknown")
        second = anthropic_model_spec("claude-future-9-unknown")
    assert first == second and not first.known and not first.adaptive_thinking
    prices = first.info.prices
    assert prices.estimated and prices == ESTIMATED_PRICES
    current = [s.info.prices for s in ANTHROPIC_MODELS.values() if not s.deprecated]
    assert prices.input == max(p.input for p in current) == 10.0
    assert prices.output == max(p.output for p in current) == 50.0
    # Never $0: a day of it counts against a budget.
    assert cost_of(Usage(input=1_000, output=1_000), prices) == pytest.approx(0.06)
    warnings = [r for r in caplog.records if "claude-future-9-unknown" in r.getMessage()]
    assert len(warnings) == 1  # once per id
    assert model_status("claude-future-9-unknown").kind == "unknown"


def test_haiku_5_5_is_priced_at_its_long_prompt_rate_above_100k_prompt_tokens() -> None:
    prices = anthropic_model_info("claude-haiku-5-5").prices
    at_threshold = Usage(input=40_000, cache_read=50_000, cache_write=10_000, output=1_000)
    over = Usage(input=40_001, cache_read=50_000, cache_write=10_000, output=1_000)
    assert cost_of(at_threshold, prices) == pytest.approx(
        (40_000 * 0.10 + 50_000 * 0.01 + 10_000 * 0.125 + 1_000 * 0.50) / 1e6
    )
    # Every token of the request, output included, at the long rate.
    assert cost_of(over, prices) == pytest.approx(
        (40_001 * 0.50 + 50_000 * 0.05 + 10_000 * 0.625 + 1_000 * 2.50) / 1e6
    )


def test_a_model_without_long_context_pricing_has_one_rate() -> None:
    prices = anthropic_model_info("claude-sonnet-5-5").prices
    usage = Usage(input=900_000, output=10)
    assert cost_of(usage, prices) == pytest.approx((900_000 * 2.0 + 10 * 10.0) / 1e6)


def test_long_context_prices_come_with_a_threshold() -> None:
    with pytest.raises(ValueError):
        Prices(input=1.0, long_context=Prices(input=2.0))
    with pytest.raises(ValueError):
        Prices(input=1.0, long_context_threshold=10)
