"""Plain JSON-RPC 2.0 over HTTP as an ASGI application, for any :class:`~sturdyrpc.dispatch.Dispatcher`.

- ``POST`` with ``Content-Type: application/json``; the body is one request, one notification or
  a batch (per the JSON-RPC spec: ``[]`` gets one -32600, only notifications get nothing).
- A reply goes out as ``200 application/json``; a body that needs no reply gets ``204``.
  JSON-RPC errors (parse error, invalid request, method not found, ...) are ordinary replies
  with status 200: the HTTP status describes the transport, the body the call.
- HTTP-level refusals come from the HTTP layer in front of the endpoint, the same one the MCP
  endpoint has (:func:`sturdyrpc.transports.http_layer.http_layer`): 403 (Host/Origin not
  allowed), 401 (bearer auth), 404 (another path), 405 (not POST), 415 (not JSON), 406
  (``Accept`` excludes JSON), 503 with ``Retry-After: 1`` (``Limits.max_server_in_flight``
  requests already running in this app), 413 (body too large), 408 (body too slow). Their
  bodies are fixed JSON-RPC errors with id null, never anything from an exception.
- Every request runs on the one executor (:class:`sturdyrpc.runner.Runner`), as on stdio: an
  inline handler is answered before the POST awaits anything, ``sys.exit()`` or
  ``KeyboardInterrupt`` in a handler is a -32603 reply with an incident id, never the end of the
  server; blocking sync handlers run on the shared daemon pool of ``Limits.max_threads``.
- Every request that runs as a task (an async or blocking handler), alone or as a batch element,
  takes one slot of the app's ``max_server_in_flight`` (the runner's; batch elements wait for
  theirs in order; inline handlers, answered on the spot, take none); a POST arriving while none
  is free is refused with 503 before its body is read, and nothing of it runs. ``max_batch`` and ``max_depth`` apply as on every other transport,
  ``max_message_bytes`` as the body bound (413).
- A client that disconnects while its call runs cancels the call: nobody is left to answer.

Mount it anywhere: ``Mount("/rpc", app=JSONRPCHTTPApp(rpc))`` in Starlette, or run it directly
with ``uvicorn.run(JSONRPCHTTPApp(rpc))``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..admission import Admission
from ..dispatch import Call, Context, Dispatcher
from ..envelope import UNSET, Envelope, read
from ..profile import Profile
from ..request_context import current_headers, current_principal
from ..runner import Runner
from .asgi import HTTPSecurity, Receive, Scope, Send, refuse_busy, respond
from .http_layer import JSON, http_layer, until_disconnect

__all__ = ["JSONRPCHTTPApp"]

log = logging.getLogger("sturdyrpc")


class _Reply:
    """The :class:`~sturdyrpc.runner.Origin` of one POST: its reply, and a future only once the
    POST has to wait for it (most replies come before it does)."""

    __slots__ = ("done", "value", "_waiter")

    def __init__(self) -> None:
        self.done = False
        self.value: bytes | None = None
        self._waiter: asyncio.Future[None] | None = None

    def reply(self, data: bytes | None) -> None:
        self.done = True
        self.value = data
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def waiter(self) -> asyncio.Future[None]:
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
        return self._waiter


def _nowhere(data: bytes) -> None:  # pragma: no cover - every call of this app has an origin
    raise AssertionError("a reply of the HTTP app goes to its POST")


def _runs(got: Any) -> bool:
    """Whether anything a POST carried will run (a request or a notification)."""
    if type(got) is Envelope:
        return got.method is not UNSET
    return type(got) is list and any(type(m) is Envelope and m.method is not UNSET for m in got)


class JSONRPCHTTPApp:
    """An ASGI app serving ``dispatcher`` as plain JSON-RPC over HTTP POST.

    ``security`` holds the Host/Origin allow-lists, trusted proxies, the body bound and deadline
    and the optional bearer auth (secure defaults: localhost only, 4 MiB, 30 s), applied by the
    HTTP layer both HTTP endpoints share. ``profile`` adds protocol rules (see
    :class:`~sturdyrpc.profile.Profile`); ``path``, when set, is the only path served (404 elsewhere).
    """

    def __init__(self, dispatcher: Dispatcher, *, security: HTTPSecurity | None = None, profile: Profile | None = None,
                 path: str | None = None) -> None:
        self.dispatcher = dispatcher
        self.security = security or HTTPSecurity()
        self.profile = profile
        self.path = path
        limits = dispatcher.limits
        # The one executor, for every POST of this app: its slots are the server-wide ones.
        self._runner = Runner(dispatcher, _nowhere, context_factory=self._context, profile=profile,
                              max_in_flight=limits.max_server_in_flight)
        #: Requests running in this app, across all connections (``Limits.max_server_in_flight``):
        #: every one that runs as a task holds a slot, batch elements in order.
        self.admission: Admission = self._runner.admission
        self._layer = http_layer(self._endpoint, security=self.security, admission=self.admission,
                                 max_message_bytes=limits.max_message_bytes, path=path, methods=("POST",),
                                 produces={"POST": (JSON,)}, null_id=True)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._layer(scope, receive, send)

    async def _endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A POST the HTTP layer let through, its whole body read (handed on by the layer)."""
        got = read(scope["sturdyrpc.body"], self.dispatcher.limits)  # the one decode of this POST (the layer read it whole)
        if self.admission.full and _runs(got):
            await refuse_busy(send)  # the last slot went while the body was being read: nothing of it runs
            return
        reply = _Reply()
        task = self._runner.feed_envelope(got, reply)  # a task-planned request takes its slot on this turn
        if not reply.done:
            waiter = reply.waiter()
            try:
                answered = await until_disconnect(waiter, receive)
            except asyncio.CancelledError:
                if task is not None:
                    task.cancel()
                raise
            if not answered:
                if task is not None:
                    task.cancel()  # the client left: nobody is left to answer
                return
        if reply.value is None:
            await respond(send, 204)
        else:
            await respond(send, 200, reply.value)

    @staticmethod
    def _context(call: Call) -> Context:
        """The request's context (the chain's and the handler's): with its HTTP request's
        principal and headers."""
        ctx = call.make_context()
        ctx.principal = current_principal.get()
        ctx.headers = current_headers.get()
        return ctx

    def close(self) -> None:
        """Kept for compatibility: handlers share the process's daemon pool, which outlives the app."""
