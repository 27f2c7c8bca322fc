"""Sessions that any worker can serve: the session table on a shared :class:`~sturdyrpc.store.Store`.

With a shared store (Redis) every worker of a server, on one machine or many, behind a load
balancer without stickiness, serves every request of every session:

- **session record** ``session:<id>`` (TTL: the idle timeout, renewed by every request and while
  a response is open): the principal, the client's ``initialize`` params (so another worker
  negotiates the same version and sees the same client capabilities and info), the log level,
  the resource subscriptions and the application's per-session ``values``. A worker that meets a
  session it has not served yet builds a local *replica* (within the caps of
  :mod:`.sessions`, as any new session): it runs the MCP server on a new pipe and replays the
  ``initialize`` from the record behind the scenes, then applies log level and subscriptions.
  State a request changed is written back before that request's response leaves. DELETE removes
  the record: every worker answers 404 from then on, and replicas end at once (a message on the
  broadcast channel).
- **events** ``ev:<id>:<stream>`` (:class:`~.store_events.StoreEventStore`): everything sent on
  a stream, so a GET with ``Last-Event-ID`` on any worker replays what was missed and then
  follows live until the stream ends. The standalone GET stream is one logical stream ``g`` per
  session: any worker's notifications for the session (``resources/updated``, ``list_changed``,
  unrelated ``notifications/message``) are appended to it and the worker holding the GET follows it.
- **routing**: a server-to-client request (elicitation, sampling, roots) goes out with the id
  ``sr.<worker>.<n>``; the POST carrying its answer may land on any worker, which sends it on
  the channel of the worker named in the id, where the waiting handler gets it.
- **broadcast** (one channel): DELETE, a newer GET replacing an older one on another worker,
  ``notifications/cancelled`` for a request running on another worker, and
  ``resources/updated`` / ``list_changed`` from :meth:`MCPServer.resource_updated` (each session
  is told once: a compare-and-set picks one worker per session and event).
- **liveness**: each worker refreshes ``alive:<worker>`` every second or two; a resumed stream
  whose worker died (SIGKILL) ends instead of waiting forever.

Every store call is bounded; a store that is down gives HTTP 503 ("the session store is
unavailable", :func:`~.sessions.store_unavailable`), and the next request tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import secrets
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import msgspec

from .. import codec
from ..auth.principal import identity_of
from ..envelope import UNSET, Envelope, encode_envelope, from_message, read
from ..limits import DEFAULT_LIMITS
from ..mcp.request_state import RequestStateSigner
from ..mcp.session_state import mark_replayed
from ..messages import Notification, Request
from ..store import Store, StoreUnavailable
from ..store.notices import store_warning
from ..transports.asgi import ASGIApp, Receive, Scope, Send
from .events import sse_event, sse_priming
from .responses import SSEResponse
from .session import HTTPSession, Key, PostReplies, ReplyWaiter
from .sessions import Attachment, Serving, SessionTable, not_found, session_id_of, store_unavailable, unknown_event_id
from .store_events import StoreEventStore

__all__ = ["SharedSessions"]

log = logging.getLogger("sturdyrpc.http")

_INIT_ID = "sturdyrpc-replica-init"
#: What another worker relays (an answer, a cancellation) is read under the default limits: it
#: passed this server's own when it arrived there.
_LIMITS = DEFAULT_LIMITS
#: Seconds between liveness beats; a worker is taken for dead after ``_ALIVE_TTL`` without one.
_BEAT = 1.5
_ALIVE_TTL = 5.0
#: Seconds the marker "this session was told of this broadcast" lives: every worker sees a
#: broadcast within a fraction of that (one later would tell the session again).
_ONCE_TTL = 10.0
_EMPTY_STATE: tuple[str | None, tuple[str, ...], bytes] = (None, (), b"{}")


class SharedSessions(SessionTable):
    """:class:`~.sessions.SessionTable` on a shared ``store`` (see the module docstring).

    ``signer``: the MCP server's ``requestState`` signer, whose keys are then shared through the
    store too; ``notify_local(method, params)``: delivers a broadcast notification to this
    worker's 2026-07-28 ``subscriptions/listen`` streams.
    """

    saves_state = True

    def __init__(self, serving: Serving, store: Store, *, signer: RequestStateSigner | None = None,
                 notify_local: Callable[[str, dict[str, Any]], None] | None = None, max_events_per_stream: int = 1000) -> None:
        super().__init__(serving)
        self.store = store
        self.signer = signer
        self.notify_local = notify_local
        self.events: StoreEventStore = StoreEventStore(store, max_events_per_stream=max_events_per_stream,
                                                       ttl=serving.caps.idle_timeout, replay_window=serving.replay_window)
        #: This worker's name in ids and channels (random per process).
        self.tag = os.urandom(4).hex()
        self._synced: dict[str, tuple[str | None, tuple[str, ...], bytes]] = {}
        #: Per replica: the record it last applied (as the store returned it) and the identity in it.
        self._seen: dict[str, tuple[bytes, Any]] = {}
        self._gets: dict[str, tuple[str, SSEResponse]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._started: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._mine: Any = None
        self._everyone: Any = None

    @property
    def idle(self) -> float:
        return self.caps.idle_timeout

    # ------------------------------------------------------------------ start

    def guard(self, endpoint: ASGIApp) -> ASGIApp:
        async def store_first(scope: Scope, receive: Receive, send: Send) -> None:
            try:
                await self.ready()
            except StoreUnavailable as exc:
                await store_unavailable(send, exc)
                return
            await endpoint(scope, receive, send)

        return store_first

    async def ready(self) -> None:
        """Per request: make sure this worker listens on its channels and has the shared
        ``requestState`` keys (raises :class:`StoreUnavailable` until the store answers)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # served again on a new loop (tests): start over
            self._loop, self._started = loop, None
            self._tasks = set()
            self._mine = self._everyone = None
        if self._started is None or (self._started.done() and self._started.exception() is not None):
            self._started = loop.create_task(self._connect(), context=contextvars.Context())  # not the request's
        if not self._started.done():
            await asyncio.shield(self._started)
        elif self.signer is not None and self.signer.due():
            self._background(self._reload_keys())

    async def _connect(self) -> None:
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
            store_warning(log, "keys not reloaded", "requestState keys not reloaded: %s", exc)

    def _background(self, aw: Coroutine[Any, Any, Any]) -> None:
        t = asyncio.get_running_loop().create_task(aw, context=contextvars.Context())  # not the request's
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
                    await self._keep_open()
            except StoreUnavailable as exc:
                store_warning(log, "heartbeat", "worker heartbeat not stored: %s", exc)

    async def _keep_open(self) -> None:
        """An open response (a long tool call, a GET stream) keeps its session and streams alive
        everywhere. (A method of its own: the beat must not hold the last session it looked at.)"""
        for s in [s for s in self.sessions.values() if s.id is not None and s.has_open_response()]:
            await self.store.touch(f"session:{s.id}", self.idle)
            await self.events.keep(s.id, [st.id for st in s.streams.values() if not st.standalone])  # type: ignore[arg-type]

    async def aclose(self) -> None:
        await super().aclose()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.events.flush(), 5)  # the end markers of this worker's streams
        for t in list(self._tasks):
            t.cancel()
        with contextlib.suppress(Exception):
            await self.store.aclose()

    # --------------------------------------------------------------- sessions

    def _replica_of(self, sid: str, principal: Any) -> HTTPSession:
        """A new local session with this id, within the caps, its state not read yet."""
        session = self._add(sid, principal, stream_prefix=f"{self.tag}x", standalone_id="g")
        self._synced[sid] = _EMPTY_STATE
        return session

    async def create(self, principal: Any, init_params: Any) -> HTTPSession:
        """A session made here by ``initialize``: recorded before anything is answered."""
        sid = secrets.token_urlsafe(32)  # 256 random bits, visible ASCII (A-Z a-z 0-9 - _)
        session = self._replica_of(sid, principal)
        record = {"p": identity_of(principal), "init": init_params, "log": None, "subs": [], "vals": {}}
        try:
            await self.store.set(f"session:{sid}", codec.encode(record), ttl=self.idle)
        except BaseException:
            await session.end()
            raise
        return session

    def find(self, session_id: bytes | None, principal: Any) -> Awaitable[HTTPSession]:
        return self._find(session_id, principal)

    async def _find(self, session_id: bytes | None, principal: Any) -> HTTPSession:
        """The session named by ``Mcp-Session-Id``, from this worker or rebuilt from the store."""
        sid = session_id_of(session_id)
        data = await self.store.get_touch(f"session:{sid}", self.idle)
        local = self.sessions.get(sid)
        if data is None:
            if local is not None:
                self.end_session(local)  # ended elsewhere (DELETE, expiry)
            raise not_found()
        seen = self._seen.get(sid)
        if seen is not None and seen[0] == data and local is not None and not local.ended:
            # The record this replica last applied, unchanged: only the principal is left to check.
            if seen[1] != identity_of(principal):
                raise not_found()
            local.principal = principal
            return local
        record = codec.decode(data)
        if type(record) is not dict or record.get("p") != identity_of(principal):
            raise not_found()
        if local is None or local.ended:
            lock = self._locks.setdefault(sid, asyncio.Lock())
            try:
                async with lock:  # concurrent first requests on this worker build one replica
                    local = self.sessions.get(sid)
                    if local is None or local.ended:
                        local = await self._replica(sid, principal, record)
            finally:
                self._locks.pop(sid, None)
        self._apply(local, record)
        self._seen[sid] = (data, record.get("p"))
        local.principal = principal  # the same principal; this request's token (see LocalSessions.find)
        return local

    async def _replica(self, sid: str, principal: Any, record: dict[str, Any]) -> HTTPSession:
        session = self._replica_of(sid, principal)
        waiter = ReplyWaiter()
        # replayed, not the client's: marked so that telemetry does not count it as a request
        session.feed(from_message(Request("initialize", mark_replayed(record.get("init")), _INIT_ID)), waiter)
        try:
            answer = await waiter.wait(10)
        except BaseException:
            self.end_session(session)
            raise
        reply = codec.decode(answer) if answer is not None else None
        if type(reply) is not dict or "result" not in reply:
            self.end_session(session)
            raise not_found()
        session.version = reply["result"].get("protocolVersion") if type(reply["result"]) is dict else None
        session.feed(from_message(Notification("notifications/initialized", mark_replayed(None))))
        return session

    def _apply(self, session: HTTPSession, record: dict[str, Any]) -> None:
        state = session.mcp_session
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

    async def save_state(self, session: HTTPSession) -> None:
        """Write what a request changed (log level, subscriptions, values) before its response leaves."""
        state = session.mcp_session
        sid = session.id
        if state is None or sid is None:
            return
        try:
            vals = codec.encode(state.state)
        except Exception:
            log.warning("session values of %s are not JSON: not shared", sid[:8])
            vals = self._synced.get(sid, _EMPTY_STATE)[2]
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
            store_warning(log, "state not saved", "session state not saved: %s", exc)

    def left(self, session: HTTPSession, stream_id: str) -> None:
        """A connection left an open stream: its events are written now, not after the write delay."""
        if session.id is not None:
            self.events.detached(session.id, stream_id)

    def _forget(self, session: HTTPSession) -> None:
        """This worker's replica ended (the session may live on elsewhere)."""
        if session.id is not None:
            self._synced.pop(session.id, None)
            self._seen.pop(session.id, None)
            held = self._gets.get(session.id)
            if held is not None:
                held[1].end()

    async def delete(self, session: HTTPSession) -> None:
        """DELETE: the session ends everywhere at once."""
        sid = session.id
        assert sid is not None
        await self.store.delete(f"session:{sid}", f"gpos:{sid}", f"ev:{sid}:g")
        with contextlib.suppress(StoreUnavailable):
            await self.store.publish("sessions", b"end\n" + sid.encode())
        await session.end()

    # ---------------------------------------------------------------- routing

    def request_out(self, obj: dict[str, Any], data: bytes) -> bytes:
        """A server-to-client request: its id names this worker, so the answer finds its way back."""
        id_ = obj["id"]
        obj["id"] = f"sr.{self.tag}.{'i' if type(id_) is int else 's'}{id_}"
        return codec.encode(obj)

    def feed(self, session: HTTPSession, items: list[tuple[Envelope, Key | None]], post: PostReplies) -> Awaitable[None]:
        """As for any session, after sending answers and cancellations meant for another worker
        there; the replies ready at once wait until the session's state is saved."""
        return self._feed(session, items, post)

    async def _feed(self, session: HTTPSession, items: list[tuple[Envelope, Key | None]], post: PostReplies) -> None:
        SessionTable.feed(self, session, await self._incoming(session, items), post)
        if post.ready:
            await self.save_state(session)  # other workers see what the requests changed first

    async def _incoming(
        self, session: HTTPSession, items: list[tuple[Envelope, Key | None]]
    ) -> list[tuple[Envelope, Key | None]]:
        """Send answers to server-to-client requests to the worker that asked, and cancellations
        of requests running elsewhere to whoever runs them; returns the messages that stay here."""
        keep: list[tuple[Envelope, Key | None]] = []
        for item in items:
            m, k = item
            if k is not None:
                keep.append(item)  # a request: it runs here
                continue
            cancelled = _cancelled_id(m)
            if cancelled is not None and session.id is not None and not session.in_flight(cancelled):
                # the request runs on another worker: whoever runs it cancels it
                await self.store.publish("sessions", b"cancel\n" + session.id.encode() + b"\n" + encode_envelope(m))
                continue
            target = _answer_target(m)
            if target is None:
                keep.append(item)
                continue
            tag, original = target
            m = msgspec.structs.replace(m, id=original)
            if tag == self.tag:
                keep.append((m, None))
            elif session.id is not None:
                await self.store.publish(f"worker:{tag}", session.id.encode() + b"\n" + encode_envelope(m))
        return keep

    async def _on_worker_message(self, msg: bytes) -> None:
        sid, _, data = msg.partition(b"\n")
        session = self.sessions.get(sid.decode())
        if session is not None and not session.ended:
            session.feed(read(data, _LIMITS))

    async def _on_broadcast(self, msg: bytes) -> None:
        kind, _, rest = msg.partition(b"\n")
        if kind == b"end":
            session = self.sessions.get(rest.decode())
            if session is not None:
                self.end_session(session)
        elif kind == b"get":
            sid, _, token = rest.decode().partition("\n")
            held = self._gets.get(sid)
            if held is not None and held[0] != token:
                held[1].end()  # a newer GET elsewhere replaces this one: one GET stream per session
        elif kind == b"note":
            await self._deliver(codec.decode(rest))
        elif kind == b"cancel":
            sid_raw, _, data = rest.partition(b"\n")
            session = self.sessions.get(sid_raw.decode())
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
            store_warning(log, "notification not sent", "notification %s not sent to other workers: %s", method, exc)
            await self._deliver(body)

    async def _deliver(self, body: dict[str, Any]) -> None:
        method, params, nonce = body["m"], body["p"], body["n"]
        if self.notify_local is not None:
            self.notify_local(method, params)
        uri = params.get("uri") if method == "notifications/resources/updated" else None
        for s in list(self.sessions.values()):
            state = s.mcp_session
            if s.ended or s.id is None or state is None:
                continue
            if uri is not None:
                raw = await self.store.get(f"session:{s.id}")
                record = codec.decode(raw) if raw is not None else None
                if type(record) is not dict or uri not in (record.get("subs") or ()):
                    continue
            elif not state.profile.initialize_seen:
                continue
            if await self.store.compare_and_set(f"once:{s.id}:{nonce}", None, b"1", ttl=min(_ONCE_TTL, self.idle)):
                await state.notify(method, params if params else None)

    # ---------------------------------------------------------------- streams

    async def open_get(self, session: HTTPSession, *, prime: bool, retry_ms: int | None) -> Attachment:
        """The standalone GET stream, wherever it is held: follows the session's stream ``g``
        from what no GET has delivered yet."""
        pos = await self.store.get(f"gpos:{session.id}")
        after = pos.decode() if pos is not None else "0"
        return await self._hold_get(session, after, sse_priming(f"g.{after}", retry_ms) if prime else b"")

    async def resume(self, session: HTTPSession, last_event_id: str, *, prime: bool, retry_ms: int | None) -> Attachment:
        """GET with ``Last-Event-ID``: replay the stream after that event, then follow it live
        until it ends (or, for the GET stream ``g``, until the client leaves)."""
        sid = session.id
        assert sid is not None
        found = self.events.parse(last_event_id)
        if found is None:
            raise unknown_event_id()
        stream_id, after = found
        if stream_id == "g":  # exists as long as the session; resuming it replaces the GET held now
            return await self._hold_get(session, after, b"")
        if not await self.events.exists(sid, stream_id):  # a POST stream, once it has an event
            raise unknown_event_id()
        self.check_streams(session)  # one more open response following the store
        session.relays += 1
        conn = SSEResponse()
        relay = asyncio.ensure_future(self._relay(conn, sid, stream_id, after, track=False))

        def done() -> None:
            relay.cancel()
            session.relays -= 1

        return Attachment(conn, b"", done)

    async def _hold_get(self, session: HTTPSession, after: str, head: bytes) -> Attachment:
        sid = session.id
        assert sid is not None
        token = os.urandom(8).hex()
        await self.store.publish("sessions", f"get\n{sid}\n{token}".encode())  # a GET held elsewhere ends
        conn = SSEResponse()
        old = self._gets.get(sid)
        self._gets[sid] = (token, conn)
        if old is not None:
            old[1].end()  # a new GET replaces the one still open
        relay = asyncio.ensure_future(self._relay(conn, sid, "g", after, track=True))

        def done() -> None:
            relay.cancel()
            if self._gets.get(sid, (None,))[0] == token:
                del self._gets[sid]

        return Attachment(conn, head, done)

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
            store_warning(log, "stream ended", "stream %s of session %s ended: %s", stream_id, sid[:8], exc)
        except Exception:
            log.exception("stream %s of session %s failed", stream_id, sid[:8])
        finally:
            if watch is not None:
                watch.cancel()
            conn.end()  # whatever happened, the response finishes

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
    """(worker, original id) of a response to a request :meth:`SharedSessions.request_out` renamed."""
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
