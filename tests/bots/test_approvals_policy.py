"""Approvals' policy: which calls wait (names and globs, MCP tools too), who may decide, what a
request shows (exactly what will run, secrets masked, bounded), and the command's words."""

from __future__ import annotations

import pytest

from bots.features.approvals_policy import (
    MAX_PREVIEW_CHARS,
    ApprovalSettings,
    call_preview,
    may_decide,
    parse_approvals,
)
from bots.settings import Settings


def test_names_and_globs_select_tools_mcp_included() -> None:
    policy = ApprovalSettings(tools=("bash", "github__*"))
    assert policy.requires("bash") and policy.requires("github__create_issue")
    assert not policy.requires("read") and not policy.requires("gitlab__merge")
    assert not ApprovalSettings().requires("bash")  # unset: nothing waits


def test_a_channels_own_approvals_replace_the_files(tmp_path: object) -> None:
    settings = Settings(
        approvals={"tools": ["bash"]},
        channels={"slack:T:C1": {"approvals": {"tools": ["write"], "approvers": "admins"}}},
    )
    assert settings.approvals_for("slack:T:C2").tools == ("bash",)
    mine = settings.approvals_for("slack:T:C1")
    assert mine.tools == ("write",) and mine.approvers == "admins"


@pytest.mark.parametrize(
    ("approvers", "by", "admin", "allowed"),
    [
        ("asker", "U1", False, True),
        ("asker", "U2", True, False),
        ("admins", "U1", False, False),
        ("admins", "U2", True, True),
        ("asker_or_admins", "U1", False, True),
        ("asker_or_admins", "U2", True, True),
        ("asker_or_admins", "U3", False, False),
    ],
)
def test_who_may_decide(approvers: str, by: str, admin: bool, allowed: bool) -> None:
    assert may_decide(approvers, by_id=by, asker_id="U1", is_admin=admin) is allowed


def test_a_run_without_an_asker_is_decided_by_admins_only() -> None:
    assert not may_decide("asker_or_admins", by_id="U1", asker_id=None, is_admin=False)


def test_the_preview_shows_what_will_run_with_secrets_masked() -> None:
    bash = call_preview("bash", {"command": "curl -H 'Authorization: Bearer abcdefghijklmnop' x"})
    assert "curl -H" in bash and "abcdefghijklmnop" not in bash and "[redacted]" in bash
    edit = call_preview("edit", {"path": "a.py", "old_text": "x = 1\n", "new_text": "x = 2\n"})
    assert "File: `a.py`" in edit and "-x = 1" in edit and "+x = 2" in edit
    write = call_preview("write", {"path": "b.txt", "content": "hello\nworld"})
    assert "(a new file)" in write and "+hello" in write and "+world" in write
    replaced = call_preview("write", {"path": "b.txt", "content": "hello\nthere"}, "hello\nworld")
    assert "(replaced)" in replaced and "-world" in replaced and "+there" in replaced
    mcp = call_preview("github__create_issue", {"title": "t", "api_token": "ghp_" + "a" * 30})
    assert "github__create_issue" in mcp and "ghp_" not in mcp and '"title": "t"' in mcp
    long = call_preview("bash", {"command": "echo " + "x" * 100_000})
    assert len(long) <= MAX_PREVIEW_CHARS


def test_the_commands_words() -> None:
    assert parse_approvals("default") == ("", None)
    assert parse_approvals("off") == ("", ApprovalSettings())
    problem, policy = parse_approvals("bash, github__* approvers=admins timeout=60")
    assert problem == "" and policy == ApprovalSettings(
        tools=("bash", "github__*"), approvers="admins", timeout_s=60
    )
    for bad in ("", "approvers=admins", "bash timeout=0", "bash approvers=all", "rm;ls"):
        problem, policy = parse_approvals(bad)
        assert problem and policy is None
