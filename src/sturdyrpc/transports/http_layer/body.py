"""The body of a request: the busy 503 before it is read, then its bound and deadline; the
request's headers for the endpoint."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ...admission import Admission
from ...request_context import current_headers
from ..asgi import (
    ASGIApp,
    HTTPRefusal,
    Message,
    Receive,
    RequestHeaders,
    Scope,
    Send,
    header_index,
    refuse,
    refuse_busy,
)
from .lifecycle import bound_call

_thread_id = threading.get_ident
_current_task = asyncio.current_task

__all__ = ["Busy", "BodyLimit", "too_large_refusal"]


# ------------------------------------------------------------------ the busy 503


class Busy:
    """503 with ``Retry-After`` (:func:`~sturdyrpc.transports.asgi.refuse_busy`) for a request with a body
    (``methods``) while ``admission`` is full, before the body is read: a busy server spends
    nothing on it. An endpoint refuses with the same answer later when a POST needs more slots
    than are free.

    ``may_free(scope)``, when given, names the requests let through while full because they may
    carry what running requests need to finish (MCP: a session's POST may hold only a
    cancellation or the client's answer to a server-to-client request, which take no slot;
    refusing those would leave a full server full). The endpoint counts their slots once decoded.
    """

    def __init__(self, app: ASGIApp, *, admission: Admission, methods: Iterable[str] = ("POST",),
                 may_free: Callable[[Scope], bool] | None = None, null_id: bool = True) -> None:
        self.app = app
        self._next = bound_call(app)
        self.admission = admission
        self.methods = frozenset(methods)
        self.may_free = may_free
        self.null_id = null_id

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        if scope["type"] == "http" and self.admission.full and scope["method"] in self.methods and (
                self.may_free is None or not self.may_free(scope)):
            return refuse_busy(send, with_null_id=self.null_id)
        return self._next(scope, receive, send)


# ------------------------------------------------------------------ the body


def too_large_refusal(limit: str, bound: int) -> HTTPRefusal:
    """The one 413: the error stdio sends for a message over its bound (same message and data)."""
    return HTTPRefusal(413, -32600, "Message too large", data={"limit": limit, "max": bound})


_TOO_SLOW = HTTPRefusal(408, -32600, "Request body not received in time", [(b"connection", b"close")])


class BodyLimit:
    """Reads the whole body of a request with one (``methods``) and hands it to ``app`` in
    ``scope["sturdyrpc.body"]`` (bytes); ``app``'s ``receive`` then has only the client's
    disconnect to tell. ``app`` runs with the request's headers as
    :data:`~sturdyrpc.request_context.current_headers` (decoded when first read): the one place
    both endpoints get them from. (The innermost wrapper does it: a coroutine already, it spares
    the request a coroutine layer of its own for it.)

    - more than ``max_bytes`` (declared by ``Content-Length``, or counted) -> 413
      (:func:`too_large_refusal` naming ``limit``), read no further;
    - not complete ``timeout`` seconds after the app started reading it (None: no deadline) ->
      408 with ``Connection: close``: the server closes the connection and frees what it held
      (a client dripping its body a byte at a time holds nothing for longer);
    - the client gone before the end -> nothing is answered.

    The deadline is checked by one timer for every request of the wrapper (a tick of at most a
    second), not one per request: a request's body may take up to a tick longer than ``timeout``.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int, limit: str = "max_body_bytes", timeout: float | None = None,
                 methods: Iterable[str] = ("POST",), null_id: bool = True) -> None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be positive")
        self.app = app
        self._next = bound_call(app)
        self.max_bytes = max_bytes
        self.limit = limit
        self.timeout = timeout
        self.methods = frozenset(methods)
        self.null_id = null_id
        self._deadlines = _Deadlines(timeout)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._next(scope, receive, send)
            return
        if scope["method"] in self.methods:
            hx = scope.get("sturdyrpc.headers")
            declared = (hx if hx is not None else header_index(scope)).get(b"content-length")
            max_bytes = self.max_bytes
            if declared is not None:
                try:
                    too_large = int(declared) > max_bytes
                except ValueError:
                    too_large = False  # the server rejects malformed framing itself; counting below still bounds it
                if too_large:
                    await refuse(send, too_large_refusal(self.limit, max_bytes), with_null_id=self.null_id)
                    return
            deadlines = self._deadlines
            task = deadlines.enter()
            try:
                msg: Any = await receive()
                # The usual request: its body whole in the first message, handed on as it came.
                if msg["type"] != "http.request" or msg.get("more_body", False) or len(msg.get("body", b"")) > max_bytes:
                    msg = await self._rest(msg, receive)
            except asyncio.CancelledError:
                if task is not None and deadlines.expired(task):
                    await refuse(send, _TOO_SLOW, with_null_id=self.null_id)
                    return
                raise
            finally:
                if task is not None:
                    deadlines.due.pop(task, None)
            if msg is None:
                return  # the client went away
            if msg is _TOO_LARGE:
                await refuse(send, too_large_refusal(self.limit, max_bytes), with_null_id=self.null_id)
                return
            scope["sturdyrpc.body"] = msg["body"]
        token = current_headers.set(RequestHeaders(scope["headers"]))
        try:
            await self._next(scope, receive, send)
        finally:
            current_headers.reset(token)

    async def _rest(self, msg: Message, receive: Receive) -> Message | None:
        """The body from ``msg`` on, whole (None: the client left; :data:`_TOO_LARGE`: over the bound)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            if msg["type"] != "http.request":
                return None
            chunk = msg.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > self.max_bytes:
                    return _TOO_LARGE
                chunks.append(chunk)
            if not msg.get("more_body", False):
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            msg = await receive()


_TOO_LARGE: Message = {"type": "http.request", "body": b"", "more_body": False}


class _Deadlines:
    """Cancels the tasks whose body read overran ``timeout``, with one timer for all of them.

    A timer (or ``asyncio.timeout``) per request costs more than the rest of a small request's
    checks together; a body deadline needs no precision beyond a tick. A reader registers in
    :attr:`due` with the current :attr:`generation` (a tick count) and takes itself out when done.
    """

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout  # None: no deadline (nothing is registered)
        self.tick = min(1.0, timeout / 4) if timeout is not None else 1.0
        self.ticks = max(1, round(timeout / self.tick)) if timeout is not None else 0  # whole ticks in the timeout
        self.generation = 0
        self.due: dict[asyncio.Task[Any], int] = {}
        self._expired: set[asyncio.Task[Any]] = set()
        self.handle: asyncio.TimerHandle | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = 0  # the thread that runs ``loop``

    def enter(self) -> asyncio.Task[Any] | None:
        """Register the running task (about to read a body) and return it (None outside a task,
        or without a deadline)."""
        if self.handle is not None and _thread_id() == self.thread:
            # The loop this thread ran last is the one running now when it is stepping a task
            # (a thread runs one loop at a time): asking asyncio for the running loop costs a
            # getpid() system call per request, whose cost shows in the rest of the request.
            # (A timer is armed only with a deadline, on the loop it was armed on.)
            task = _current_task(self.loop)
            if task is not None:
                self.due[task] = self.generation
                return task
        if self.timeout is None:
            return None
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is not None:
            if loop is not self.loop or self.handle is None:
                self.start(loop)
            self.due[task] = self.generation
        return task

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the timer on ``loop`` (a timer handle belongs to one loop: an app served again on
        a new loop starts afresh)."""
        if loop is not self.loop:
            if self.handle is not None:
                self.handle.cancel()
            self.loop, self.due, self._expired, self.handle = loop, {}, set(), None
            self.thread = _thread_id()  # the thread running ``loop``
        if self.handle is None:
            self.handle = loop.call_later(self.tick, self._check)

    def expired(self, task: asyncio.Task[Any]) -> bool:
        """Whether ``task`` was cancelled by its deadline (its cancellation is then withdrawn)."""
        if task not in self._expired:
            return False
        self._expired.discard(task)
        # Only this deadline's cancellation: one from elsewhere (shutdown) still stands.
        return task.uncancel() == 0

    def _check(self) -> None:
        self.handle = None
        self.generation += 1
        # Registered ``ticks`` generations ago or earlier: at least ``timeout`` has passed.
        limit = self.generation - self.ticks - 1
        for task, gen in list(self.due.items()):
            if gen <= limit:
                del self.due[task]
                self._expired.add(task)
                task.cancel()
        self._expired = {t for t in self._expired if not t.done()}
        if self.due and self.loop is not None and not self.loop.is_closed():
            self.handle = self.loop.call_later(self.tick, self._check)
