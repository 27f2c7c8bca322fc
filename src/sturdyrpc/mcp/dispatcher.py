"""The MCP server's dispatcher: the core's :class:`~sturdyrpc.dispatch.Dispatcher` with what MCP adds.

Before the middleware sees a request, its context is filled from the request's session
(:meth:`.SessionState.fill`: session id, principal, lifespan value, ``state``, headers). A
``tools/call`` that fails around its tool (a middleware raised anything but an ``RPCError``)
is answered as a tool error, as the tool's own failure would be (the policy is
:meth:`.ToolsCall.failed_call`'s, given with :meth:`MCPDispatcher.set_tool_failure`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..dispatch import Call, Context, Dispatcher
from ..errors import RPCError
from ..limits import Limits
from .session_state import request_session

__all__ = ["MCPDispatcher", "ToolFailure"]

#: ``fn(call, exc)``: the ``isError`` result of a ``tools/call`` that failed outside its tool, or
#: None for the plain -32603.
ToolFailure = Callable[[Call, BaseException], "dict[str, Any] | None"]


class MCPDispatcher(Dispatcher):
    """The MCP server's dispatcher (see the module docstring)."""

    def __init__(self, limits: Limits, logger: logging.Logger) -> None:
        super().__init__(limits, logger=logger)
        self._tool_failure: ToolFailure | None = None

    def set_tool_failure(self, fn: ToolFailure) -> None:
        """``fn(call, exc)``: the ``isError`` result of a ``tools/call`` that failed outside its
        tool (a middleware raised), or None for the plain -32603."""
        self._tool_failure = fn

    def prepare_context(self, ctx: Context) -> None:
        session = request_session()
        if session is not None:
            session.fill(ctx)

    def failure(self, call: Call, exc: BaseException) -> bytes | None:
        """As :meth:`Dispatcher.failure`, but a ``tools/call`` failing with anything but an
        ``RPCError`` is a tool error (``isError`` naming an incident id), as a tool's own would be."""
        fn = self._tool_failure
        if fn is not None and call.method == "tools/call" and not isinstance(exc, RPCError) and not call.is_notification:
            value = fn(call, exc)
            if value is not None:
                return self.result(call, value)
        return super().failure(call, exc)
