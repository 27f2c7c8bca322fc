"""Plain JSON-RPC 2.0 over HTTP as an ASGI application, for any :class:`~sturdyrpc.dispatch.Dispatcher`.

- ``POST`` with ``Content-Type: application/json``; the body is one request, one notification or
  a batch (per the JSON-RPC spec: ``[]`` gets one -32600, only notifications get nothing).
- A reply goes out as ``200 application/json``; a body that needs no reply gets ``204``.
  JSON-RPC errors (parse error, invalid request, method not found, ...) are ordinary replies
  with status 200: the HTTP status describes the transport, the body the call.
- HTTP-level refusals: 403 (Host/Origin not allowed), 401 (bearer auth), 405 (not POST),
  413 (body too large), 415 (not JSON), 406 (``Accept`` excludes JSON). Their bodies are fixed
  JSON-RPC errors with id null, never anything from an exception.
- A client that disconnects while its call runs cancels the call: nobody is left to answer.

Mount it anywhere: ``Mount("/rpc", app=JSONRPCHTTPApp(rpc))`` in Starlette, or run it directly
with ``uvicorn.run(JSONRPCHTTPApp(rpc))``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
from typing import Any

from ..dispatch import BatchJob, Call, Dispatcher
from ..profile import Profile
from ..runner import current_call
from .asgi import (
    BodyTooLarge,
    Disconnected,
    HTTPRefusal,
    HTTPSecurity,
    Receive,
    Scope,
    Send,
    current_principal,
    header,
    read_body,
    refuse,
    respond,
)

__all__ = ["JSONRPCHTTPApp"]

log = logging.getLogger("sturdyrpc")

_JSON = b"application/json"


def _accepts_json(accept: bytes | None) -> bool:
    if accept is None:
        return True
    for part in accept.split(b","):
        media = part.split(b";", 1)[0].strip().lower()
        if media in (b"application/json", b"application/*", b"*/*"):
            return True
    return False


def _is_json(content_type: bytes | None) -> bool:
    if content_type is None:
        return False
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


class JSONRPCHTTPApp:
    """An ASGI app serving ``dispatcher`` as plain JSON-RPC over HTTP POST.

    ``security`` holds the Host/Origin allow-lists, the body limit and the optional bearer auth
    (secure defaults: localhost only, 4 MiB). ``profile`` adds protocol rules (see
    :class:`~sturdyrpc.profile.Profile`); ``path``, when set, is the only path served (404 elsewhere).
    """

    def __init__(self, dispatcher: Dispatcher, *, security: HTTPSecurity | None = None, profile: Profile | None = None,
                 path: str | None = None) -> None:
        self.dispatcher = dispatcher
        self.security = security or HTTPSecurity(max_body_bytes=dispatcher.limits.max_message_bytes)
        self.profile = profile
        self.path = path
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            return  # websockets are not served here; returning closes them
        try:
            principal = await self.security.check(scope)
            if self.path is not None and scope.get("path") != self.path:
                raise HTTPRefusal(404, -32600, "Not found")
            if scope["method"] != "POST":
                raise HTTPRefusal(405, -32600, "Method not allowed", [(b"allow", b"POST")])
            if not _is_json(header(scope, b"content-type")):
                raise HTTPRefusal(415, -32600, "Unsupported media type: use application/json")
            if not _accepts_json(header(scope, b"accept")):
                raise HTTPRefusal(406, -32600, "Not acceptable: the reply is application/json")
            try:
                body = await read_body(scope, receive, self.security.max_body_bytes)
            except BodyTooLarge:
                raise HTTPRefusal(413, -32600, "Request body too large") from None
        except HTTPRefusal as refusal:
            await refuse(send, refusal)
            return
        except Disconnected:
            return
        token = current_principal.set(principal)
        try:
            reply = await self._serve(body, receive)
        finally:
            current_principal.reset(token)
        if reply is None:
            await respond(send, 204)
        else:
            await respond(send, 200, reply)

    async def _serve(self, body: bytes, receive: Receive) -> bytes | None:
        todo = self.dispatcher.receive(body, None, self.profile)
        if todo is None or type(todo) is bytes:
            return todo
        if type(todo) is Call:
            call: Call = todo
            entry = call.entry
            if not entry.is_async and not entry.blocking:
                return self.dispatcher.run_inline(call)  # fast path: no task, no thread
            work: Any = self._run_call(call)
        else:
            work = self._run_batch(todo)  # type: ignore[arg-type]
        return await self._until_disconnect(work, receive)

    async def _until_disconnect(self, work: Any, receive: Receive) -> bytes | None:
        """Run ``work``; if the client disconnects first, cancel it (the reply has nowhere to go)."""
        task: asyncio.Task[bytes | None] = asyncio.ensure_future(work)
        watcher = asyncio.ensure_future(_wait_disconnect(receive))
        try:
            await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
        if not task.done():
            task.cancel()
            return None
        return task.result()

    async def _invoke(self, call: Call) -> Any:
        current_call.set(call)
        entry = call.entry
        if entry.is_async:
            return await call.invoke()
        if entry.blocking:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.dispatcher.limits.max_threads, thread_name_prefix="sturdyrpc-http"
                )
            ctx = contextvars.copy_context()
            return await asyncio.get_running_loop().run_in_executor(self._executor, ctx.run, call.invoke)
        return call.invoke()

    async def _run_call(self, call: Call) -> bytes | None:
        try:
            value = await self._invoke(call)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return self.dispatcher.failure(call, exc)
        return self.dispatcher.result(call, value)

    async def _run_element(self, call: Call) -> None:
        try:
            value = await self._invoke(call)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.dispatcher.failure(call, exc)
        else:
            self.dispatcher.result(call, value)

    async def _run_batch(self, job: BatchJob) -> bytes | None:
        await asyncio.gather(*(self._run_element(c) for c in job.calls))
        return job.finish()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            msg = await receive()
            if msg["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif msg["type"] == "lifespan.shutdown":
                self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def close(self) -> None:
        """Release the thread pool."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return

