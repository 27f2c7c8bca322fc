"""Sessions that any worker can serve: Streamable HTTP state kept in a shared :class:`~sturdyrpc.store.Store`.

With a shared store (Redis) every worker of a server, on one machine or many, behind a load
balancer without stickiness, serves every request of every session:

- **session record** ``session:<id>`` (TTL: the idle timeout, renewed by every request and while
  a response is open): the principal, the client's ``initialize`` params (so another worker
  negotiates the same version and sees the same client capabilities and info), the log level
  the resource subscriptions and the application's per-session ``values``. A worker that meets a session it has not served yet builds a
  local *replica*: it runs the MCP server on a new pipe and replays the ``initialize`` from the
  record behind the scenes, then applies log level and subscriptions. State a request changed is
  written back before that request's response leaves. DELETE removes the record: every worker
  answers 404 from then on, and replicas end at once (a message on the broadcast channel).
- **events** ``ev:<id>:<stream>`` (Redis Streams, bounded, TTL): everything sent on a stream, so
  a GET with ``Last-Event-ID`` on any worker replays what was missed and then follows live until
  the stream ends. The standalone GET stream is one logical stream ``g`` per session: any
  worker's notifications for the session (``resources/updated``, ``list_changed``, unrelated
  ``notifications/message``) are appended to it and the worker holding the GET follows it.
- **routing**: a server-to-client request (elicitation, sampling, roots) goes out with the id
  ``sr.<worker>.<n>``; the POST carrying its answer may land on any worker, which sends it on
  the channel of the worker named in the id, where the waiting handler gets it.
- **broadcast** (one channel): DELETE, a newer GET replacing an older one on another worker,
  ``notifications/cancelled`` for a request running on another worker, and ``resources/updated`` / ``list_changed`` from :meth:`MCPServer.resource_updated` (each
  session is told once: a compare-and-set picks one worker per session and event).
- **liveness**: each worker refreshes ``alive:<worker>`` every second or two; a resumed stream
  whose worker died (SIGKILL) ends instead of waiting forever.

Every store call is bounded; a store that is down gives HTTP 503 with a JSON-RPC error naming
the store (:class:`~sturdyrpc.store.StoreUnavailable`), and the next request tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec

from .. import codec
from ..auth.principal import identity_of
from ..envelope import UNSET, Envelope, encode_envelope, from_message, read
from ..limits import DEFAULT_LIMITS
from ..mcp.request_state import RequestStateSigner
from ..mcp.session_state import mark_replayed
from ..messages import Notification, Request
from ..store import Store, StoreUnavailable
from ..transports.asgi import HTTPRefusal, Receive, Scope, Send, header
from .events import sse_event, sse_priming
from .session import HTTPSession, ReplyWaiter, SSEResponse, Stream

if TYPE_CHECKING:
    from .server import StreamableHTTPApp

__all__ = ["SharedSessions", "StoreEventStore"]

log = logging.getLogger("sturdyrpc.http")

_INIT_ID = "sturdyrpc-replica-init"
#: What another worker relays (an answer, a cancellation) is read under the default limits: it
#: passed this server's own when it arrived there.
_LIMITS = DEFAULT_LIMITS
#: Seconds between liveness beats; a worker is taken for dead after ``_ALIVE_TTL`` without one.
_BEAT = 1.5
_ALIVE_TTL = 5.0
_MSG, _PRIME, _END = b"m", b"p", b"e"

Pump = Callable[[SSEResponse, Receive, Send, list[tuple[bytes, bytes]], bytes], Awaitable[bool]]


def _events_key(session_id: str, stream_id: str) -> str:
    return f"ev:{session_id}:{stream_id}"


class StoreEventStore:
    """The :class:`~.events.EventStore` on a :class:`~sturdyrpc.store.Store` stream per logical
    SSE stream. Event ids are ``<stream>.<entry id>``. A finished stream gets an end marker, so a
    follower on another worker knows when to stop. Sessions are forgotten by DELETE
    (:meth:`SharedSessions.delete`) or their TTL, not when one worker's replica ends.

    A POST stream has one writer (the worker holding the POST), so its entry ids are numbered
    here and its writes leave in the background, every write queued in one event-loop turn in
    one round trip (a quick response costs no wait and a share of one round trip). The GET
    stream ``g`` has many writers: the store numbers its entries, one round trip each."""

    def __init__(self, store: Store, *, max_events_per_stream: int = 1000, ttl: float = 3600.0) -> None:
        self.s = store
        self.max_events_per_stream = max_events_per_stream
        self.ttl = ttl
        self._seqs: dict[tuple[str, str], int] = {}
        self._queue: list[tuple[str, int | None, bytes]] = []
        self._writer: asyncio.Task[None] | None = None

    async def store(self, session_id: str, stream_id: str, data: bytes | None) -> str:
        if stream_id == "g":
            entry = _PRIME if data is None else _MSG + data
            eid = await self.s.append(_events_key(session_id, stream_id), entry, maxlen=self.max_events_per_stream, ttl=self.ttl)
            return f"g.{eid}"
        out = self.store_nowait(session_id, stream_id, data)
        assert out is not None
        return out

    def store_nowait(self, session_id: str, stream_id: str, data: bytes | None) -> str | None:
        if stream_id == "g":
            return None  # many writers: the store numbers its entries
        entry = _PRIME if data is None else _MSG + data
        k = (session_id, stream_id)
        n = self._seqs.get(k, 0) + 1
        self._seqs[k] = n
        self._enqueue(_events_key(session_id, stream_id), n, entry)
        return f"{stream_id}.{self.s.entry_id(n)}"

    def end_stream(self, session_id: str, stream_id: str) -> None:
        n = self._seqs.pop((session_id, stream_id), 0) + 1
        self._enqueue(_events_key(session_id, stream_id), n, _END)

    def _enqueue(self, key: str, seq: int, entry: bytes) -> None:
        self._queue.append((key, seq, entry))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write())

    async def flush(self) -> None:
        """Wait until every queued write has been tried."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    async def _write(self) -> None:
        # One writer at a time: the entries of a stream must arrive in order.
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                await self.s.append_batch(batch, maxlen=self.max_events_per_stream, ttl=self.ttl)
            except Exception as exc:  # delivery went on without it; only resumption is lost
                log.warning("%d events not stored: %s", len(batch), exc)

    async def replay_after(self, session_id: str, last_event_id: str) -> tuple[str, list[tuple[str, bytes]]] | None:
        stream_id, _, after = last_event_id.rpartition(".")
        if not stream_id or not after:
            return None
        key = _events_key(session_id, stream_id)
        if await self.s.last_id(key) is None:
            return None
        out = [(f"{stream_id}.{i}", d[1:]) for i, d in await self.s.read_after(key, after) if d[:1] == _MSG]
        return stream_id, out

    async def follow(self, session_id: str, stream_id: str, after: str) -> AsyncIterator[tuple[str, bytes | None]]:
        """(event id, data) after ``after`` then live; data None: the stream ended."""
        async for i, d in self.s.follow(_events_key(session_id, stream_id), after):
            kind = d[:1]
            if kind == _MSG:
                yield f"{stream_id}.{i}", d[1:]
            elif kind == _END:
                yield f"{stream_id}.{i}", None
                return

    async def drop_stream(self, session_id: str, stream_id: str) -> None:
        await self.s.drop_stream(_events_key(session_id, stream_id))

    async def drop_session(self, session_id: str) -> None:
        return None  # one worker's replica ending is not the session ending


