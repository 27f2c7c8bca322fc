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
- Handlers run through :func:`sturdyrpc.execute.execute`, as on stdio: ``sys.exit()`` or
  ``KeyboardInterrupt`` in a handler is a -32603 reply with an incident id, never the end of the
  server; blocking sync handlers run on the shared daemon pool of ``Limits.max_threads``.
- Every request that runs, alone or as a batch element, takes one slot of the app's
  ``max_server_in_flight`` (batch elements wait for slots in order); a POST arriving while none
  is free is refused with 503 before its body is read. ``max_batch`` and ``max_depth`` apply as
  on every other transport, ``max_message_bytes`` as the body bound (413).
- A client that disconnects while its call runs cancels the call: nobody is left to answer.

Mount it anywhere: ``Mount("/rpc", app=JSONRPCHTTPApp(rpc))`` in Starlette, or run it directly
with ``uvicorn.run(JSONRPCHTTPApp(rpc))``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from typing import Any

from ..admission import Admission
from ..dispatch import BatchJob, Call, Context, Dispatcher
from ..execute import Pending, run_call, run_call_now, shared_pool
from ..profile import Profile
from ..request_context import current_call, current_headers, current_principal
from .asgi import HTTPSecurity, Receive, Scope, Send, refuse_busy, respond
from .http_layer import JSON, http_layer, until_disconnect

__all__ = ["JSONRPCHTTPApp"]

log = logging.getLogger("sturdyrpc")


_BUSY: Any = object()  # _serve's answer when no slot was free: the caller sends 503
_GONE: Any = object()  # the client disconnected: nothing is sent


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
        #: Requests running in this app, across all connections (``Limits.max_server_in_flight``).
        self.admission = Admission(limits.max_server_in_flight)
        self._pool = shared_pool(limits.max_threads)
        self._layer = http_layer(self._endpoint, security=self.security, admission=self.admission,
                                 max_message_bytes=limits.max_message_bytes, path=path, methods=("POST",),
                                 produces={"POST": (JSON,)}, null_id=True)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._layer(scope, receive, send)

    async def _endpoint(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A POST the HTTP layer let through, its whole body read."""
        reply = await self._serve((await receive())["body"], receive)  # the layer handed the whole body on
        if reply is _GONE:
            return
        if reply is _BUSY:
            await refuse_busy(send)
        elif reply is None:
            await respond(send, 204)
        else:
            await respond(send, 200, reply)

    async def _serve(self, body: bytes, receive: Receive) -> Any:
        todo = self.dispatcher.receive(body, None, self.profile)
        if todo is None or type(todo) is bytes:
            return todo
        loop = asyncio.get_running_loop()
        if type(todo) is Call:
            call: Call = todo
            entry = call.entry
            if not entry.is_async and not entry.blocking:
                if not self.dispatcher.middleware_chain:
                    return self.dispatcher.run_inline(call)  # finishes on the spot: no task, no thread, no slot
                if self.dispatcher.eager_chain:
                    # the chain started here (run_call_now): answered now unless it suspends
                    cv = contextvars.copy_context()
                    outcome = run_call_now(self.dispatcher, call, cv.run(self._context, call), cv)
                    if type(outcome) is tuple:
                        ok, value = outcome
                        return self.dispatcher.result(call, value) if ok else self.dispatcher.failure(call, value)
                    assert isinstance(outcome, Pending)
                    self.admission.force_acquire()  # already running: over the limit for a moment at most
                    task: asyncio.Task[bytes | None] = loop.create_task(self._finish(call, outcome), context=cv)
                    task.add_done_callback(self._release)
                    return await self._until_disconnect(task, receive)
            if not self.admission.try_acquire():
                return _BUSY  # the last slot went while the body was being read
            task = loop.create_task(self._run_call(call))
            # A done callback, not a finally: a task cancelled before its first step never runs
            # its body, and its slot must come back all the same.
            task.add_done_callback(self._release)
        else:
            job: BatchJob = todo  # type: ignore[assignment]
            # A batch is admitted with the slot of its first element that will run, taken now
            # (or 503): batches never queue up behind a full server, so what waits for a slot
            # is bounded by the slots themselves. Its other elements wait for theirs in order.
            first = [False]
            chain = bool(self.dispatcher.middleware_chain)
            if any(c.entry.is_async or c.entry.blocking or chain for c in job.calls):
                if not self.admission.try_acquire():
                    return _BUSY
                first[0] = True
            task = loop.create_task(self._run_batch(job, first))
            task.add_done_callback(functools.partial(self._release_unused, first))
        return await self._until_disconnect(task, receive)

    def _release_unused(self, first: list[bool], _task: asyncio.Task[Any]) -> None:
        if first[0]:  # the batch ended (or was cancelled) before its first element started
            first[0] = False
            self.admission.release()

    def _release(self, _task: asyncio.Task[Any]) -> None:
        self.admission.release()

    async def _until_disconnect(self, task: asyncio.Task[bytes | None], receive: Receive) -> Any:
        """Wait for ``task``; if the client disconnects first, cancel it (the reply has nowhere to go)."""
        try:
            done = await until_disconnect(task, receive)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not done:
            task.cancel()
            return _GONE
        return task.result()

    def _context(self, call: Call) -> Context | None:
        """The request's context when the chain or the handler wants one (sets ``current_call``)."""
        current_call.set(call)
        if self.dispatcher.middleware_chain or call.entry.binder.context_name is not None:
            ctx = call.make_context()
            ctx.principal = current_principal.get()
            ctx.headers = current_headers.get()
            return ctx
        return None

    async def _run(self, call: Call) -> tuple[bool, Any]:
        return await run_call(self.dispatcher, call, self._context(call), self._pool)

    async def _finish(self, call: Call, pending: Pending) -> bytes | None:
        ok, value = await pending
        return self.dispatcher.result(call, value) if ok else self.dispatcher.failure(call, value)

    async def _run_call(self, call: Call) -> bytes | None:
        ok, value = await self._run(call)
        return self.dispatcher.result(call, value) if ok else self.dispatcher.failure(call, value)

    async def _run_element(self, call: Call) -> None:
        ok, value = await self._run(call)
        if ok:
            self.dispatcher.result(call, value)
        else:
            self.dispatcher.failure(call, value)

    async def _run_batch(self, job: BatchJob, first: list[bool]) -> bytes | None:
        loop = asyncio.get_running_loop()
        elements: list[asyncio.Task[None]] = []
        try:
            for c in job.calls:
                e = c.entry
                if not e.is_async and not e.blocking and not self.dispatcher.middleware_chain:
                    self.dispatcher.run_inline(c)  # finishes on the spot: no slot
                    continue
                if first[0]:
                    first[0] = False  # the slot taken when the batch was admitted
                else:
                    await self.admission.acquire()  # in order, behind requests already waiting
                t = loop.create_task(self._run_element(c))
                t.add_done_callback(self._release)
                elements.append(t)
            if elements:
                await asyncio.gather(*elements)
        except asyncio.CancelledError:
            for t in elements:
                t.cancel()
            raise
        return job.finish()

    def close(self) -> None:
        """Kept for compatibility: handlers share the process's daemon pool, which outlives the app."""
