"""`[discord]` settings and the Discord allow-lists: guilds, channels, roles, users, DMs, admins."""

from __future__ import annotations

from pathlib import Path

import pytest

from bots.platforms.discord.access import (
    CHANNEL_TEXT,
    DM_TEXT,
    DMS_OFF_TEXT,
    GUILD_TEXT,
    PERSON_TEXT,
    discord_refusal,
    is_admin,
)
from bots.platforms.discord.events import Person
from bots.settings import DiscordSettings, SettingsError, load_settings

GUILD = "1200000000000000001"
CHANNEL = "1300000000000000001"
ROLE = "1600000000000000001"
ADA = Person(user_id="1400000000000000001", name="Ada", role_ids=(ROLE,))
BOB = Person(user_id="1400000000000000002", name="Bob", role_ids=())


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TEAMMATE_CONFIG", raising=False)


def test_discord_defaults_sync_globally_with_message_content_and_everyone_allowed() -> None:
    config = load_settings().discord
    assert config.dev_guild_id is None and config.message_content and config.allow_dms
    assert discord_refusal(config, BOB, guild_id=GUILD, channel_id=CHANNEL) is None
    assert discord_refusal(config, BOB, guild_id=None, channel_id="17") is None
    assert not is_admin(config, ADA)


def test_discord_settings_from_toml_and_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config_file = tmp_path / "team.toml"
    config_file.write_text(
        f"""
[discord]
dev_guild_id = {GUILD}
message_content = false
allowed_roles = [{ROLE}]
admin_users = ["1400000000000000009"]
"""
    )
    monkeypatch.setenv("TEAMMATE_CONFIG", str(config_file))
    monkeypatch.setenv("TEAMMATE_DISCORD__ALLOW_DMS", "false")
    config = load_settings().discord
    assert config.dev_guild_id == GUILD  # numbers become snowflake strings
    assert config.message_content is False and config.allow_dms is False
    assert config.allowed_roles == [ROLE]
    assert config.admin_users == ["1400000000000000009"]


@pytest.mark.parametrize("bad", ['"abc"', "-5", "true", '"1:2"'])
def test_a_bad_snowflake_names_the_setting(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, bad: str
) -> None:
    config_file = tmp_path / "team.toml"
    config_file.write_text(f"[discord]\ndev_guild_id = {bad}\n")
    monkeypatch.setenv("TEAMMATE_CONFIG", str(config_file))
    # Named as written in the file, with its line (a variable would be named as a variable).
    with pytest.raises(SettingsError, match=r"team\.toml, line 2: discord\.dev_guild_id: "):
        load_settings()


def test_a_disallowed_guild_or_channel_is_refused() -> None:
    config = DiscordSettings(allowed_guilds=[GUILD], allowed_channels=[CHANNEL])
    assert discord_refusal(config, BOB, guild_id=GUILD, channel_id=CHANNEL) is None
    assert discord_refusal(config, BOB, guild_id="99", channel_id=CHANNEL) == GUILD_TEXT
    assert discord_refusal(config, BOB, guild_id=GUILD, channel_id="98") == CHANNEL_TEXT
    # A DM is no way around the lists: only a member of an allowed guild is answered.
    assert discord_refusal(config, BOB, guild_id=None, channel_id="17") == DM_TEXT
    member = {GUILD: frozenset[str]()}
    assert discord_refusal(config, BOB, guild_id=None, channel_id="17", memberships=member) is None
    elsewhere = {"99": frozenset[str]()}
    assert (
        discord_refusal(config, BOB, guild_id=None, channel_id="17", memberships=elsewhere)
        == DM_TEXT
    )
    # Without any list, everyone may DM, as before.
    assert discord_refusal(DiscordSettings(), BOB, guild_id=None, channel_id="17") is None
    no_dms = DiscordSettings(allow_dms=False)
    assert discord_refusal(no_dms, BOB, guild_id=None, channel_id="17") == DMS_OFF_TEXT


def test_a_person_passes_by_user_or_role_or_being_an_admin() -> None:
    config = DiscordSettings(allowed_roles=[ROLE])
    assert discord_refusal(config, ADA, guild_id=GUILD, channel_id=CHANNEL) is None
    assert discord_refusal(config, BOB, guild_id=GUILD, channel_id=CHANNEL) == PERSON_TEXT
    # In a DM, the person's roles are those of their membership in an admitting guild.
    assert discord_refusal(config, ADA, guild_id=None, channel_id="17") == DM_TEXT
    with_role = {GUILD: frozenset({ROLE})}
    assert (
        discord_refusal(config, BOB, guild_id=None, channel_id="1", memberships=with_role) is None
    )
    without = {GUILD: frozenset({"5"})}
    assert discord_refusal(config, BOB, guild_id=None, channel_id="1", memberships=without) == (
        DM_TEXT
    )
    by_user = DiscordSettings(allowed_users=[BOB.user_id])
    assert discord_refusal(by_user, BOB, guild_id=None, channel_id="17") is None
    assert discord_refusal(by_user, ADA, guild_id=GUILD, channel_id=CHANNEL) == PERSON_TEXT
    admin = DiscordSettings(allowed_users=[BOB.user_id], admin_roles=[ROLE])
    assert discord_refusal(admin, ADA, guild_id=GUILD, channel_id=CHANNEL) is None


def test_admins_by_user_or_role() -> None:
    assert is_admin(DiscordSettings(admin_users=[BOB.user_id]), BOB)
    assert is_admin(DiscordSettings(admin_roles=[ROLE]), ADA)
    assert not is_admin(DiscordSettings(admin_roles=[ROLE]), BOB)
