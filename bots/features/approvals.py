"""Approvals: a person's yes before a risky tool runs (docs/architecture.md, "Approvals").

Owns: `Approvals`, one per runner: the gate a run's loop asks before a batch's calls run
(`gate`: None when nothing in the channel's toolset needs approval, so an unconfigured
deployment pays nothing), the pending request's lifecycle (stored before it is shown, so a
restart keeps it; waited for by the run here, woken at once by a decision made in this
process and by polling the store for one made on another instance; timed out by the clock;
cancelled by a stop), and the decision rule: only an allowed approver's decision counts
(`may_decide`, checked here from the clicker's id), and exactly one decision counts (the
store's conditional UPDATE). Every request and decision is written to the audit log.

Must not: know a platform or its payloads (a platform passes who clicked, whether they are
an admin there, and the channels the click came from); write SQL.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

from bots.features.approvals_policy import (
    ApprovalSettings,
    call_preview,
    may_decide,
    waiting_for,
)
from bots.features.audit import actor_of, origin_of, record_action
from bots.surface.contract import ApprovalDecided, ApprovalRequested, ApprovalView, SurfaceEvent
from core.loop import Allow, Deny, GateCall, ToolGate, Verdict
from core.messages import Author, ToolCall
from storage.base import ApprovalRecord, ApprovalState, ConversationStore
from tools.workspace import read_file_in_workspace

__all__ = ["Approvals", "DecideOutcome", "GateRun", "decision_text"]

log = logging.getLogger(__name__)

POLL_S = 1.0  # how often a waiting run looks for a decision made on another instance
MAX_PREVIEWED_FILE_BYTES = 256 * 1024  # a file `write` replaces, read for its diff
MAX_RUNS_ALLOWED = 1_000  # runs whose "approve the rest" this process remembers (oldest go)

DecideOutcome: TypeAlias = Literal["decided", "stale", "not_allowed", "unknown"]


@dataclass(slots=True)
class GateRun:
    """The run a gate belongs to, as the runner knows it."""

    conversation_id: int
    conversation_key: str
    channel_key: str
    run_id: int
    asker: Author | None
    policy: ApprovalSettings
    show: Callable[[SurfaceEvent], None]
    workspace: Path | None = None  # where `write` would write (its preview shows the change)


@dataclass(slots=True)
class _Waiting:
    future: asyncio.Future[ApprovalRecord]
    run_id: int
    tool_name: str


@dataclass(slots=True)
class _RunAllowances:
    tools: set[str] = field(default_factory=set)  # "approve the rest of this run"


def decision_text(record: ApprovalRecord) -> str:
    """What a decided request says, for people and for the model."""
    label = record.request.get("label") or record.tool_name
    who = record.decided_by_name or record.decided_by or "someone"
    match record.state:
        case "approved":
            return f"Approved by {who}: {label}"
        case "denied":
            return f"Denied by {who}: {label}"
        case "timed_out":
            return f"Nobody approved this in time, so it was not run: {label}"
        case "cancelled":
            return f"Cancelled (the run was stopped): {label}"
        case _:
            return f"Waiting for approval: {label}"


def _model_text(record: ApprovalRecord) -> str:
    who = record.decided_by_name or record.decided_by or "someone"
    if record.state == "denied":
        return f"A person denied this tool call (denied by {who}); it was not run."
    if record.state == "timed_out":
        return "Nobody approved this tool call in time (the approval timed out); it was not run."
    return "This tool call was not approved; it was not run."


class Approvals:
    """Requests waiting for people, and their decisions, for one runner's runs."""

    def __init__(
        self,
        store: ConversationStore,
        *,
        poll_s: float = POLL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._poll_s = poll_s
        self._clock = clock
        self._waiting: dict[int, _Waiting] = {}
        self._allowances: dict[int, _RunAllowances] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._parked: set[int] = set()  # runs left waiting at shutdown: requests kept

    def gate(self, run: GateRun, tool_names: list[str]) -> ToolGate | None:
        """The run's gate, or None when none of its tools needs approval (no cost)."""
        if not any(run.policy.requires(name) for name in tool_names):
            return None

        async def before_tool_calls(calls: list[GateCall]) -> list[Verdict]:
            return await self._before(run, calls)

        return before_tool_calls

    def park(self, run_id: int) -> bool:
        """The process is stopping: if the run waits for a decision, its requests are kept
        pending (not cancelled with it) for the next start to continue. Whether it waits."""
        if not any(waiting.run_id == run_id for waiting in self._waiting.values()):
            return False
        self._parked.add(run_id)
        return True

    def waiting(self, approval_id: int) -> bool:
        """Whether a run of this process waits for the request (tests and benchmarks)."""
        return approval_id in self._waiting

    async def decide(
        self,
        approval_id: int,
        *,
        approve: bool,
        by: Author,
        is_admin: bool,
        channel_keys: tuple[str, ...],
        rest_of_run: bool = False,
    ) -> tuple[DecideOutcome, ApprovalRecord | None]:
        """A person's decision on a request of a channel the click came from. "unknown": no
        such request there (a forged value); "not_allowed": not an approver of it; "stale":
        decided already (by someone else, the clock or a stop)."""
        record = await self._store.approval(approval_id)
        if record is None or record.channel_key not in channel_keys:
            return "unknown", None
        if not record.pending:
            return "stale", record
        approvers = str(record.request.get("approvers", "asker_or_admins"))
        asker_id = record.request.get("asker_id")
        if not may_decide(
            approvers,
            by_id=by.id,
            asker_id=str(asker_id) if asker_id else None,
            is_admin=is_admin,
        ):
            return "not_allowed", record
        state: ApprovalState = "approved" if approve else "denied"
        decided = await self._decided(record, state, by=by, rest_of_run=rest_of_run)
        if decided is None:
            return "stale", await self._store.approval(approval_id)
        if approve and rest_of_run:
            await self._approve_rest(decided, by)
        return "decided", decided

    # -- the gate --------------------------------------------------------------------------

    async def _before(self, run: GateRun, calls: list[GateCall]) -> list[Verdict]:
        allowed = self._allowances.get(run.run_id)
        asked = [
            call
            for call in calls
            if run.policy.requires(call.call.name)
            and not (allowed is not None and call.call.name in allowed.tools)
        ]
        if not asked:
            return [Allow() for _ in calls]
        records = await self._request(run, asked)
        try:
            decided = await self._wait(records, run)
        except asyncio.CancelledError:
            if run.run_id not in self._parked:
                self._spawn(self._cancel_pending(records, run))
            raise
        by_call = {record.call_id: record for record in decided}
        verdicts: list[Verdict] = []
        for call in calls:
            record = by_call.get(call.call.id)
            if record is None or record.state == "approved":
                verdicts.append(Allow())
            else:
                verdicts.append(Deny(_model_text(record)))
        return verdicts

    async def _request(self, run: GateRun, asked: list[GateCall]) -> list[ApprovalRecord]:
        """Store a request per call (a resumed run finds its stored ones), write the audit
        entries, and show the requests still pending."""
        now = await self._store.now()
        expires_at = now + run.policy.timeout_s
        asker = run.asker
        records: list[ApprovalRecord] = []
        for gate_call in asked:
            call = gate_call.call
            request = {
                "label": gate_call.label,
                "preview": call_preview(
                    call.name, call.arguments, await _current_file(run.workspace, call)
                ),
                "approvers": run.policy.approvers,
                "asker_id": asker.id if asker else None,
                "asker_name": asker.name if asker else None,
            }
            record = await self._store.add_approval(
                conversation_id=run.conversation_id,
                conversation_key=run.conversation_key,
                channel_key=run.channel_key,
                run_id=run.run_id,
                call_id=call.id,
                tool_name=call.name,
                request=request,
                now=now,
                expires_at=expires_at,
            )
            records.append(record)
            if record.requested_at == now:  # a new request, not one a resumed run found
                await self._audit(
                    run.channel_key,
                    actor="system",
                    action="approval.request",
                    target=str(run.run_id),
                    detail={"approval": record.id, "tool": call.name, "label": gate_call.label},
                )
        pending = [r for r in records if r.pending]
        if pending:
            run.show(
                ApprovalRequested(
                    conversation_key=run.conversation_key,
                    run_id=run.run_id,
                    requests=tuple(
                        ApprovalView(
                            r.id,
                            r.tool_name,
                            str(r.request.get("label", r.tool_name)),
                            str(r.request.get("preview", "")),
                        )
                        for r in pending
                    ),
                    waiting_for=waiting_for(
                        run.policy.approvers, asker.name if asker is not None else None
                    ),
                    timeout_s=run.policy.timeout_s,
                )
            )
        return records

    async def _wait(self, records: list[ApprovalRecord], run: GateRun) -> list[ApprovalRecord]:
        """Every request decided: by a person here (at once), on another instance (seen
        within `poll_s`), or by the clock at its expiry."""
        loop = asyncio.get_running_loop()
        done: dict[int, ApprovalRecord] = {r.id: r for r in records if not r.pending}
        for record in records:
            if record.pending:
                self._waiting[record.id] = _Waiting(
                    loop.create_future(), record.run_id, record.tool_name
                )
        try:
            while len(done) < len(records):
                open_ids = [r.id for r in records if r.id not in done]
                futures = [self._waiting[i].future for i in open_ids]
                await asyncio.wait(futures, timeout=self._poll_s)
                now = await self._store.now()
                for record in records:
                    if record.id in done:
                        continue
                    decided = await self._settled(record, now)
                    if decided is not None:
                        done[record.id] = decided
                        run.show(_decided_event(decided))
        finally:
            for record in records:
                self._waiting.pop(record.id, None)
        return [done[r.id] for r in records]

    async def _settled(self, record: ApprovalRecord, now: float) -> ApprovalRecord | None:
        """The request's decision: made here, on another instance, or by the clock now."""
        waiter = self._waiting[record.id]
        if waiter.future.done():
            return waiter.future.result()
        stored = await self._store.approval(record.id)
        if stored is not None and not stored.pending:
            return stored
        if now < record.expires_at:
            return None
        timed_out = await self._decided(record, "timed_out", by=None)
        if timed_out is None:  # decided meanwhile, on another instance
            found = await self._store.approval(record.id)
            assert found is not None
            return found
        return timed_out

    async def _cancel_pending(self, records: list[ApprovalRecord], run: GateRun) -> None:
        """A stop while waiting: the requests still pending are cancelled (their buttons say
        so when pressed) and shown decided."""
        for record in records:
            cancelled = await self._decided(record, "cancelled", by=None)
            if cancelled is not None:
                run.show(_decided_event(cancelled))

    async def _decided(
        self,
        record: ApprovalRecord,
        state: ApprovalState,
        *,
        by: Author | None,
        rest_of_run: bool = False,
    ) -> ApprovalRecord | None:
        now = await self._store.now()
        decided = await self._store.decide_approval(
            record.id, state, by=by.id if by else None, by_name=by.name if by else None, now=now
        )
        if decided is None:
            return None
        await self._audit(
            record.channel_key,
            actor=actor_of(record.channel_key, by) if by is not None else "system",
            action="approval.decision",
            target=str(record.run_id),
            detail={
                "approval": record.id,
                "tool": record.tool_name,
                "decision": state,
                "rest_of_run": rest_of_run,
            },
        )
        waiter = self._waiting.get(record.id)
        if waiter is not None and not waiter.future.done():
            waiter.future.set_result(decided)
        return decided

    async def _approve_rest(self, decided: ApprovalRecord, by: Author) -> None:
        """ "Approve the rest of this run" for the tool: later calls of it in the run pass,
        and the run's other pending requests for it are approved too."""
        self._allowances.setdefault(decided.run_id, _RunAllowances()).tools.add(decided.tool_name)
        while len(self._allowances) > MAX_RUNS_ALLOWED:
            self._allowances.pop(next(iter(self._allowances)))
        for other in await self._store.run_approvals(decided.run_id):
            if other.pending and other.tool_name == decided.tool_name:
                await self._decided(other, "approved", by=by, rest_of_run=True)

    async def _audit(
        self, channel_key: str, *, actor: str, action: str, target: str, detail: dict[str, object]
    ) -> None:
        try:
            await record_action(
                self._store,
                actor=actor,
                action=action,
                target=target,
                origin=origin_of(channel_key),
                detail=detail,
            )
        except Exception:
            # The decision stands (it is stored); a lost audit entry is logged, not a failed run.
            log.exception("the audit entry for an approval could not be written")

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


async def _current_file(workspace: Path | None, call: ToolCall) -> str | None:
    """The file a `write` call would replace, as it is (confined to the workspace, bounded);
    None for a new file, another tool, or one that cannot be read."""
    path = call.arguments.get("path")
    if call.name != "write" or workspace is None or not isinstance(path, str):
        return None
    try:
        data = await asyncio.to_thread(
            read_file_in_workspace, workspace, path, max_bytes=MAX_PREVIEWED_FILE_BYTES
        )
    except Exception:
        return None
    return data.decode("utf-8", errors="replace")


def _decided_event(record: ApprovalRecord) -> ApprovalDecided:
    return ApprovalDecided(
        run_id=record.run_id,
        approval_id=record.id,
        state=record.state,
        by_name=record.decided_by_name or record.decided_by,
        text=decision_text(record),
    )
