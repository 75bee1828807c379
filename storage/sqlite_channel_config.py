"""The SQL of a channel's stored configuration, on SQLite.

Owns: the call behind `set_channel_config` and the read behind `get_channel_config` (many
channels in one statement when the runner reads many at once), as `Op`s the store's batchers
run.

Must not: open connections or transactions; import `tools` or `bots`.
"""

from __future__ import annotations

from typing import Any

from storage import rows
from storage.batching import Op
from storage.sqlite_ops import Db, fetchall, json_list, one_of


async def _channel_config(db: Db, call: tuple[str, str, str | None, float]) -> None:
    await db.execute(
        "INSERT INTO channel_config (channel_key, config, updated_by, updated_at) "
        "VALUES (?, ?, ?, ?) ON CONFLICT (channel_key) DO UPDATE SET "
        "config = excluded.config, updated_by = excluded.updated_by, "
        "updated_at = excluded.updated_at",
        call,
    )


CHANNEL_CONFIG: Op[Db, tuple[str, str, str | None, float], None] = Op(
    "set_channel_config", one=_channel_config, lone=_channel_config
)


async def _channel_configs(db: Db, keys: list[str]) -> list[dict[str, Any] | None]:
    found = await fetchall(
        db,
        "SELECT channel_key, config FROM channel_config "
        "WHERE channel_key IN (SELECT value FROM json_each(?))",
        (json_list(set(keys)),),
    )
    configs = {str(key): rows.load_json_object(config) for key, config in found}
    return [configs.get(key) for key in keys]


CHANNEL_CONFIG_READ: Op[Db, str, dict[str, Any] | None] = Op(
    "get_channel_config",
    one=one_of(_channel_configs),
    lone=one_of(_channel_configs),
    many=_channel_configs,
)
