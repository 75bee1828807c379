"""The Channels pages: every channel, and one channel's configuration, memory, schedules and
budget use, changed by admins with the checks `/teammate config` makes.

Owns: the list (conversations, runs and cost over 30 days, last activity), a channel's page,
and its changes: configuration (`bots.features.channel_config.ChannelConfigs.change`, the same
words as the chat command: `clear`, `default`, `none`), a memory note added or forgotten
(`bots.features.memory.ChannelMemory`), a schedule cancelled. Each change is audited
(`config.set`, `memory.add`, `memory.forget`, `schedule.cancel` is recorded as `config.set`
of the schedule) and is stored, so every instance applies it at the channel's next run.

Must not: write SQL; let a viewer change anything (`require_admin`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any
from urllib.parse import quote

from aiohttp import web

from bots.console.web import deps_of, form_of, origin_of, render, require_admin, text_shown
from bots.features.audit import record_action
from bots.features.channel_config import ChannelConfigs, ConfigChange, allowed_tools, describe
from bots.features.memory import ChannelMemory, NoteRefused
from bots.features.schedules import describe_schedule
from bots.settings import ChannelConfig

PERIOD_S = 30 * 86400
MAX_CHANNELS = 500
MAX_FIELD_CHARS = 4000


def channel_key_of(request: web.Request) -> str:
    key = request.match_info["key"]
    if len(key) > 200 or (":" not in key and key != "terminal"):
        raise web.HTTPNotFound(text="No such channel.")
    return key


def channel_url(key: str) -> str:
    return "/channels/" + quote(key, safe="")


async def channels_page(request: web.Request) -> web.Response:
    deps = deps_of(request)
    now = await deps.store.now()
    channels = await deps.store.console_channels(since=now - PERIOD_S, limit=MAX_CHANNELS)
    return render(
        request,
        "channels.html",
        {"title": "Channels", "channels": channels, "url": channel_url},
    )


async def channel_page(
    request: web.Request, *, notice: str = "", problem: str = "", status: int = 200
) -> web.Response:
    deps = deps_of(request)
    key = channel_key_of(request)
    stored = ChannelConfig.from_stored(await deps.store.get_channel_config(key))
    today = int(await deps.store.now() // 86400) * 86400.0
    usage = await deps.store.usage_summary(today, channel_key=key)
    schedules = await deps.store.schedules(key)
    return render(
        request,
        "channel.html",
        {
            "title": f"Channel {key}",
            "key": key,
            "url": channel_url(key),
            "view": describe(deps.settings, key, stored),
            "stored": stored,
            "allowed": allowed_tools(deps.settings, key),
            "notes": await deps.store.memory_notes(key),
            "text_shown": text_shown(deps.settings, key),
            "schedules": [(s, describe_schedule(s)) for s in schedules],
            "usage": usage,
            "limit": deps.settings.budgets.channel_usd_per_day,
            "notice": notice,
            "problem": problem,
        },
        status=status,
    )


def _field(form: Any, name: str) -> str | None:
    value = form.get(name)
    if not isinstance(value, str) or not value.strip():
        return None
    return value[:MAX_FIELD_CHARS]


async def change_config(request: web.Request) -> web.Response:
    session = require_admin(request)
    deps = deps_of(request)
    key = channel_key_of(request)
    form = await form_of(request)
    change = ConfigChange(
        prompt=_field(form, "prompt"),
        model=_field(form, "model"),
        tools=_field(form, "tools"),
        timezone=_field(form, "timezone"),
        reset=form.get("reset") == "yes",
    )
    if change.empty:
        return await channel_page(request, problem="Nothing to change: every field was empty.")
    problem, stored = await ChannelConfigs(deps.store, deps.settings).change(
        key, change, by=session.person
    )
    if problem:
        return await channel_page(request, problem=problem, status=400)
    asked = {name: value for name, value in asdict(change).items() if value not in (None, False)}
    await record_action(
        deps.store,
        actor=session.person,
        action="config.set",
        target=key,
        origin=origin_of(request),
        detail={"change": asked, "now": asdict(describe(deps.settings, key, stored))},
    )
    return await channel_page(request, notice="Saved. The channel's next answer uses it.")


async def add_note(request: web.Request) -> web.Response:
    session = require_admin(request)
    deps = deps_of(request)
    key = channel_key_of(request)
    text = _field(await form_of(request), "note")
    if text is None:
        return await channel_page(request, problem="The note was empty.", status=400)
    memory = ChannelMemory(deps.store, deps.settings.memory, deps.settings.secrets())
    try:
        note = await memory.add(key, text, by=session.person)
    except NoteRefused as exc:
        return await channel_page(request, problem=str(exc), status=400)
    await record_action(
        deps.store,
        actor=session.person,
        action="memory.add",
        target=key,
        origin=origin_of(request),
        detail={"note": note.id, "text": note.text},
    )
    return await channel_page(request, notice=f"Kept note #{note.id}.")


async def forget_note(request: web.Request) -> web.Response:
    session = require_admin(request)
    deps = deps_of(request)
    key = channel_key_of(request)
    note_id = _number(request.match_info["note"])
    if not await deps.store.forget_memory_note(key, note_id):
        return await channel_page(request, problem=f"No note #{note_id} here.", status=404)
    await record_action(
        deps.store,
        actor=session.person,
        action="memory.forget",
        target=key,
        origin=origin_of(request),
        detail={"note": note_id},
    )
    return await channel_page(request, notice=f"Forgot note #{note_id}.")


async def cancel_schedule(request: web.Request) -> web.Response:
    session = require_admin(request)
    deps = deps_of(request)
    key = channel_key_of(request)
    schedule_id = _number(request.match_info["schedule"])
    if not await deps.store.cancel_schedule(key, schedule_id):
        return await channel_page(request, problem=f"No schedule #{schedule_id} here.", status=404)
    await record_action(
        deps.store,
        actor=session.person,
        action="config.set",
        target=key,
        origin=origin_of(request),
        detail={"change": {"schedule_cancelled": schedule_id}},
    )
    return await channel_page(request, notice=f"Cancelled schedule #{schedule_id}.")


def _number(text: str) -> int:
    if not text.isdigit() or len(text) > 18:
        raise web.HTTPNotFound(text="No such item.")
    return int(text)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/channels", channels_page)
    app.router.add_get("/channels/{key}", channel_page)
    app.router.add_post("/channels/{key}/config", change_config)
    app.router.add_post("/channels/{key}/memory", add_note)
    app.router.add_post("/channels/{key}/memory/{note}/forget", forget_note)
    app.router.add_post("/channels/{key}/schedules/{schedule}/cancel", cancel_schedule)
