"""What `teammate doctor` checks about the models Teammate is configured to use.

Owns: collecting every configured model id (the global `model`, each `channels.*.model`, and
the model a channel admin stored with `/teammate config model` for the channels doctor can
name), saying for each whether the catalog knows it (current, deprecated, retired or unknown,
with what to do), then that the API key is set and the model answers a cheap probe.

Must not: write SQL or know a chat platform; generate with a model (the probe only looks the
model up).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Literal

from bots.app import ModelFactory, Probeable, open_store, uses_anthropic
from bots.settings import ChannelConfig, Settings
from core.models.catalog import model_status

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 20.0
STORE_TIMEOUT_S = 15.0

Status = Literal["ok", "info", "warn", "fail"]
Report = Callable[[Status, str, str], None]


async def configured_models(settings: Settings, *, read_store: bool) -> dict[str, list[str]]:
    """Each configured model id, first seen first, with where it is set. `read_store`: also
    the models stored for the channels the configuration file names (a store that cannot be
    opened is skipped: the database checks report it)."""
    found: dict[str, list[str]] = {}

    def add(model_id: str | None, where: str) -> None:
        if model_id:
            found.setdefault(model_id, []).append(where)

    add(settings.model, "model")
    for key, channel in settings.channels.items():
        add(channel.model, f'channels."{key}".model')
    if read_store and settings.channels:
        try:
            async with asyncio.timeout(STORE_TIMEOUT_S):
                store = await open_store(settings)
        except Exception as exc:  # the database checks say why
            log.info("doctor: stored channel models not read: %s", exc)
            return found
        try:
            for key in settings.channels:
                stored = ChannelConfig.from_stored(await store.get_channel_config(key))
                add(stored.model, f"/teammate config in {key}")
        finally:
            await store.close()
    return found


async def check_models(settings: Settings, report: Report, *, read_store: bool) -> None:
    """One catalog line per configured model, then its key and reachability."""
    models = await configured_models(settings, read_store=read_store)
    for model_id, where in models.items():
        await _check_model(settings, model_id, ", ".join(where), report)


async def _check_model(settings: Settings, model_id: str, where: str, report: Report) -> None:
    if not uses_anthropic(model_id):
        report("ok", "model", f"{model_id} (no API key needed)")
        report("ok", "model reachable", f"the {model_id} model runs locally")
        return
    status = model_status(model_id)
    if status.kind == "retired":
        # Every request would fail: nothing else to check.
        report("fail", "model", f"{model_id} (set in {where}) was {status.advice}")
        return
    if status.kind in ("unknown", "deprecated"):
        report("warn", "model", f"{model_id} (set in {where}) is {status.advice}")
    key = settings.anthropic_api_key
    if key is None or not key.get_secret_value():
        report("fail", "model", f"{model_id}: ANTHROPIC_API_KEY is not set")
        report("warn", "model reachable", "not checked (no API key)")
        return
    if status.kind == "current":
        where_to = settings.anthropic_base_url or "api.anthropic.com"
        report("ok", "model", f"{model_id} via {where_to}, ANTHROPIC_API_KEY set")
    factory = ModelFactory(settings)
    try:
        model = factory(model_id)
        if not isinstance(model, Probeable):
            report(
                "warn",
                "model reachable",
                "not checked: this build's model adapter has no reachability probe",
            )
            return
        try:
            problem = await asyncio.wait_for(model.probe(), PROBE_TIMEOUT_S)
        except TimeoutError:
            problem = f"no answer within {PROBE_TIMEOUT_S:.0f} s"
        if problem is None:
            report("ok", "model reachable", f"{model_id} answered")
        else:
            report("fail", "model reachable", problem)
    finally:
        await factory.aclose()
