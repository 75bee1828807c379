"""The Health page: this instance, the others' leases, runs in progress (with Stop), the
inbox, MCP servers, the database's size and recent errors.

Owns: reading `store.console_health`, and Stop: the run is looked up in the store (the form
names only its id), then stopped through the runner's stop path (`ConversationRunner.stop`,
which reaches another instance through the store's stop notification), or — in `teammate
console` alone, without a runner — published to whichever instance runs it when the store is
shared. Audited as `run.stop`.

Must not: write SQL; let a viewer stop a run.
"""

from __future__ import annotations

from aiohttp import web

from bots.console.web import deps_of, origin_of, render, require_admin
from bots.features.audit import record_action
from bots.recovery import OWNER
from core.messages import Author
from storage.base import coordination_of

RECENT_ERRORS = 20


async def health_page(
    request: web.Request, *, notice: str = "", problem: str = "", status: int = 200
) -> web.Response:
    deps = deps_of(request)
    health = await deps.store.console_health(errors_limit=RECENT_ERRORS)
    now = await deps.store.now()
    return render(
        request,
        "health.html",
        {
            "title": "Health",
            "h": health,
            "now": now,
            "me": OWNER,
            "mode": deps.mode,
            "shared": coordination_of(deps.store).shared,
            "can_stop": deps.runner is not None or coordination_of(deps.store).shared,
            "mcp": sorted(deps.settings.mcp.servers),
            "notice": notice,
            "problem": problem,
        },
        status=status,
    )


async def stop_run(request: web.Request) -> web.Response:
    session = require_admin(request)
    deps = deps_of(request)
    run_text = request.match_info["run"]
    if not run_text.isdigit() or len(run_text) > 18:
        raise web.HTTPNotFound(text="No such run.")
    run_id = int(run_text)
    health = await deps.store.console_health(errors_limit=0)
    run = next((r for r in health.running if r.run_id == run_id), None)
    if run is None:
        return await health_page(request, problem=f"Run {run_id} is not running any more.")
    by = Author(id=session.person, name=session.name)
    if deps.runner is not None:
        result = deps.runner.stop(run.conversation_key, run_id, by=by)
    elif coordination_of(deps.store).shared:
        await coordination_of(deps.store).publish_stop(
            run.conversation_key, run_id, by_id=by.id, by_name=by.name
        )
        result = "stopped"
    else:
        return await health_page(
            request,
            problem="This console runs alone over a SQLite file: stop the run where it runs.",
            status=409,
        )
    if result != "stopped":
        return await health_page(request, problem=f"Run {run_id} had already ended.")
    await record_action(
        deps.store,
        actor=session.person,
        action="run.stop",
        target=run.conversation_key,
        origin=origin_of(request),
        detail={"run_id": run_id, "by_name": session.name},
    )
    return await health_page(request, notice=f"Asked run {run_id} to stop.")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/health", health_page)
    app.router.add_post("/health/runs/{run}/stop", stop_run)
