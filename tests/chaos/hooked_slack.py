"""A fake Slack whose Web API calls a crash test can hold, or act on, at an exact moment.

Owns: `HookedSlack`, `FakeSlack` with two awaitable hooks around each Web API call: `before`
(the call has arrived, Slack has not carried it out: the bot is waiting for it) and `after`
(carried out, the answer not yet sent: Slack has it, the bot does not know). A hook that
SIGKILLs the bot there kills it at that point of its work, with no timing involved. A `before`
hook that raises `Drop` makes the call never happen (the connection is cut, as when the
process dies before its request is complete).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from tests.fakes.slack_server import FakeSlack

Hook = Callable[[str, dict[str, Any]], Awaitable[None]]
_ARGS = web.RequestKey("hooked_args", dict)


class Drop(Exception):
    """Raised by a `before` hook: Slack never carries the call out."""


class HookedSlack(FakeSlack):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.before: Hook | None = None
        self.after: Hook | None = None

    async def _arguments(self, request: web.Request) -> dict[str, Any]:
        args = await super()._arguments(request)
        method = request.match_info.get("method", "")
        request[_ARGS] = args
        if self.before is not None:
            await self.before(method, args)
        return args

    async def _api(self, request: web.Request) -> web.StreamResponse:
        try:
            response = await super()._api(request)
        except Drop:
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=500)
        if self.after is not None:
            await self.after(request.match_info["method"], request.get(_ARGS) or {})
        return response
