"""bash never reaches Teammate's own secrets or another channel's data (issue 23, item 3).

Sandboxed, with Teammate installed under /opt (a common layout, and /opt is bound read-only into
every sandbox): channel A's command read channel B's workspace, the database files and the
tokens in `.env`. Now those paths are shown empty, wherever they lie. Unsandboxed is never
silent: `auto` without a sandbox offers no bash at all and says why."""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.tools import ToolError
from tests.tools.conftest import make_ctx, text_of
from tools.bash import BashParams, BashTool, SandboxStatus, probe_sandbox
from tools.toolset import BashConfig, ToolsConfig, build_toolset

SANDBOX = probe_sandbox()


@pytest.fixture
def installed_under_opt() -> Iterator[Path]:
    """A Teammate data directory under /opt, as `pip install` into /opt/teammate makes it."""
    if os.geteuid() != 0:
        pytest.skip("writing under /opt needs root (as CI runs)")
    base = Path("/opt") / f"teammate-test-{uuid.uuid4().hex[:8]}"
    (base / "data" / "workspaces" / "slack-T1-C1").mkdir(parents=True)
    (base / "data" / "workspaces" / "slack-T1-C2").mkdir(parents=True)
    (base / "data" / "workspaces" / "slack-T1-C2" / "payroll.csv").write_text("ada,100000\n")
    (base / "data" / "teammate.db-wal").write_text("channel C2: the launch date is secret\n")
    (base / ".env").write_text("SLACK_BOT_TOKEN=xoxb-not-for-commands\n")
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def run(tool: BashTool, workspace: Path, command: str) -> str:
    try:
        return text_of(
            await tool.execute("call-1", BashParams(command=command), make_ctx(workspace))
        )
    except ToolError as exc:
        return exc.message


@pytest.mark.skipif(not SANDBOX.available, reason=f"bubblewrap is not usable: {SANDBOX.reason}")
async def test_a_sandboxed_command_sees_nothing_of_teammates_own_under_opt(
    installed_under_opt: Path,
) -> None:
    base = installed_under_opt
    data, env_file = base / "data", base / ".env"
    own = data / "workspaces" / "slack-T1-C1"
    tool = BashTool(sandbox=SANDBOX, hidden_paths=[str(data), str(env_file)])
    shown = await run(
        tool,
        own,
        f"cat {data}/workspaces/slack-T1-C2/payroll.csv {data}/teammate.db-wal {env_file}; "
        f"ls -A {data} {data}/workspaces; echo mine > here.txt && cat here.txt",
    )
    assert "ada,100000" not in shown
    assert "launch date" not in shown
    assert "xoxb-not-for-commands" not in shown
    assert "slack-T1-C2" not in shown.splitlines()  # not listed (only named in cat's error)
    assert "mine" in shown and (own / "here.txt").read_text() == "mine\n"
    # Without hiding them (as before), the same command reads all three.
    before = await run(BashTool(sandbox=SANDBOX), own, f"cat {env_file}")
    assert "xoxb-not-for-commands" in before


def test_auto_without_a_sandbox_offers_no_bash_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    unusable = SandboxStatus(False, None, "user namespaces are forbidden (a test's word)")
    caplog.set_level(logging.WARNING)
    tools = build_toolset(ToolsConfig(bash_enabled=True), sandbox=unusable)
    assert "bash" not in [tool.name for tool in tools]
    (line,) = [r.getMessage() for r in caplog.records if "bash is off" in r.getMessage()]
    assert "user namespaces are forbidden" in line and 'sandbox = "off"' in line
    # Said once per process, not once per channel or run.
    build_toolset(ToolsConfig(bash_enabled=True), sandbox=unusable)
    assert sum("bash is off" in r.getMessage() for r in caplog.records) == 1


def test_off_and_required_are_what_they_say() -> None:
    unusable = SandboxStatus(False, None, "not here")
    off = build_toolset(ToolsConfig(bash_enabled=True, bash=BashConfig(sandbox="off")))
    (bash,) = [tool for tool in off if isinstance(tool, BashTool)]
    assert bash.mode == "unsandboxed"  # the explicit choice
    required = build_toolset(
        ToolsConfig(bash_enabled=True, bash=BashConfig(sandbox="required")), sandbox=unusable
    )
    (bash,) = [tool for tool in required if isinstance(tool, BashTool)]
    assert "commands will be refused" in bash.spec().description


def test_doctor_says_what_bash_will_do_here(tmp_path: Path) -> None:
    from bots.sandbox_report import report_sandbox
    from bots.settings import Settings

    said: list[tuple[str, str]] = []

    def report(status: str, _name: str, detail: str) -> None:
        said.append((status, detail))

    usable = SandboxStatus(True, "/usr/bin/bwrap", "bubblewrap works")
    unusable = SandboxStatus(False, None, "namespaces are forbidden")
    off = Settings(
        data_dir=tmp_path, tools=ToolsConfig(bash_enabled=True, bash=BashConfig(sandbox="off"))
    )
    report_sandbox(off, usable, report)
    assert said[-1][0] == "warn" and "can read what the bot can" in said[-1][1]
    auto = Settings(data_dir=tmp_path, tools=ToolsConfig(bash_enabled=True))
    report_sandbox(auto, unusable, report)
    assert said[-1][0] == "warn" and said[-1][1].startswith("bash is off")
    report_sandbox(auto, usable, report)
    assert said[-1][0] == "ok"


def test_settings_name_teammates_private_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bots.settings import Settings

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("SLACK_BOT_TOKEN=xoxb-x\n")
    (tmp_path / "teammate.toml").write_text("")
    monkeypatch.delenv("TEAMMATE_CONFIG", raising=False)
    paths = Settings(data_dir=tmp_path / "data").private_paths()
    assert paths == [
        str((tmp_path / "data").resolve()),
        str((tmp_path / "teammate.toml").resolve()),
        str((tmp_path / ".env").resolve()),
    ]
