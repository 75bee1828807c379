"""Approvals' policy: which tool calls wait for a person, who may decide, how long, and what
the request shows.

Owns: `ApprovalSettings` (`[approvals]` and `[channels."…"] approvals`: tool names or globs,
MCP tools included; `approvers`; `timeout_s`), `may_decide` (the rule checked on our side
from the clicker's id), `waiting_for` (the status line's words) and `call_preview` (exactly
what will run: the bash command, the file and a diff preview for write/edit, any other tool's
arguments; secrets masked, sizes bounded).

Must not: know a platform, wait for anything, or write to the store.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import re
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from bots.features.audit import bounded_detail

__all__ = [
    "MAX_PREVIEW_CHARS",
    "ApprovalSettings",
    "Approvers",
    "call_preview",
    "describe_approvals",
    "may_decide",
    "parse_approvals",
    "waiting_for",
]

Approvers: TypeAlias = Literal["asker", "admins", "asker_or_admins"]
_TOOL_PATTERN = re.compile(r"[A-Za-z0-9_*?\[\]-]{1,100}")  # a tool name, or a glob of them
USAGE = (
    "Write `config approvals bash,write,github__*` (with `approvers=asker|admins|"
    "asker_or_admins` and `timeout=<seconds>` if you like), `config approvals off` or "
    "`config approvals default`."
)

MAX_PREVIEW_CHARS = 2_500  # one request's preview (Slack shows 3,000 in a section)
_MAX_PREVIEW_LINES = 40
# Credential shapes masked wherever they appear in what a request shows.
_SECRET_SHAPES = re.compile(
    r"(sk-ant-[A-Za-z0-9_-]{8,}|xox[abposr]-[A-Za-z0-9-]{8,}|xapp-[A-Za-z0-9-]{8,}"
    r"|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}|AKIA[0-9A-Z]{16}"
    r"|(?i:bearer)\s+[A-Za-z0-9._~+/=-]{12,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----)"
)
MASKED = "[redacted]"


class ApprovalSettings(BaseModel):
    """`[approvals]`: tool calls that wait for a person's yes. No tools: nothing waits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tools: tuple[str, ...] = Field(default=(), max_length=100)  # names or globs ("github__*")
    approvers: Approvers = "asker_or_admins"
    timeout_s: float = Field(default=900.0, ge=1.0, le=7 * 24 * 3600.0)

    def requires(self, tool_name: str) -> bool:
        return any(fnmatch.fnmatchcase(tool_name, pattern) for pattern in self.tools)


def may_decide(approvers: str, *, by_id: str, asker_id: str | None, is_admin: bool) -> bool:
    """Whether the person `by_id` may decide a request made for `asker_id`'s run."""
    is_asker = asker_id is not None and by_id == asker_id
    if approvers == "asker":
        return is_asker
    if approvers == "admins":
        return is_admin
    return is_asker or is_admin


def waiting_for(approvers: str, asker_name: str | None) -> str:
    """Who the request waits for, in words."""
    asker = asker_name or "the person who asked"
    if approvers == "asker":
        return asker
    if approvers == "admins":
        return "an admin"
    return f"{asker} or an admin"


def mask_secrets(text: str) -> str:
    return _SECRET_SHAPES.sub(MASKED, text)


def call_preview(tool_name: str, arguments: dict[str, Any], current: str | None = None) -> str:
    """Exactly what will run, for people: bounded, secrets masked (Markdown code blocks).
    `current`: the file `write` would replace, as it is now (None: a new file)."""
    if tool_name == "bash" and isinstance(arguments.get("command"), str):
        text = _block(arguments["command"])
    elif tool_name == "write" and isinstance(arguments.get("content"), str):
        if current is None:
            shown = "\n".join(f"+{line}" for line in arguments["content"].splitlines())
            text = f"{_path(arguments)} (a new file)\n{_block(shown, 'diff')}"
        else:
            diff = difflib.unified_diff(
                current.splitlines(), arguments["content"].splitlines(), lineterm="", n=2
            )
            shown = "\n".join(list(diff)[2:]) or "(no change)"
            text = f"{_path(arguments)} (replaced)\n{_block(shown, 'diff')}"
    elif tool_name == "edit" and isinstance(arguments.get("old_text"), str):
        diff = difflib.unified_diff(
            arguments["old_text"].splitlines(),
            str(arguments.get("new_text", "")).splitlines(),
            lineterm="",
            n=2,
        )
        text = f"{_path(arguments)}\n{_block(chr(10).join(list(diff)[2:]), 'diff')}"
    else:
        shown = json.dumps(bounded_detail(arguments), ensure_ascii=False, indent=1, default=str)
        text = f"{tool_name}\n{_block(shown, 'json')}"
    text = mask_secrets(text)
    if len(text) > MAX_PREVIEW_CHARS:
        text = text[: MAX_PREVIEW_CHARS - 20].rstrip() + "\n…(cut)\n```"
    return text


def _path(arguments: dict[str, Any]) -> str:
    path = " ".join(str(arguments.get("path", "")).split())[:300]
    return f"File: `{path.replace('`', '')}`"


def _block(text: str, language: str = "") -> str:
    lines = text.replace("```", "` ` `").splitlines()
    if len(lines) > _MAX_PREVIEW_LINES:
        lines = [*lines[:_MAX_PREVIEW_LINES], f"… ({len(lines) - _MAX_PREVIEW_LINES} more lines)"]
    body = "\n".join(lines)
    return f"```{language}\n{body}\n```"


def describe_approvals(policy: ApprovalSettings) -> str:
    """A channel's approvals in words (`/teammate config`)."""
    if not policy.tools:
        return "off"
    return (
        f"{', '.join(policy.tools)} wait for {waiting_for(policy.approvers, 'the asker')} "
        f"(at most {policy.timeout_s:g} s)"
    )


def parse_approvals(value: str) -> tuple[str, ApprovalSettings | None]:
    """`/teammate config approvals …`: tool names or globs (`bash,github__*`), with
    `approvers=asker|admins|asker_or_admins` and `timeout=<seconds>`; `off` (nothing waits
    here); `default` (None: the file's). ("", the policy) or (a problem text, None)."""
    if not value:
        return USAGE, None
    if value.lower() == "default":
        return "", None
    if value.lower() == "off":
        return "", ApprovalSettings()
    fields: dict[str, Any] = {"tools": []}
    for word in value.replace(",", " ").split():
        name, equals, setting = word.partition("=")
        if not equals:
            if not _TOOL_PATTERN.fullmatch(word):
                return f"`{word[:40]}` is not a tool name or glob. {USAGE}", None
            fields["tools"].append(word)
        elif name == "approvers" and setting in ("asker", "admins", "asker_or_admins"):
            fields["approvers"] = setting
        elif name == "timeout" and setting.isdigit() and 1 <= int(setting) <= 7 * 24 * 3600:
            fields["timeout_s"] = float(setting)
        else:
            return f"I can't read `{word[:40]}`. {USAGE}", None
    if not fields["tools"]:
        return f"Name the tools that wait for approval. {USAGE}", None
    fields["tools"] = tuple(dict.fromkeys(fields["tools"]))[:100]
    return "", ApprovalSettings(**fields)