class SharedSessions:
    """The shared-session side of a :class:`~.server.StreamableHTTPApp` (its ``shared=`` option).

    ``store``: where sessions live; ``signer``: the MCP server's ``requestState`` signer, whose
    keys are then shared through the store too; ``notify_local(method, params)``: delivers a
    broadcast notification to this worker's 2026-07-28 ``subscriptions/listen`` streams.
    """

    def __init__(self, store: Store, *, signer: RequestStateSigner | None = None,
                 notify_local: Callable[[str, dict[str, Any]], None] | None = None,
                 max_events_per_stream: int = 1000, events_ttl: float = 3600.0) -> None:
        self.store = store
        self.signer = signer
        self.notify_local = notify_local
        self.events = StoreEventStore(store, max_events_per_stream=max_events_per_stream, ttl=events_ttl)
        #: This worker's name in ids and channels (random per process).
        self.tag = os.urandom(4).hex()
        self.app: StreamableHTTPApp | None = None
        self._synced: dict[str, tuple[str | None, tuple[str, ...], bytes]] = {}
        self._gets: dict[str, tuple[str, SSEResponse]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._started: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._mine: Any = None
        self._everyone: Any = None

    def bind(self, app: StreamableHTTPApp) -> None:
        self.app = app

    @property
    def idle(self) -> float:
        assert self.app is not None
        return self.app.session_idle_timeout

    # ------------------------------------------------------------------ start

    async def ready(self) -> None:
        """Per request: make sure this worker listens on its channels and has the shared
        ``requestState`` keys (raises :class:`StoreUnavailable` until the store answers)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # served again on a new loop (tests): start over
            self._loop, self._started = loop, None
            self._tasks = set()
            self._mine = self._everyone = None
        if self._started is None or (self._started.done() and self._started.exception() is not None):
            self._started = loop.create_task(self._start())
        if not self._started.done():
            await asyncio.shield(self._started)
        elif self.signer is not None and self.signer.due():
            self._background(self._reload_keys())

    async def _start(self) -> None:
        if self.signer is not None:
            await self.signer.use_store(self.store)
        # Each step once, also when an earlier attempt failed half-way (the store was down).
        if self._mine is None:
            self._mine = await self.store.subscribe(f"worker:{self.tag}")
            self._background(self._listen(self._mine, self._on_worker_message))
        if self._everyone is None:
            self._everyone = await self.store.subscribe("sessions")
            self._background(self._listen(self._everyone, self._on_broadcast))
        await self.store.set(f"alive:{self.tag}", b"1", ttl=_ALIVE_TTL)
        self._background(self._beat())

    async def _reload_keys(self) -> None:
        assert self.signer is not None
        try:
            await self.signer.reload()
        except StoreUnavailable as exc:
            log.warning("requestState keys not reloaded: %s", exc)

    def _background(self, aw: Awaitable[Any]) -> None:
        t = asyncio.ensure_future(aw)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _listen(self, sub: Any, handle: Callable[[bytes], Awaitable[None]]) -> None:
        async for msg in sub:
            try:
                await handle(msg)
            except Exception:
                log.exception("shared-session message failed")

    async def _beat(self) -> None:
        n = 0
        while True:
            await asyncio.sleep(_BEAT)
            n += 1
            try:
                await self.store.set(f"alive:{self.tag}", b"1", ttl=_ALIVE_TTL)
                if n * _BEAT >= self.idle / 3:
                    n = 0
                    # an open response (a long tool call, a GET stream) keeps its session alive everywhere
                    for s in list(self.app.sessions.values()) if self.app is not None else ():
                        if s.shared is self and s.id is not None and s.has_open_response():
                            await self.store.touch(f"session:{s.id}", self.idle)
            except StoreUnavailable as exc:
                log.warning("%s", exc)

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.events.flush(), 5)  # the end markers of this worker's streams
        for t in list(self._tasks):
            t.cancel()
        with contextlib.suppress(Exception):
            await self.store.aclose()

    # --------------------------------------------------------------- sessions

    def adopt(self, session: HTTPSession) -> None:
        """Make ``session`` (new, no streams yet) a shared one."""
        session.shared = self
        session.stream_prefix = f"{self.tag}x"
        session.open_standalone()  # always open: unrelated messages go to the shared stream ``g``
        if session.id is not None:
            self._synced[session.id] = (None, (), b"{}")

    async def created(self, session: HTTPSession, init_params: Any) -> None:
        """A session was just made here by ``initialize``: record it before anything is answered."""
        self.adopt(session)
        assert session.id is not None
        record = {"p": identity_of(session.principal), "init": init_params, "log": None, "subs": [], "vals": {}}
        try:
            await self.store.set(f"session:{session.id}", codec.encode(record), ttl=self.idle)
        except BaseException:
            await session.end()
            raise

    async def find(self, scope: Scope, principal: Any) -> HTTPSession:
        """The session named by ``Mcp-Session-Id``, from this worker or rebuilt from the store."""
        assert self.app is not None
        raw = header(scope, b"mcp-session-id")
        if raw is None:
            raise HTTPRefusal(400, -32600, "Bad Request: Mcp-Session-Id header is required")
        sid = raw.decode("latin-1")
        data = await self.store.get_touch(f"session:{sid}", self.idle)
        local = self.app.sessions.get(sid)
        if data is None:
            if local is not None:
                self.app.end_session(local)  # ended elsewhere (DELETE, expiry)
            raise HTTPRefusal(404, -32600, "Session not found")
        record = codec.decode(data)
        # Another principal's session looks exactly like an unknown one: ids are not credentials.
        if type(record) is not dict or record.get("p") != identity_of(principal):
            raise HTTPRefusal(404, -32600, "Session not found")
        if local is None or local.ended:
            lock = self._locks.setdefault(sid, asyncio.Lock())
            async with lock:  # concurrent first requests on this worker build one replica
                local = self.app.sessions.get(sid)
                if local is None or local.ended:
                    local = await self._replica(sid, principal, record)
            self._locks.pop(sid, None)
        self._apply(local, record)
        local.principal = principal  # the same principal; this request's token (see StreamableHTTPApp._find_session)
        return local

    async def _replica(self, sid: str, principal: Any, record: dict[str, Any]) -> HTTPSession:
        assert self.app is not None
        session = self.app.add_session(sid, principal)
        self.adopt(session)
        waiter = ReplyWaiter()
        # replayed, not the client's: marked so that telemetry does not count it as a request
        session.feed(from_message(Request("initialize", mark_replayed(record.get("init")), _INIT_ID)), waiter)
        try:
            answer = await waiter.wait(10)
        except BaseException:
            self.app.end_session(session)
            raise
        reply = codec.decode(answer) if answer is not None else None
        if type(reply) is not dict or "result" not in reply:
            self.app.end_session(session)
            raise HTTPRefusal(404, -32600, "Session not found")
        session.version = reply["result"].get("protocolVersion") if type(reply["result"]) is dict else None
        session.feed(from_message(Notification("notifications/initialized", mark_replayed(None))))
        return session

    def _apply(self, session: HTTPSession, record: dict[str, Any]) -> None:
        state = session.mcp_state
        if state is None or session.id is None:
            return
        level = record.get("log")
        level = level if type(level) is str else None
        subs = tuple(sorted(u for u in record.get("subs") or () if type(u) is str))
        vals = record.get("vals")
        vals = vals if type(vals) is dict else {}
        snap = (level, subs, codec.encode(vals))
        if self._synced.get(session.id) == snap:
            return  # nothing changed elsewhere; a change made here and not yet written must stay
        state.log_level = level
        state.subscriptions = set(subs)
        state.state = vals
        self._synced[session.id] = snap

    async def before_response(self, session: HTTPSession) -> None:
        """Write what a request changed (log level, subscriptions) before its response leaves."""
        state = session.mcp_state
        sid = session.id
        if state is None or sid is None:
            return
        try:
            vals = codec.encode(state.state)
        except Exception:
            log.warning("session values of %s are not JSON: not shared", sid[:8])
            vals = self._synced.get(sid, (None, (), b"{}"))[2]
        snap = (state.log_level, tuple(sorted(state.subscriptions)), vals)
        if self._synced.get(sid) == snap:
            return
        key = f"session:{sid}"
        try:
            for _ in range(10):
                raw = await self.store.get(key)
                if raw is None:
                    return
                record = codec.decode(raw)
                record["log"], record["subs"], record["vals"] = snap[0], list(snap[1]), codec.decode(snap[2])
                if await self.store.compare_and_set(key, raw, codec.encode(record), ttl=self.idle):
                    self._synced[sid] = snap
                    return
        except StoreUnavailable as exc:
            log.warning("session state not saved: %s", exc)

    def forget(self, session: HTTPSession) -> None:
        """This worker's replica ended (the session may live on elsewhere)."""
        if session.id is not None:
            self._synced.pop(session.id, None)
            held = self._gets.get(session.id)
            if held is not None:
                held[1].end()

    async def delete(self, session: HTTPSession) -> None:
        """DELETE: the session ends everywhere at once."""
        sid = session.id
        assert sid is not None
        await self.store.delete(f"session:{sid}", f"gpos:{sid}", _events_key(sid, "g"))
        with contextlib.suppress(StoreUnavailable):
            await self.store.publish("sessions", b"end\n" + sid.encode())

    def stream_finished(self, stream: Stream) -> None:
        """A stream ended here: mark it in the store so followers elsewhere stop."""
        sid = stream.session.id
        if sid is None or stream.standalone:
            return
        self.events.end_stream(sid, stream.id)

    # ---------------------------------------------------------------- routing

    def outgoing(self, obj: dict[str, Any]) -> bytes:
        """A server-to-client request: its id names this worker, so the answer finds its way back."""
        id_ = obj["id"]
        obj["id"] = f"sr.{self.tag}.{'i' if type(id_) is int else 's'}{id_}"
        return codec.encode(obj)

    async def incoming(self, session: HTTPSession, items: list[Envelope]) -> list[Envelope]:
        """Send answers to server-to-client requests to the worker that asked, and cancellations
        of requests running elsewhere to whoever runs them; returns the messages that stay here."""
        keep: list[Envelope] = []
        for m in items:
            cancelled = _cancelled_id(m)
            if cancelled is not None and session.id is not None and not session.in_flight(cancelled):
                # the request runs on another worker: whoever runs it cancels it
                await self.store.publish("sessions", b"cancel\n" + session.id.encode() + b"\n" + encode_envelope(m))
                continue
            target = _answer_target(m)
            if target is None:
                keep.append(m)
                continue
            tag, original = target
            m = msgspec.structs.replace(m, id=original)
            if tag == self.tag:
                keep.append(m)
            elif session.id is not None:
                await self.store.publish(f"worker:{tag}", session.id.encode() + b"\n" + encode_envelope(m))
        return keep

    async def _on_worker_message(self, msg: bytes) -> None:
        sid, _, data = msg.partition(b"\n")
        session = self.app.sessions.get(sid.decode()) if self.app is not None else None
        if session is not None and not session.ended:
            session.feed(read(data, _LIMITS))

    async def _on_broadcast(self, msg: bytes) -> None:
        kind, _, rest = msg.partition(b"\n")
        if kind == b"end":
            session = self.app.sessions.get(rest.decode()) if self.app is not None else None
            if session is not None and self.app is not None:
                self.app.end_session(session)
        elif kind == b"get":
            sid, _, token = rest.decode().partition("\n")
            held = self._gets.get(sid)
            if held is not None and held[0] != token:
                held[1].end()  # a newer GET elsewhere replaces this one: one GET stream per session
        elif kind == b"note":
            await self._deliver(codec.decode(rest))
        elif kind == b"cancel":
            sid_raw, _, data = rest.partition(b"\n")
            session = self.app.sessions.get(sid_raw.decode()) if self.app is not None else None
            got = read(data, _LIMITS)
            cancelled = _cancelled_id(got)
            if session is not None and not session.ended and cancelled is not None and session.in_flight(cancelled):
                session.cancelled(cancelled)
                session.feed(got)

    async def fanout(self, method: str, params: dict[str, Any]) -> None:
        """:attr:`MCPServer.fanout`: a session notification for every worker (each session once)."""
        body = {"n": os.urandom(8).hex(), "m": method, "p": params}
        try:
            await self.store.publish("sessions", b"note\n" + codec.encode(body))
        except StoreUnavailable as exc:
            log.warning("notification %s not sent to other workers: %s", method, exc)
            await self._deliver(body)

    async def _deliver(self, body: dict[str, Any]) -> None:
        method, params, nonce = body["m"], body["p"], body["n"]
        if self.notify_local is not None:
            self.notify_local(method, params)
        if self.app is None:
            return
        uri = params.get("uri") if method == "notifications/resources/updated" else None
        for s in list(self.app.sessions.values()):
            state = s.mcp_state
            if s.shared is not self or s.ended or s.id is None or state is None:
                continue
            if uri is not None:
                raw = await self.store.get(f"session:{s.id}")
                record = codec.decode(raw) if raw is not None else None
                if type(record) is not dict or uri not in (record.get("subs") or ()):
                    continue
            elif not state.profile.initialize_seen:
                continue
            if await self.store.compare_and_set(f"once:{s.id}:{nonce}", None, b"1", ttl=60):
                await state.notify(method, params if params else None)

    # ---------------------------------------------------------------- streams

    async def serve_get(self, session: HTTPSession, receive: Receive, send: Send, headers: list[tuple[bytes, bytes]],
                        pump: Pump, *, prime: bool, retry_ms: int | None) -> None:
        """The standalone GET stream, wherever it is held: follows the session's stream ``g``
        from what no GET has delivered yet."""
        sid = session.id
        assert sid is not None
        pos = await self.store.get(f"gpos:{sid}")
        after = pos.decode() if pos is not None else "0"
        token = os.urandom(8).hex()
        old = self._gets.get(sid)
        conn = SSEResponse()
        self._gets[sid] = (token, conn)
        if old is not None:
            old[1].end()  # a new GET replaces the one still open
        await self.store.publish("sessions", f"get\n{sid}\n{token}".encode())
        head = sse_priming(f"g.{after}", retry_ms) if prime else b""
        relay = asyncio.ensure_future(self._relay(conn, sid, "g", after, track=True))
        try:
            await pump(conn, receive, send, headers, head)
        finally:
            relay.cancel()
            if self._gets.get(sid, (None,))[0] == token:
                del self._gets[sid]

    async def resume(self, session: HTTPSession, last_event_id: str, receive: Receive, send: Send,
                     headers: list[tuple[bytes, bytes]], pump: Pump) -> None:
        """GET with ``Last-Event-ID``: replay the stream after that event, then follow it live
        until it ends (or, for the GET stream ``g``, until the client leaves)."""
        sid = session.id
        assert sid is not None
        stream_id, _, after = last_event_id.rpartition(".")
        # ``g`` (the GET stream) exists as long as the session; a POST stream once it has an event
        if not stream_id or not after or (stream_id != "g" and await self.store.last_id(_events_key(sid, stream_id)) is None):
            raise HTTPRefusal(400, -32600, "Bad Request: unknown Last-Event-ID")
        conn = SSEResponse()
        token = os.urandom(8).hex()
        if stream_id == "g":
            old = self._gets.get(sid)
            self._gets[sid] = (token, conn)
            if old is not None:
                old[1].end()
            await self.store.publish("sessions", f"get\n{sid}\n{token}".encode())
        relay = asyncio.ensure_future(self._relay(conn, sid, stream_id, after, track=stream_id == "g"))
        try:
            await pump(conn, receive, send, headers, b"")
        finally:
            relay.cancel()
            if self._gets.get(sid, (None,))[0] == token:
                del self._gets[sid]

    async def _relay(self, conn: SSEResponse, sid: str, stream_id: str, after: str, *, track: bool) -> None:
        owner = stream_id[: stream_id.index("x")] if "x" in stream_id else None
        watch = asyncio.ensure_future(self._watch_owner(owner, conn)) if owner and owner != self.tag else None
        try:
            async for eid, data in self.events.follow(sid, stream_id, after):
                if data is None:
                    break
                conn.put(sse_event(data, eid))
                if track:  # where the next GET starts: nothing the client saw comes again, nothing is skipped
                    await self.store.set(f"gpos:{sid}", eid.rpartition(".")[2].encode(), ttl=self.idle)
        except StoreUnavailable as exc:
            log.warning("stream %s of session %s ended: %s", stream_id, sid[:8], exc)
        finally:
            if watch is not None:
                watch.cancel()
        conn.end()

    async def _watch_owner(self, owner: str, conn: SSEResponse) -> None:
        """End a resumed stream whose worker died: its requests will never be answered."""
        while not conn.ended and not conn.closed:
            await asyncio.sleep(_BEAT)
            try:
                alive = await self.store.get(f"alive:{owner}")
            except StoreUnavailable:
                continue
            if alive is None:
                log.info("worker %s is gone: ending a stream it owned", owner)
                conn.end()
                return


def _cancelled_id(m: Any) -> Any:
    """The request id a ``notifications/cancelled`` message names (None for anything else)."""
    if type(m) is not Envelope or m.method != "notifications/cancelled" or m.id is not UNSET:
        return None
    params = m.params
    rid = params.get("requestId") if type(params) is dict else None
    return rid if type(rid) in (str, int) else None


def _answer_target(m: Any) -> tuple[str, Any] | None:
    """(worker, original id) of a response to a request :meth:`SharedSessions.outgoing` renamed."""
    if type(m) is not Envelope or m.method is not UNSET:
        return None
    id_ = m.id
    if type(id_) is not str or not id_.startswith("sr."):
        return None
    _, tag, rest = id_.split(".", 2) if id_.count(".") >= 2 else ("", "", "")
    if not tag or not rest:
        return None
    if rest[0] == "i" and rest[1:].isdigit():
        return tag, int(rest[1:])
    return tag, rest[1:]
