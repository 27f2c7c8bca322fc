"""Serving 2026-07-28 requests, each on its own: no session, the version and the client's
capabilities in every request's ``_meta``.

Every request runs on the server's one stateless :class:`~sturdyrpc.runner.Runner` (the one
executor, as on every transport): a ``tools/call`` of an inline tool is answered before
:meth:`StatelessServing.serve` returns, anything else finishes in a task. A request that needs a
context gets a :class:`~.session_state.SessionState` of its own (the principal and headers of
the HTTP request that carried it); one that runs inline sees the server's shared stateless
session, which only lends the profile whose checks every request's envelope passes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from ..dispatch import Call, Context
from ..request_context import current_headers, current_principal
from ..request_context import current_session as _current
from ..runner import Runner
from .core import ServerCore
from .profile import MCPProfile
from .session_state import SessionState, StatelessContext, use_session

__all__ = ["StatelessRequest", "StatelessServing", "Emit"]

#: ``await emit(data)``: a notification related to the request (progress, log), sent before its reply.
Emit = Callable[[bytes], Awaitable[None]]


class StatelessRequest:
    """One 2026-07-28 request being served: the :class:`~sturdyrpc.runner.Origin` its reply goes
    to. ``done`` once answered (``value``: the reply bytes, None for a notification)."""

    __slots__ = ("emit", "done", "value", "task", "context", "_waiter")

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self.done = False
        self.value: bytes | None = None
        #: The task finishing the request (None when it was answered at once).
        self.task: asyncio.Task[None] | None = None
        #: The request's context, when one was made (no notification goes out after the reply).
        self.context: StatelessContext | None = None
        self._waiter: asyncio.Future[bytes | None] | None = None

    def reply(self, data: bytes | None) -> None:
        self.done = True
        self.value = data
        if self.context is not None:
            self.context.done = True
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(data)

    async def wait(self) -> bytes | None:
        """The reply (None for a notification). Cancelling the wait cancels the request."""
        if self.done:
            return self.value
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            return await self._waiter
        except asyncio.CancelledError:
            self.cancel()
            raise

    def cancel(self) -> None:
        """Cancel the request (2026-07-28: the client closed the response stream). Never answered."""
        if self.task is not None:
            self.task.cancel()
        if self.context is not None:
            self.context.done = True


def _nowhere(data: bytes) -> None:
    raise AssertionError("a stateless request's reply goes to its origin")  # pragma: no cover


class StatelessServing:
    """The stateless requests of the server whose core is ``core``."""

    def __init__(self, core: ServerCore) -> None:
        self.core = core
        self._made_for: tuple[str, ...] | None = None
        self._session: SessionState | None = None
        self._runner: Runner | None = None

    def _setup(self) -> tuple[SessionState, Runner]:
        core = self.core
        profile = MCPProfile(stateless=True, supported=core.supported_versions)
        self._session = SessionState(profile, core.lifespan)
        self._runner = Runner(core.dispatcher, _nowhere, context_factory=self._context, profile=profile, max_in_flight=None)
        self._made_for = core.supported_versions
        return self._session, self._runner

    def serve(self, got: Any, emit: Emit) -> StatelessRequest:
        """Start serving one message read already (anything :func:`sturdyrpc.envelope.read`
        returns), in the caller's context (the HTTP request's principal and headers)."""
        if self._made_for is not self.core.supported_versions or self._runner is None or self._session is None:
            session, runner = self._setup()
        else:
            session, runner = self._session, self._runner
        req = StatelessRequest(emit)
        token = _current.set(session)  # use_session(), without the call
        try:
            req.task = runner.feed_envelope(got, req)
        finally:
            _current.reset(token)
        return req

    def _context(self, call: Call) -> Context:
        """The context of a stateless request that takes one: its own session (the request's
        principal and headers), made current where the request runs."""
        shared = self._session
        assert shared is not None
        session = SessionState(shared.profile, self.core.lifespan, principal=current_principal.get(), headers=current_headers.get())
        use_session(session)  # in the request's own context: its task's, or the copy a NOW plan runs in
        origin: StatelessRequest = call.origin
        ctx = StatelessContext(call, session, origin.emit)
        origin.context = ctx
        return ctx
