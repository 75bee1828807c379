"""A database connection string is shown without its secrets in every form libpq accepts
(issue 23, item 4: `?password=` and key=value strings were printed in full by doctor and by
`ask`'s start-up error)."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.dsn import UNREADABLE, dsn_secrets, redact_dsn
from storage.postgres import redact_url
from tests.bots.test_cli import cli_env, teammate


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        (
            "postgresql://bot:hunter2@db.internal:5432/teammate?sslmode=require",
            "postgresql://bot:***@db.internal:5432/teammate?sslmode=require",
        ),
        ("postgresql://db/teammate", "postgresql://db/teammate"),
        (
            "postgresql://tm@db/tm?password=hunter2&sslmode=require",
            "postgresql://tm@db/tm?password=***&sslmode=require",
        ),
        (
            "postgres://tm@db/tm?sslpassword=k3y%20pass&sslkey=/k.pem",
            "postgres://tm@db/tm?sslpassword=***&sslkey=%2Fk.pem",
        ),
        (
            "host=db user=tm password='hun ter\\'2' dbname=tm",
            "host=db user=tm password=*** dbname=tm",
        ),
        ("host=db password=hunter2 sslpassword=k3y", "host=db password=*** sslpassword=***"),
        ("postgresql://tm:pw@[::1/tm", UNREADABLE),
    ],
)
def test_every_form_is_shown_without_its_secrets(dsn: str, shown: str) -> None:
    assert redact_dsn(dsn) == shown
    assert redact_url(dsn) == shown
    for secret in dsn_secrets(dsn):
        assert secret not in redact_dsn(dsn)


def test_the_secrets_are_found_as_written_and_decoded() -> None:
    assert set(dsn_secrets("postgresql://tm:p%40ss@db/tm?password=a%26b")) == {
        "p@ss",
        "p%40ss",
        "a%26b",
        "a&b",
    }
    assert dsn_secrets("host=db password='hun ter\\'2'") == ["hun ter'2"]
    assert dsn_secrets("postgresql://db/tm") == []


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://tm@127.0.0.1:1/tm?password=hunter2-query-secret",
        "postgresql://tm:hunter2-query-secret@127.0.0.1:1/tm",
    ],
)
async def test_doctor_and_ask_never_print_the_database_password(tmp_path: Path, url: str) -> None:
    # Port 1: nothing listens, so both fail to open the database and say so.
    env = cli_env(tmp_path, tmp_path / "data", None, TEAMMATE_DATABASE_URL=url)
    env["TEAMMATE_MODEL"] = "scripted"
    doctor = await teammate("doctor", env=env, cwd=tmp_path)
    ask = await teammate("ask", "hi", env=env, cwd=tmp_path)
    for done in (doctor, ask):
        assert "hunter2-query-secret" not in done.out + done.err
    assert "127.0.0.1:1/tm" in doctor.out + doctor.err
    assert ask.code != 0 and "***" in ask.err
