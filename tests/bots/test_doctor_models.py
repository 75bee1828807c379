"""`teammate doctor` names every configured model the catalog does not vouch for: unknown
(priced as an estimate), deprecated, or retired (and then fails), wherever it is set: the
global model, a channel in the file, or a channel's stored `/teammate config model`."""

from __future__ import annotations

import asyncio
from pathlib import Path

from storage.sqlite import SqliteStore
from tests.bots.test_cli import cli_env, data_dir, fake, teammate
from tests.fakes.anthropic_server import FakeAnthropic

__all__ = ["data_dir", "fake"]  # fixtures


def model_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if " model" in line[:20]]


async def test_doctor_warns_that_an_unknown_model_is_estimated_and_still_probes_it(
    tmp_path: Path, data_dir: Path, fake: FakeAnthropic
) -> None:
    env = cli_env(tmp_path, data_dir, fake, TEAMMATE_MODEL="claude-sonnet-9-9")
    done = await teammate("doctor", env=env, cwd=tmp_path)
    [line] = [li for li in done.out.splitlines() if li.startswith("warn  model:")]
    assert line.startswith("warn  model: claude-sonnet-9-9 (set in model) is not in Teammate's")
    assert "estimated at $10/$50 per million input/output tokens" in line
    assert "budgets still count it" in line and "claude-sonnet-5-5" in line
    assert [r.path for r in fake.requests] == ["/v1/models/claude-sonnet-9-9"]


async def test_doctor_fails_on_a_retired_model_stored_for_a_channel(
    tmp_path: Path, data_dir: Path, fake: FakeAnthropic
) -> None:
    config = tmp_path / "teammate.toml"
    config.write_text('[channels."slack:T1:C1"]\nsystem_prompt = "Be terse."\n')
    await asyncio.to_thread(data_dir.mkdir, parents=True, exist_ok=True)
    async with SqliteStore.open(data_dir / "teammate.db") as store:
        await store.set_channel_config(
            "slack:T1:C1", {"model": "claude-opus-4-1-20250805"}, by="U1"
        )
    env = cli_env(tmp_path, data_dir, fake, TEAMMATE_CONFIG=str(config))
    done = await teammate("doctor", env=env, cwd=tmp_path)
    assert done.code == 1
    assert (
        "fail  model: claude-opus-4-1-20250805 (set in /teammate config in slack:T1:C1) was "
        "retired on 2026-08-05: requests to it fail. Use claude-opus-5-5."
    ) in done.out
    # The retired model is not probed; the global one is.
    assert [r.path for r in fake.requests] == ["/v1/models/claude-sonnet-5-5"]


async def test_doctor_passes_current_models_without_a_warning(
    tmp_path: Path, data_dir: Path, fake: FakeAnthropic
) -> None:
    env = cli_env(tmp_path, data_dir, fake, TEAMMATE_MODEL="claude-haiku-5-5")
    done = await teammate("doctor", env=env, cwd=tmp_path)
    assert "ok    model: claude-haiku-5-5 via" in done.out
    assert not [line for line in model_lines(done.out) if line.startswith(("warn", "fail"))]


async def test_doctor_names_a_retired_global_model_in_its_settings_line(
    tmp_path: Path, data_dir: Path, fake: FakeAnthropic
) -> None:
    env = cli_env(tmp_path, data_dir, fake, TEAMMATE_MODEL="claude-sonnet-4-5")
    done = await teammate("doctor", env=env, cwd=tmp_path)
    assert done.code == 1
    assert "fail  settings: TEAMMATE_MODEL:" in done.out
    assert "claude-sonnet-4-5 was retired on 2026-11-30" in done.out
    assert "claude-sonnet-5-5" in done.out
