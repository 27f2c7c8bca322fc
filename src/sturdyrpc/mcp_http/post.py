"""A handshake-era POST (2025-03-26 .. 2025-11-25): its messages sorted out, their slots taken,
their session found or made, handed to the session's peer, and the replies sent.

A reply ready on the POST's own turn (an inline handler: the runner answers before feeding
returns) is sent as the POST's whole body, with no stream; otherwise the POST opens a stream
(SSE, or a JSON reply sent once every request is answered).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec

from .. import codec
from ..admission import Admission
from ..envelope import UNSET, Envelope
from ..errors import InvalidRequest
from ..messages import InvalidMessage
from ..request_context import current_headers
from ..store import StoreUnavailable
from ..store.notices import store_warning
from ..transports.asgi import HTTPRefusal, Receive, Send, refuse_busy, respond
from .events import sse_event, sse_priming
from .responses import SSEResponse, pump, until_done_or_gone
from .session import HTTPSession, Key, PostReplies, Stream
from .sessions import SessionTable, too_many_streams

__all__ = ["HandshakePost", "sort_out", "Sorted"]

log = logging.getLogger("sturdyrpc.http")


class Sorted(msgspec.Struct):
    """A POST's messages sorted out: the requests (and their id keys, in order), the messages to
    hand to the session in order (requests, notifications, responses; each with its request's
    key, None for the others), the -32600 errors of a batch's invalid elements, the ids of
    requests the POST cancels, and whether it carries an ``initialize``."""

    requests: list[Envelope] = msgspec.field(default_factory=list)
    keys: list[Key] = msgspec.field(default_factory=list)
    valid: list[tuple[Envelope, Key | None]] = msgspec.field(default_factory=list)
    invalid: list[bytes] = msgspec.field(default_factory=list)
    cancels: list[Any] = msgspec.field(default_factory=list)
    has_init: bool = False


_INVALID = InvalidRequest("Invalid Request")


def sort_out(items: list[Envelope | InvalidMessage] | tuple[Envelope | InvalidMessage, ...], batch: bool) -> Sorted:
    """Sort what a POST carried (as :func:`~sturdyrpc.envelope.read` made it). JSON-RPC §6: in a
    batch each element that is no valid message gets its own -32600 in the reply array (a request
    reusing an id of the same batch too); the others are served. MCP ids are strings or integers."""
    if not batch:
        m = items[0]
        if type(m) is Envelope and m.method is not UNSET:
            id_ = m.id
            if type(id_) is str or type(id_) is int:  # the usual POST: one request (the loop's outcome for it)
                k = (type(id_), id_)
                return Sorted([m], [k], [(m, k)], [], [], m.method == "initialize")  # positional: no keyword lookup
    out = Sorted()
    seen: set[Key] | None = set() if batch else None
    for m in items:
        if type(m) is not Envelope:
            err = _INVALID if m.is_response or m.error.message == "Invalid Request" else m.error  # type: ignore[union-attr]
            if not batch:
                raise HTTPRefusal(400, -32600, err.message if err is not _INVALID else "Invalid Request: not a JSON-RPC message")
            out.invalid.append(codec.encode({"jsonrpc": "2.0", "error": err.to_dict(), "id": None}))
            continue
        method = m.method
        if method is UNSET:
            out.valid.append((m, None))  # a response (to a request the server sent)
            continue
        id_ = m.id
        if id_ is UNSET:
            if method == "notifications/cancelled":
                params = m.params
                if type(params) is dict and type(params.get("requestId")) in (str, int):
                    out.cancels.append(params["requestId"])
            out.valid.append((m, None))
            continue
        if type(id_) is not str and type(id_) is not int:  # null or a fraction: no MCP request id
            if not batch:
                raise HTTPRefusal(400, -32600, "Invalid Request: not a JSON-RPC message")
            out.invalid.append(codec.encode({"jsonrpc": "2.0", "error": _INVALID.to_dict(), "id": None}))
            continue
        k = (type(id_), id_)  # key_of(id_)
        if seen is not None:
            if k in seen:
                out.invalid.append(codec.encode({"jsonrpc": "2.0", "error": _INVALID.to_dict(), "id": id_}))
                continue
            seen.add(k)
        if method == "initialize":
            out.has_init = True
        out.requests.append(m)
        out.keys.append(k)
        out.valid.append((m, k))
    return out


def params_of(env: Envelope) -> Any:
    return None if env.params is UNSET else env.params


class HandshakePost:
    """Serves handshake-era POSTs on ``table`` (``stateless``: a throw-away session per POST).

    ``check_scopes(principal, requests)`` refuses a request whose principal lacks its scopes
    (None: no per-request scopes); ``json_response``: answer with JSON when the client accepts
    both; ``retry_ms``: the SSE ``retry`` hint; ``keepalive``: seconds of silence before a comment
    line on an open stream.
    """

    def __init__(self, table: SessionTable, admission: Admission, *, stateless: bool, json_response: bool,
                 check_scopes: Callable[[Any, list[Envelope]], None] | None, retry_ms: int | None, keepalive: float) -> None:
        self.table = table
        self.admission = admission
        self.stateless = stateless
        self.json_response = json_response
        self.check_scopes = check_scopes
        self.retry_ms = retry_ms
        self.keepalive = keepalive
        self.max_streams = table.caps.max_streams_per_session

    async def serve(self, hx: dict[bytes, bytes], receive: Receive, send: Send, got: Any, version: str | None,
                    sse_ok: bool, json_ok: bool, principal: Any) -> None:
        """Serve a POST whose body ``got`` was read already (``hx``: its headers, indexed)."""
        batch = type(got) is list
        msgs = sort_out(got if batch else (got,), batch)
        requests = msgs.requests
        if self.check_scopes is not None and principal is not None:
            self.check_scopes(principal, requests)
        if msgs.has_init and batch:
            raise HTTPRefusal(400, -32600, "Invalid Request: initialize must not be part of a batch")
        # Every request that will run holds a server-wide slot from here until it is answered.
        slots = len(requests)
        if slots and not (self.admission.try_acquire() if slots == 1 else self._admit(slots)):
            await refuse_busy(send, with_null_id=False)
            return
        session: HTTPSession | None = None
        try:
            if self.stateless:
                session = await self.table.stateless(version, principal, skip_init=msgs.has_init)
            elif msgs.has_init:
                if hx.get(b"mcp-session-id") is not None:
                    raise HTTPRefusal(400, -32600, "Bad Request: initialize must not carry Mcp-Session-Id")
                session = await self.table.create(principal, params_of(requests[0]))
            else:
                found = self.table.find(hx.get(b"mcp-session-id"), principal)
                session = found if isinstance(found, HTTPSession) else await found
            post = self._accept(session, msgs, batch)
            fed = self.table.feed(session, msgs.valid, post)
            if fed is not None:
                await fed
            use_sse = sse_ok and (not self.json_response or not json_ok)
            if not requests and not msgs.invalid:
                await respond(send, 202, b"", extra=session.response_headers)
            elif len(post.ready) == slots:
                # Every request was answered on this turn (inline handlers: the runner answers them
                # before feeding returns), so no other request could see one in flight: no stream,
                # nothing to resume (no priming event, event id or store write; SEP-1699 primes a
                # stream that stays open), the replies sent whole as the POST's body.
                body = self._whole(post.ready, msgs, batch, use_sse)
                try:
                    if use_sse:
                        await respond(send, 200, body, None, session.sse_whole_headers if requests else session.sse_headers)
                    else:
                        await respond(send, 200, body, extra=session.response_headers)
                except OSError:
                    pass  # the client is gone: nothing to answer
            else:
                stream, early = self._open(session, post, msgs)
                slots -= len(stream.pending)  # the session gives them back as the requests finish
                if use_sse:
                    await self._answer_sse(session, stream, early, receive, send, prime=not msgs.has_init)
                else:
                    await self._answer_json(stream, early, batch, receive, send, session.response_headers)
        finally:
            self._give_back(slots)
            if session is not None:
                session.last_active = time.monotonic()  # idle time counts from the end of the last response
                if self.stateless:
                    await session.end()

    def _accept(self, session: HTTPSession, msgs: Sorted, batch: bool) -> PostReplies:
        """Whether ``session`` takes the POST's messages now (400, 409, 503 if not), its
        cancellations done; returns where the replies of its requests go."""
        if batch and session.version not in (None, "2025-03-26"):
            raise HTTPRefusal(400, -32600, "Invalid Request: batches are not supported in this protocol version")
        session.last_active = time.monotonic()  # not idle while served (the sweeper, eviction)
        for id_ in msgs.cancels:
            session.cancelled(id_)
        keys = msgs.keys
        if keys:
            in_flight = session.by_request
            for k in keys:
                if k in in_flight:  # session.key_in_flight(k)
                    raise HTTPRefusal(409, -32600, "Conflict: a request with this id is already in flight")
            if len(session.streams) + session.relays >= self.max_streams:  # SessionTable.check_streams, inline
                raise too_many_streams()
        return PostReplies(session, keys[0] if len(keys) == 1 else None, {}, None)  # positional: no defaults to fill in

    @staticmethod
    def _whole(ready: dict[Key, bytes], msgs: Sorted, batch: bool, use_sse: bool) -> bytes:
        """The body of a POST whose requests are all answered (``ready``)."""
        keys = msgs.keys
        if not batch:
            return sse_event(ready[keys[0]]) if use_sse else ready[keys[0]]
        replies = [ready[k] for k in keys] + msgs.invalid
        return b"".join([sse_event(e) for e in replies]) if use_sse else b"[" + b",".join(replies) + b"]"

    @staticmethod
    def _open(session: HTTPSession, post: PostReplies, msgs: Sorted) -> tuple[Stream, list[bytes]]:
        """The stream of a POST some of whose requests are still running (their slots go with it),
        and what to send on it first: the replies ready already and a batch's invalid elements' errors."""
        keys, ready = msgs.keys, post.ready
        pending = [k for k in keys if k not in ready]
        params = [None if r.params is UNSET else r.params for k, r in zip(keys, msgs.requests, strict=True) if k not in ready]
        stream = session.open_stream(pending, params, holds_slots=True)
        stream.headers = current_headers.get()
        post.open(stream)
        return stream, [ready[k] for k in keys if k in ready] + msgs.invalid

    def _admit(self, n: int) -> bool:
        """Take ``n`` server-wide slots, all or none."""
        if n == 1:
            return self.admission.try_acquire()
        for taken in range(n):
            if not self.admission.try_acquire():
                self._give_back(taken)
                return False
        return True

    def _give_back(self, n: int) -> None:
        if n == 1:
            self.admission.release()
            return
        for _ in range(n):
            self.admission.release()

    async def _answer_sse(self, session: HTTPSession, stream: Stream, early: list[bytes], receive: Receive, send: Send, *,
                          prime: bool) -> None:
        conn = SSEResponse()
        stream.attach(conn)
        head = b""
        events = session.events
        v = session.version  # the priming event is from 2025-11-25 (SEP-1699, see primes)
        if prime and v is not None and v >= "2025-11-25" and events is not None and session.id is not None:
            try:
                eid = events.store_nowait(session.id, stream.id, None)
                if eid is None:
                    eid = await events.store(session.id, stream.id, None)
                head = sse_priming(eid, self.retry_ms)
            except StoreUnavailable as exc:  # the requests are open already: answer them, without a priming event
                store_warning(log, "no priming event", "no priming event: %s", exc)
        for e in early:  # replies ready at once and a batch's invalid elements' errors: each its own event
            await stream.emit(e)
        await pump(conn, receive, send, session.sse_headers, head, self.keepalive)
        stream.detach(conn)

    @staticmethod
    async def _answer_json(stream: Stream, early: list[bytes], batch: bool, receive: Receive, send: Send,
                           extra: list[tuple[bytes, bytes]]) -> None:
        waiter: asyncio.Future[list[bytes]] = asyncio.get_running_loop().create_future()
        stream.json_waiter = waiter
        stream.json_replies.extend(early)  # replies ready at once, a batch's invalid elements: in the reply array
        if not waiter.done():
            await until_done_or_gone(waiter, receive)
        if not waiter.done():
            waiter.cancel()  # the client left; the requests keep running (2025: a disconnect is no cancel)
            return
        replies = waiter.result()
        out = replies[0] if not batch else b"[" + b",".join(replies) + b"]"  # a batch always gets an array
        await respond(send, 200, out, extra=extra)
