"""One client session of the HTTP guard (``sturdyrpc guard --url``): its :class:`~.guard.GuardCore`,
where each message for the client goes, and the calls to the upstream server.

Every message in either direction goes through the session's core: the client's POST bodies
(:meth:`GuardSession.client_message`), and whatever the upstream sends back, the bodies and SSE
events of its POST responses and of its GET stream (``core.from_server``). The core says what to
write to each side; this module only carries it:

- a message for the server is POSTed upstream (each in its own request, so that a slow call
  holds up no other), with the upstream's own session id and the client's protocol headers;
- a reply for the client goes to the POST waiting for its id (:class:`Channel`), a request or
  notification of the server to the stream it came on when that is still open, else to the
  session's GET stream, else nowhere (logged);
- a request the upstream leaves without any reply (an HTTP error without a JSON-RPC body, a
  stream that ends early, a connection that fails) is answered through the core as well: the
  core is handed an error reply for it, as if the server had written one, so the client's id
  and the core's bookkeeping stay the core's business.

With a ``log`` (``guard --url --log``) every message is recorded as guard read it, in its session:
the client's POST bodies, the upstream's messages (with the id the client knows each by), and
what guard answered the client itself (:class:`Recorder`, implemented by :class:`~.tracelog.TraceLog`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Coroutine
from typing import Any, Protocol

from ..codec import DecodeFailure, decode, encode
from ..mcp_http.sse import SSEParser
from .guard import SERVER_GONE_CODE, Actions, GuardCore
from .guard_http_params import ParamHeaderTable
from .monitor import Key, key_of
from .upstream_http import HTTPUpstream, UpstreamError

__all__ = ["Channel", "GuardSession", "Recorder", "Upstream", "requests_in", "UNNAMED"]

log = logging.getLogger("sturdyrpc.guard")

#: What a Streamable HTTP client accepts on a POST (guard is the upstream's client).
_ACCEPT = "application/json, text/event-stream"
#: Client-side headers handed on to the upstream as they came (the 2026-07-28 request metadata;
#: a 2026-07-28 request's ``Mcp-Param-*`` headers as well).
_PASSED_ON = (b"mcp-method", b"mcp-name")
#: Messages one response stream may hold undelivered before newer ones are dropped.
CHANNEL_BOUND = 1024
#: The ``n`` of a reply that answers none of the ids the POST is waiting for (``"id": null`` or
#: an id no request of it had: the answer to an unreadable message, an invalid id, a refused batch).
UNNAMED = -1


class Recorder(Protocol):
    """Where a session records its messages (``guard --log``: :meth:`~.tracelog.TraceLog.http_message`)."""

    def http_message(self, dir: str, session: str | None, payload: bytes, now: float, *, value: Any = ...,
                     client_id: Any = None) -> None: ...


_UNDECODABLE: Any = object()


def requests_in(value: Any) -> list[Any]:
    """The ids of the requests in a decoded message or batch (in order)."""
    items = value if type(value) is list else [value]
    return [m["id"] for m in items if type(m) is dict and "method" in m and "id" in m]


class Channel:
    """Where the messages for one client response go: a POST's reply stream, or a GET stream.

    Items are ``(payload, n)``: ``n`` is how many of the POST's requests the payload answers (0
    for a request or notification of the server, :data:`UNNAMED` for a reply with a null id).
    :meth:`close` ends it (the session ended), :meth:`leave` says the client has gone."""

    def __init__(self) -> None:
        self.items: deque[tuple[bytes, int]] = deque()
        self.open = True
        #: The client went away (its connection closed).
        self.gone = False
        self.dropped = 0
        #: The HTTP status of the upstream's answer to the POST's message when it was an error
        #: status (a JSON reply keeps it: 2026-07-28 answers an unknown method with 404).
        self.status = 200
        #: The upstream's refusal of a message without an id (its JSON-RPC error code), if any.
        self.refused: int | None = None
        #: Whether that refusal had ``"id": null`` (kept as the upstream wrote it: the MCP schemas differ there).
        self.refused_null_id = False
        self._waiter: asyncio.Future[bool] | None = None

    def put(self, payload: bytes, n: int) -> None:
        if not self.open:
            return
        if n == 0 and len(self.items) >= CHANNEL_BOUND:
            # A flood of notifications the client does not read: bounded memory; replies are never dropped.
            if not self.dropped:
                log.warning("guard: a client stream holds %d undelivered messages: newer notifications are dropped", CHANNEL_BOUND)
            self.dropped += 1
            return
        self.items.append((payload, n))
        self._wake(True)

    def close(self) -> None:
        """No more items will come (what came is still there to take)."""
        if self.open:
            self.open = False
            self._wake(True)

    def leave(self) -> None:
        """The client has gone."""
        self.gone = True
        self._wake(True)

    def drain(self) -> list[tuple[bytes, int]]:
        """What it holds now (without waiting)."""
        out = list(self.items)
        self.items.clear()
        return out

    async def wait(self, timeout: float | None) -> bool:
        """Until an item comes, it closes or the client leaves (True), or ``timeout`` passes (False)."""
        if self.items or not self.open or self.gone:
            return True
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self._waiter = fut
        timer = loop.call_later(timeout, fut.set_result, False) if timeout is not None else None
        try:
            return await fut
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def _wake(self, value: bool) -> None:
        fut = self._waiter
        if fut is not None and not fut.done():
            fut.set_result(value)


class Upstream:
    """The upstream MCP endpoint: its URL, the bound on each message read from it (a JSON body,
    an SSE line), and the keep-alive connections guard reaches it on (:class:`~.upstream_http.HTTPUpstream`;
    ``timeout``: seconds to connect)."""

    def __init__(self, url: str, *, max_bytes: int, timeout: float = 30.0) -> None:
        self.url = url
        self.max_bytes = max_bytes
        self.http = HTTPUpstream(url, timeout=timeout)

    async def aclose(self) -> None:
        await self.http.aclose()


class GuardSession:
    """One client's conversation with the upstream through ``core``.

    ``sid``: guard's own session id (None for a 2026-07-28 request, which has no session);
    ``owner``: the identity of the principal that opened it (:func:`~sturdyrpc.auth.principal.identity_of`);
    ``log``: where its messages are recorded (None: nowhere).
    """

    def __init__(self, sid: str | None, core: GuardCore, upstream: Upstream, *, owner: str | None,
                 forward_authorization: bool = False, param_table: ParamHeaderTable | None = None,
                 log: Recorder | None = None) -> None:
        self.sid = sid
        self.log = log
        self.core = core
        self.upstream = upstream
        self.owner = owner
        self.forward_authorization = forward_authorization
        #: The upstream's own ``Mcp-Session-Id`` (the client never sees it).
        self.upstream_sid: str | None = None
        #: The POST waiting for each request id of the client.
        self.waiting: dict[Key, Channel] = {}
        self.get_stream: Channel | None = None
        self.closed = False
        #: The upstream answered 404 for its session: this one ends at the client's next request.
        self.upstream_lost = False
        #: Where the results of the client's ``tools/list`` requests go (the guard's table; None: nowhere).
        self.param_table = param_table
        #: The client's ``tools/list`` requests (by id) whose results teach :attr:`param_table`.
        self.listing: set[Key] = set()
        self._headers: dict[str, str] = {"content-type": "application/json", "accept": _ACCEPT}
        self._tasks: set[asyncio.Task[None]] = set()
        self._active = time.monotonic()

    def touch(self, now: float) -> None:
        """The client used it at ``now`` (monotonic): a request came, or a reply or stream ended."""
        self._active = now

    def idle_for(self, now: float) -> float:
        """Seconds since the client last used it (0 while a client waits on it): since its last
        request, the last reply it was sent, or the end of its GET stream."""
        return 0.0 if self.busy else now - self._active

    @property
    def busy(self) -> bool:
        """Whether a client waits on it (a POST for its reply, or a GET stream)."""
        return bool(self.waiting) or self.get_stream is not None

    def note_headers(self, hx: dict[bytes, bytes]) -> None:
        """The client's protocol headers of its latest request, handed on with every upstream call."""
        h = self._headers
        version = hx.get(b"mcp-protocol-version")
        if version is not None:
            h["mcp-protocol-version"] = version.decode("latin-1")
        for name in _PASSED_ON:
            value = hx.get(name)
            if value is not None:
                h[name.decode()] = value.decode("latin-1")
        if self.sid is None:  # a 2026-07-28 request (its own session): its SEP-2243 Mcp-Param-* headers too
            for name, value in hx.items():
                if name.startswith(b"mcp-param-"):
                    h[name.decode("latin-1")] = value.decode("latin-1")
        if self.forward_authorization:
            auth = hx.get(b"authorization")
            if auth is not None:
                h["authorization"] = auth.decode("latin-1")

    def _upstream_headers(self, accept: str | None = None) -> dict[str, str]:
        h = dict(self._headers)
        if self.upstream_sid is not None:
            h["mcp-session-id"] = self.upstream_sid
        if accept is not None:
            h["accept"] = accept
            del h["content-type"]
        return h

    # -- the client's side -----------------------------------------------------------------------

    def client_message(self, body: bytes, channel: Channel | None, value: Any = _UNDECODABLE) -> list[asyncio.Task[None]]:
        """A POST body of the client (``value``: decoded, for the log, when the caller has it):
        through the core, then on to where it says. Returns the upstream calls it started (a
        notification's POST waits for them: order is kept)."""
        now = time.monotonic()
        if self.log is not None:
            self._record("c2s", body, now, value)
        return self.apply(self.core.from_client(body, now), channel, own=True)

    def abandon(self, ids: list[Any], channel: Channel) -> None:
        """The client left before ``ids`` were answered: cancel them on the server (through the core,
        as the client's own ``notifications/cancelled`` would) and drop their late replies."""
        for rid in ids:
            if self.waiting.get(key_of(rid)) is channel:
                del self.waiting[key_of(rid)]
                cancel = encode({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                 "params": {"requestId": rid, "reason": "the client closed its request"}})
                self.apply(self.core.from_client(cancel, time.monotonic()), None, own=True)

    # -- what the core says ------------------------------------------------------------------------

    def apply(self, acts: Actions, context: Channel | None, *, own: bool = False) -> list[asyncio.Task[None]]:
        """Carry out ``acts``; ``context``: the stream the message that caused them belongs to;
        ``own``: what they send the client is guard's own answer (none of the server's), for the log."""
        for line in acts.log:
            log.warning("%s", line)
        if own and self.log is not None and acts.to_client:
            now = time.monotonic()
            for payload in acts.to_client:
                self._record("g2c", payload, now)
        for payload in acts.to_client:
            self._route(payload, context)
        return [self._spawn(self._forward(frame, context)) for frame in acts.to_server]

    def _route(self, payload: bytes, context: Channel | None) -> None:
        try:
            value = decode(payload)
        except DecodeFailure:
            value = None
        items = value if type(value) is list else [value]
        first = items[0] if items else None
        if type(first) is dict and "method" not in first:  # a reply (or a batch of them)
            target, n = None, 0
            for m in items:
                if type(m) is dict and "method" not in m:
                    key = key_of(m.get("id"))
                    ch = self.waiting.pop(key, None)
                    if ch is not None:
                        target, n = ch, n + 1
                        if key in self.listing:
                            self._learn(key, m)
            if n:
                self._active = time.monotonic()  # idle from the end of the reply, not from its request
            if target is None and context is not None and context.open:
                # An answer to what the POST sent that names none of its requests' ids (an unreadable
                # message, an invalid id, a batch refused whole): the POST's all the same.
                target, n = context, UNNAMED
            if target is not None:
                target.put(payload, n)
            else:
                log.warning("guard: a reply no open request waits for was dropped: %.200s", payload.decode("utf-8", "replace"))
            return
        for ch in (context, self.get_stream):
            if ch is not None and ch.open:
                ch.put(payload, 0)
                return
        log.warning("guard: a message of the server with no open stream to go to was dropped: %.200s",
                    payload.decode("utf-8", "replace"))

    def lists_tools(self, request_id: Any) -> None:
        """The client's request ``request_id`` is a ``tools/list``: its result teaches :attr:`param_table`."""
        if self.param_table is not None:
            self.listing.add(key_of(request_id))

    def _learn(self, key: Key, reply: dict[str, Any]) -> None:
        """The reply to the client's ``tools/list`` request ``key``, on its way to the client: its
        tools' ``Mcp-Param-*`` headers into :attr:`param_table`."""
        self.listing.discard(key)
        if self.param_table is not None and "result" in reply:
            for line in self.param_table.learn(reply["result"]):
                log.warning("%s", line)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- the upstream's side ---------------------------------------------------------------------

    def _record(self, dir: str, payload: bytes, now: float, value: Any = _UNDECODABLE, client_id: Any = None) -> None:
        assert self.log is not None
        if value is _UNDECODABLE:
            self.log.http_message(dir, self.sid, payload, now, client_id=client_id)
        else:
            self.log.http_message(dir, self.sid, payload, now, value=value, client_id=client_id)

    def _from_server(self, payload: bytes, context: Channel | None, answered: set[Key]) -> None:
        try:
            value = decode(payload)
        except DecodeFailure:
            value = _UNDECODABLE
        items = value if type(value) is list else [value]
        for m in items:
            if type(m) is dict and "method" not in m and "id" in m:
                answered.add(key_of(m["id"]))
        now = time.monotonic()
        core = self.core
        if self.log is None:
            self.apply(core.from_server(payload, now), context)
            return
        # The ids the client knows them by: a reply's before the core settles it, a request's after it maps it.
        before = [core.client_id(m) if type(m) is dict and "method" not in m else None for m in items]
        acts = core.from_server(payload, now)
        ids = [b if b is not None or type(m) is not dict or "method" not in m else core.client_id(m)
               for m, b in zip(items, before, strict=True)]
        client_id = (ids if any(i is not None for i in ids) else None) if type(value) is list else ids[0]
        self._record("s2c", payload, now, value, client_id)
        self.apply(acts, context)

    async def _forward(self, frame: bytes, context: Channel | None) -> None:
        """POST one message to the upstream; feed what comes back to the core."""
        answered: set[Key] = set()
        failure: dict[str, Any] | None = None
        headers = self._upstream_headers()
        try:
            async with self.upstream.http.stream("POST", headers, frame) as r:
                sid = r.headers.get("mcp-session-id")
                if sid and self.upstream_sid is None:
                    self.upstream_sid = sid
                elif r.status == 404 and "mcp-session-id" in headers:
                    self.upstream_lost = True  # the upstream ended its session: so does guard (the client re-initializes)
                failure = await self._read_reply(r, context, answered)
                if context is not None and r.status >= 400:
                    context.status = r.status
                    if failure is not None and type(failure.get("code")) is int:
                        context.refused = failure["code"]
        except UpstreamError:
            failure = {"code": SERVER_GONE_CODE, "message": "sturdyrpc guard: the upstream server could not be reached"}
        except ValueError:  # an SSE line beyond the bound
            failure = {"code": SERVER_GONE_CODE, "message": "sturdyrpc guard: the upstream server sent a message beyond the size limit"}
        self._settle(frame, answered, failure)

    async def _read_reply(self, r: Any, context: Channel | None, answered: set[Key]) -> dict[str, Any] | None:
        """Feed the core the reply to one POST; the error to answer its unanswered requests with."""
        ctype = r.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype == "text/event-stream":
            parser = SSEParser(max_line=self.upstream.max_bytes)
            async for chunk in r.chunks():
                for ev in parser.feed(chunk):
                    self._from_server(ev.data.encode(), context, answered)
            return {"code": SERVER_GONE_CODE, "message": "sturdyrpc guard: the upstream server closed the stream without a reply"}
        body = bytearray()
        async for chunk in r.chunks():
            body += chunk
            if len(body) > self.upstream.max_bytes:
                return {"code": SERVER_GONE_CODE, "message": "sturdyrpc guard: the upstream server's reply is beyond the size limit"}
        status = r.status
        if not body:
            return {"code": SERVER_GONE_CODE, "message": f"sturdyrpc guard: the upstream server answered HTTP {status} without a reply"}
        try:
            value = decode(bytes(body))
        except DecodeFailure:
            value = None
        if type(value) is dict and value.get("id") is None and type(value.get("error")) is dict:
            if context is not None:
                context.refused_null_id = "id" in value
            error: dict[str, Any] = value["error"]
            return error  # an HTTP-level refusal without an id: the answer to each request
        self._from_server(bytes(body), context, answered)
        return {"code": SERVER_GONE_CODE, "message": f"sturdyrpc guard: the upstream server answered HTTP {status} without a reply"}

    def _settle(self, frame: bytes, answered: set[Key], error: dict[str, Any] | None) -> None:
        """Answer, through the core, each request of ``frame`` the upstream did not answer."""
        if error is None:
            return
        try:
            ids = requests_in(decode(frame))
        except DecodeFailure:
            return
        for rid in ids:
            if key_of(rid) not in answered:
                reply = encode({"jsonrpc": "2.0", "id": rid, "error": error})
                self.apply(self.core.from_server(reply, time.monotonic()), None, own=True)

    # -- the GET stream and the end ----------------------------------------------------------------

    async def listen(self, channel: Channel) -> None:
        """The upstream's GET stream, for as long as it lasts: its events through the core, to
        ``channel`` (the client's GET stream) or a POST they belong to. An upstream without one
        (405) leaves the client's stream open: guard still has messages to put there."""
        try:
            async with self.upstream.http.stream("GET", self._upstream_headers("text/event-stream")) as r:
                if r.status != 200 or not r.headers.get("content-type", "").startswith("text/event-stream"):
                    return
                parser = SSEParser(max_line=self.upstream.max_bytes)
                answered: set[Key] = set()
                async for chunk in r.chunks():
                    for ev in parser.feed(chunk):
                        self._from_server(ev.data.encode(), channel, answered)
        except (UpstreamError, ValueError) as exc:
            log.info("guard: the upstream GET stream ended: %s", type(exc).__name__)

    async def end(self, *, tell_upstream: bool) -> None:
        """End the session: every pending request answered (through the core), every stream
        closed, the upstream calls stopped; with ``tell_upstream``, the upstream session DELETEd."""
        if self.closed:
            return
        self.closed = True
        for task in list(self._tasks):
            task.cancel()
        self.apply(self.core.server_gone(None), None, own=True)
        for ch in {*self.waiting.values(), *([self.get_stream] if self.get_stream else [])}:
            ch.close()
        self.waiting.clear()
        if tell_upstream and self.upstream_sid is not None:
            try:
                async with self.upstream.http.stream("DELETE", self._upstream_headers("*/*"), timeout=5.0) as r:
                    async for _ in r.chunks():
                        pass
            except UpstreamError:
                pass  # the upstream ends it on its own terms; the client's session is over here
