"""A JSON-RPC peer: both ends send requests and notifications over one connection.

:class:`Peer` sits on a :class:`MessageTransport` (whole messages in and out; framing lives
below it). Incoming requests and notifications run through a :class:`~sturdyrpc.runner.Runner`
on the peer's dispatcher; outgoing calls are matched to their replies by exact id.

Guarantees:

- every :meth:`Peer.request` settles exactly once: a result, the remote's typed
  :class:`~sturdyrpc.errors.RPCError`, :class:`RequestTimeout`, ``CancelledError`` (the caller
  cancelled) or :class:`ConnectionClosed`. Nothing waits forever once the transport ends;
- outgoing ids are unique for the life of the connection, never reused; replies match by
  type and value (``"7"`` is not ``7``, ``1`` is not ``True``);
- replies that match nothing (unknown, duplicate, late, malformed) are counted in
  :attr:`Peer.stats` and logged; they never resolve another call;
- a cancelled incoming request is never answered; progress is never sent after the reply;
- the reader never awaits a handler, so a handler may call back to the other side.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from . import codec
from .dispatch import Call, Context, Dispatcher
from .envelope import UNSET, Envelope, read
from .errors import InternalError, RPCError, ServerError
from .framing import BadHeader, FrameTooLarge
from .messages import ErrorResponse, Id, InvalidMessage, Message, Response
from .profile import NO_CANCEL, JSONRPCProfile, Profile
from .request_context import current_call
from .runner import Origin, Runner

__all__ = [
    "Peer",
    "PeerContext",
    "PendingCall",
    "MessageTransport",
    "RequestTimeout",
    "ConnectionClosed",
    "InvalidReply",
    "ProgressCallback",
    "SendHook",
]

log = logging.getLogger("sturdyrpc.peer")

ProgressCallback = Callable[[float, float | None, str | None], Awaitable[None] | None]
#: ``await hook(method, params, id, send)`` around each outgoing request (``id``: its id) and
#: notification (``id``: None): must return ``await send(params)``, with params as they are or
#: changed (a copy: e.g. trace context added to ``_meta``). See :attr:`Peer.send_hook`.
SendHook = Callable[[str, Any, "str | int | None", Callable[[Any], Awaitable[Any]]], Awaitable[Any]]
#: ``hook(method, params, sent) -> params``: around a notification the peer itself handles or
#: sends on the spot (cancellation and progress: never seen by the dispatcher or
#: :meth:`Peer.notify`); ``sent`` says which way. Returns the params to send (or as received).
#: See :attr:`Peer.notice_hook`.
NoticeHook = Callable[[str, Any, bool], Any]


class RequestTimeout(Exception):
    """An outgoing request got no reply in time; the cancel notification has been sent."""

    def __init__(self, method: str, id: Id, timeout: float) -> None:
        super().__init__(f"request {id!r} ({method}) timed out after {timeout:g} s")
        self.method = method
        self.id = id
        self.timeout = timeout


class ConnectionClosed(Exception):
    """The connection ended (or was closed) before the request was answered."""


class InvalidReply(InternalError):
    """The reply to this request was malformed (e.g. both ``result`` and ``error``).

    Raised to the caller instead of letting it wait for a timeout; ``data`` holds the reason.
    Caller cancellation is plain ``asyncio.CancelledError`` (re-raised after the cancel
    notification is sent); there is no separate exception for it.
    """

    default_message = "Invalid reply"


class MessageTransport(Protocol):
    """Whole messages in and out. Framing (lines, Content-Length) lives below this.

    A transport may also be a :class:`FrameSource` (it pushes what it reads: the stdio
    transport) and a :class:`NowaitSender` (it takes a message without waiting); the peer then
    uses those instead of :meth:`receive` and the writer task.
    """

    async def send(self, data: bytes) -> None:
        """Send one whole message. Raises ``ConnectionError``/``OSError`` once the connection is gone."""

    async def receive(self) -> bytes | FrameTooLarge | BadHeader | None:
        """The next message (or framing event); ``None`` when the other side closed."""

    async def close(self) -> None:
        """Close the connection (idempotent)."""


@runtime_checkable
class FrameSource(Protocol):
    """A transport that hands over each frame as soon as it is read, instead of being read."""

    def deliver(self, on_frame: Callable[[bytes | FrameTooLarge | BadHeader], None], context: contextvars.Context | None = None) -> None:
        """Call ``on_frame`` with every frame, in order, from now on, in ``context`` when given."""

    def hold(self, on: bool) -> None:
        """Stop (True) or resume (False) delivering frames and reading."""

    async def wait_input_done(self) -> None:
        """Return once the input has ended and every frame read before the end was delivered."""


@runtime_checkable
class NowaitSender(Protocol):
    """A transport that can take a message at once."""

    def send_nowait(self, data: bytes) -> bool:
        """Take ``data`` now (True), or decline (False, nothing sent) when :meth:`send` would have
        to wait (flow control) or would fail: then it goes through ``send``."""


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A snapshot of one outgoing request waiting for its reply."""

    id: Id
    method: str
    age: float
    progress: float | None
    total: float | None


_DEFAULT: Any = object()

# Which peer's handler the current task is running (set when its context is made). Calls made
# by a handler on behalf of the other side skip the outgoing cap: they are already bounded by
# the incoming cap, and waiting for a slot held by our own calls (which wait for the other
# side's handlers, which wait for theirs...) could deadlock both ends.
_HANDLER_OF: contextvars.ContextVar[Peer | None] = contextvars.ContextVar("sturdyrpc_handler_of", default=None)


def _key(id_: Any) -> tuple[type, Any]:
    # 1, 1.0 and True are equal as dict keys; ids are kept apart by type.
    return (type(id_), id_)


class _Out:
    """Bookkeeping of one outgoing request."""

    __slots__ = (
        "id",
        "method",
        "future",
        "started",
        "timeout",
        "deadline",
        "hard_deadline",
        "on_progress",
        "reset_on_progress",
        "progress",
        "total",
        "progress_task",
        "send_cancel",
    )

    def __init__(self, id_: Id, method: str, future: asyncio.Future[Any], started: float) -> None:
        self.id = id_
        self.method = method
        self.future = future
        self.started = started
        self.timeout: float | None = None
        self.deadline: float | None = None
        self.hard_deadline: float | None = None
        self.on_progress: ProgressCallback | None = None
        self.reset_on_progress = False
        self.progress: float | None = None
        self.total: float | None = None
        self.progress_task: asyncio.Task[None] | None = None
        self.send_cancel = True


class PeerContext(Context):
    """The context a handler gets on a peer (annotate a parameter ``ctx: PeerContext``).

    Subclasses (``context_class=``) are built as ``cls(id, method, params, is_notification, peer)``.
    """

    __slots__ = ("peer", "_task", "_last_progress")

    def __init__(self, id: Id, method: str, params: Any, is_notification: bool, peer: Peer) -> None:
        super().__init__(id, method, params, is_notification)
        self.peer = peer
        # The task that runs the handler: once it is done the reply has gone, and progress stops.
        self._task = asyncio.current_task()
        self._last_progress: float | None = None

    @property
    def cancelled(self) -> bool:
        """Whether the request was cancelled (by the other side or by closing)."""
        t = self._task
        return t is not None and (t.cancelled() or t.cancelling() > 0)

    @property
    def progress_token(self) -> str | int | None:
        """The caller's progress token, or None when it asked for no progress."""
        if self.is_notification:
            return None
        return self.peer.profile.read_progress_token(self.params)

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Send a progress notification to the caller.

        A no-op when the caller gave no token, after the reply has been sent, or once
        cancelled. ``progress`` must increase with every call (``ValueError`` otherwise).
        """
        token = self.progress_token
        if token is None:
            return
        if self._last_progress is not None and not progress > self._last_progress:
            raise ValueError(f"progress must increase (was {self._last_progress}, got {progress})")
        self._last_progress = progress
        t = self._task
        if t is not None and (t.done() or t.cancelling() > 0):
            log.debug("progress for %r after its reply or cancellation: not sent", self.id)
            return
        method, params = self.peer.profile.progress_notification(token, progress, total, message)
        await self.peer.notify(method, params)

    async def request(self, method: str, params: Any = None, **kw: Any) -> Any:
        """Call ``method`` on the other side (see :meth:`Peer.request`)."""
        return await self.peer.request(method, params, **kw)

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification to the other side."""
        await self.peer.notify(method, params)


class Peer:
    """One end of a two-way JSON-RPC connection.

    ``dispatcher`` serves incoming requests (None: every request is answered -32601).
    ``profile`` (default :class:`~sturdyrpc.profile.JSONRPCProfile`) may be replaced at any
    time through the attribute; it is read for every message.
    ``default_timeout`` applies to :meth:`request` when no timeout is given (None: no timeout);
    ``max_timeout`` caps every timeout, including one extended by progress.
    ``max_outgoing`` caps outgoing requests in flight; more callers wait their turn.
    Incoming requests beyond the dispatcher's ``Limits.max_in_flight`` (or while the outgoing
    queue is above its high water) are held, up to ``max_held`` messages, and reading stops
    beyond that; replies, cancels and progress are read and handled meanwhile, so a handler
    waiting on a call back to the other side is not deadlocked by the cap.
    Use as ``async with Peer(...) as peer:`` or call :meth:`start` and :meth:`close`.
    """

    #: Outgoing queue high water (messages, bytes): above it senders wait and requests from the
    #: other side are held rather than started.
    out_high_messages = 512
    out_high_bytes = 8 * 1024 * 1024

    def __init__(
        self,
        transport: MessageTransport,
        dispatcher: Dispatcher | None = None,
        *,
        profile: Profile | None = None,
        default_timeout: float | None = 60.0,
        max_timeout: float | None = None,
        max_outgoing: int = 256,
        context_class: type[PeerContext] = PeerContext,
        name: str = "peer",
        close_deadline: float = 5.0,
        max_held: int = 1024,
        on_enqueue: Callable[[bytes], None] | None = None,
    ) -> None:
        if max_outgoing < 1:
            raise ValueError("max_outgoing must be at least 1")
        self.transport = transport
        self.dispatcher = dispatcher if dispatcher is not None else Dispatcher()
        self.profile: Profile = profile if profile is not None else JSONRPCProfile()
        self.default_timeout = default_timeout
        self.max_timeout = max_timeout
        self.max_outgoing = max_outgoing
        self.context_class = context_class
        self.name = name
        #: Called with each outgoing message as it is queued, in the sending task's context (where
        #: ``request_context.current_call`` still names the request being handled; the writer task cannot
        #: see it). Streamable HTTP uses it to put a request's notifications on that request's stream.
        self.on_enqueue = on_enqueue
        #: Called with the error of an error reply whose id is null (the other side could not read
        #: a request, or its id). It settles no call by itself; a caller with one call in flight
        #: (``sturdyrpc call``) may take it as that call's answer rather than wait forever.
        self.on_error_without_id: Callable[[RPCError], None] | None = None
        #: Wraps each :meth:`request` and :meth:`notify` (see :data:`SendHook`): the one seam for
        #: instrumentation on the sending side (:mod:`sturdyrpc.otel`). None: nothing extra runs.
        self.send_hook: SendHook | None = None
        #: Called for the notifications the peer handles itself (cancellation and progress
        #: received: the dispatcher never sees them) and sends on the spot (the cancellation of
        #: a request it gave up on): the same seam for them (see :data:`NoticeHook`).
        self.notice_hook: NoticeHook | None = None
        #: Kept for compatibility: the end of the input (EOF) has no deadline any more. Every
        #: request that was running or held back is answered, as the plain stdio server does;
        #: the deadline of :meth:`close` (SIGTERM) is the one that cuts work short.
        self.close_deadline = close_deadline
        self.stats: dict[str, int] = {
            "requests_sent": 0,
            "notifications_sent": 0,
            "replies": 0,
            "unmatched_replies": 0,
            "duplicate_replies": 0,
            "late_replies": 0,
            "malformed_replies": 0,
            "timeouts": 0,
            "caller_cancels": 0,
            "cancels_received": 0,
            "cancels_ignored": 0,
            "progress_received": 0,
            "progress_ignored": 0,
            "held_requests": 0,
            "refused_while_closing": 0,
        }
        self._runner = Runner(
            self.dispatcher,
            self._enqueue,
            deliver=self._deliver_reply,
            on_response=self._on_response,
            on_pressure=self._on_runner_pressure,
            context_factory=self._make_context,
            profile=self.profile,
        )
        self._pending: dict[tuple[type, Any], _Out] = {}
        self._next_id = 0
        self._user_ids: set[tuple[type, Any]] = set()
        self._abandoned: dict[tuple[type, Any], None] = {}  # recently timed out/cancelled, for stats
        self._slots = asyncio.Semaphore(max_outgoing)
        # outgoing queue
        # what the writer sends, in order; a (origin, reply) pair is handed to its origin in its place
        self._outq: deque[bytes | tuple[Origin, bytes]] = deque()
        self._out_bytes = 0
        self._writer_wake: asyncio.Future[None] | None = None
        self._writing = False
        self._flush_waiters: list[asyncio.Future[None]] = []
        self._below_water: asyncio.Event | None = None
        # incoming pressure and held frames
        self._runner_pressure = False
        self._write_pressure = False
        # (what was read, its origin, the request's id key or None, the context it came in), in order
        self._held: deque[tuple[Any, Origin | None, tuple[type, Any] | None, contextvars.Context | None]] = deque()
        self._max_held = max(1, max_held)
        self._resume_reading: asyncio.Event | None = None
        self._release_scheduled = False
        self._context = contextvars.copy_context()  # made again when the peer starts
        #: The transport when it pushes frames (:class:`FrameSource`): the peer does not read it.
        self._source: FrameSource | None = transport if isinstance(transport, FrameSource) else None
        # lifecycle
        self._started = False
        self._closing = False
        self._refusing = False  # closing by our choice: requests still held are refused
        self._close_reason = "connection closed"
        self._closed = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._close_task: asyncio.Task[None] | None = None
        self._draining_eof = False  # closing because the input ended: no deadline until close()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._bg: set[asyncio.Task[Any]] = set()
        #: ``transport.send_nowait(data) -> bool`` when the transport has one (optional): takes a
        #: message at once (True) or declines (False: it must go through ``send``).
        self._send_nowait: Callable[[bytes], bool] | None = transport.send_nowait if isinstance(transport, NowaitSender) else None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start reading and writing. Idempotent."""
        self.start_now()

    def start_now(self) -> None:
        """:meth:`start`, on the running loop, without a coroutine (a transport that must feed
        the peer on the same turn it made it: an HTTP session's first POST). Idempotent."""
        if self._started:
            return
        self._started = True
        loop = asyncio.get_running_loop()
        # Everything incoming is handled in this context (what the protocol layer set before
        # starting the peer, e.g. the MCP session, is seen by every handler), whoever delivers it.
        self._context = contextvars.copy_context()
        self._resume_reading = asyncio.Event()
        self._resume_reading.set()
        self._below_water = asyncio.Event()
        self._below_water.set()
        self._writer = loop.create_task(self._write_loop(), name=f"{self.name}-writer")
        source = self._source
        if source is not None:
            source.deliver(self._feed, self._context)
            self._reader = loop.create_task(self._wait_input(source), name=f"{self.name}-reader")
        else:
            self._reader = loop.create_task(self._read_loop(), name=f"{self.name}-reader")

    async def __aenter__(self) -> Peer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def closed(self) -> asyncio.Event:
        """Set once the peer is fully closed (transport closed, everything settled)."""
        return self._closed

    @property
    def is_closing(self) -> bool:
        """True from the start of closing (by either side): new requests fail at once."""
        return self._closing

    async def wait_closed(self) -> None:
        """Wait until the peer is closed (by :meth:`close`, the other side, or a broken transport)."""
        await self._closed.wait()

    async def close(self, deadline: float = 5.0) -> None:
        """Close politely: stop taking new requests, let running handlers finish and outgoing
        calls settle, flush replies, all within ``deadline`` seconds; then fail what remains
        with :class:`ConnectionClosed`, cancel what still runs, and close the transport.

        Called from one of this peer's handlers, it starts closing and returns at once (the
        handler's reply is still sent)."""
        if not self._started:
            self._started = True
            self._closing = True
            await self._close_transport()
            self._closed.set()
            return
        if self._close_task is None:
            self._close_task = asyncio.get_running_loop().create_task(self._shutdown(deadline, eof=False))
        elif self._draining_eof and not self._close_task.done():
            self._draining_eof = False
            asyncio.get_running_loop().call_later(max(deadline, 0.0), self._cut_short, self._close_task)
        if self._runner.owns(asyncio.current_task()):
            return  # called by one of our handlers: closing waits for it, so it must not wait for closing
        await asyncio.shield(self._close_task)

    def _cut_short(self, task: asyncio.Task[None]) -> None:
        """The deadline of :meth:`close` passed while the end of the input was being drained:
        refuse what is held back and cancel what still runs."""
        if task.done():
            return
        self._refusing = True
        self._refuse_held()
        self._runner.cancel_all()

    def abort(self, reason: str = "connection aborted") -> None:
        """Close at once without draining: every pending call fails with ``ConnectionClosed(reason)``."""
        self._close_reason = reason
        self._closing = True
        self._fail_pending(reason)
        self._runner.cancel_all()
        if self._close_task is None and self._started:
            self._close_task = asyncio.get_running_loop().create_task(self._shutdown(0.0, eof=True))

    async def _shutdown(self, deadline: float | None, eof: bool) -> None:
        """Close; ``deadline`` None (the end of the input) waits for every request to be answered."""
        loop = asyncio.get_running_loop()
        end = None if deadline is None else loop.time() + max(deadline, 0.0)
        self._closing = True
        if eof:
            # No reply can arrive any more: fail what waits for one now, not at the deadline.
            # Requests held back before the end are still served (the other side may be reading).
            self._fail_pending(self._close_reason)
            self._schedule_release()
        else:
            self._refusing = True
            self._refuse_held()
        try:
            while True:
                remaining = None if end is None else end - loop.time()
                if remaining is not None and remaining <= 0 or not await self._runner.drain(remaining):
                    break
                if self._runner.in_flight:
                    continue  # held requests were started meanwhile
                if not self._held or self._refusing:
                    break
                self._release()  # requests held back before the end: start them now
            if end is not None:
                while self._pending and loop.time() < end and not (self._reader is None or self._reader.done()):
                    await asyncio.sleep(min(0.01, max(end - loop.time(), 0)))
            self._fail_pending(self._close_reason)
            self._refusing = True
            self._refuse_held()
            self._runner.cancel_all()
            # After the end of the input the replies still go out, but a reader that never
            # reads them must not hold the process forever.
            await self._flush(10.0 if end is None else max(end - loop.time(), 0.05))
        finally:
            self._fail_pending(self._close_reason)
            self._runner.cancel_all()
            self._runner.close()
            for t in (self._reader, self._writer):
                if t is not None and t is not asyncio.current_task():
                    t.cancel()
            for t in list(self._bg):
                t.cancel()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            await self._close_transport()
            self._wake_all_waiters()
            self._closed.set()

    async def _close_transport(self) -> None:
        try:
            await asyncio.wait_for(self.transport.close(), 2.0)
        except Exception as exc:  # closing must not fail the closer
            log.debug("%s: transport close failed: %r", self.name, exc)

    def _wake_all_waiters(self) -> None:
        if self._below_water is not None:
            self._below_water.set()
        self._reading(True)
        for w in self._flush_waiters:
            if not w.done():
                w.set_result(None)
        self._flush_waiters.clear()

    def _fail_pending(self, reason: str) -> None:
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        for rec in pending.values():
            if not rec.future.done():
                rec.future.set_exception(ConnectionClosed(reason))

    def _connection_lost(self, reason: str, eof: bool = True) -> None:
        if self._close_task is not None:
            self._fail_pending(self._close_reason if self._closing else reason)
            return
        self._close_reason = reason
        self._closing = True
        self._fail_pending(reason)
        if not eof:
            self._runner.cancel_all()  # nothing can be sent: replies are pointless
        # The end of the input is no reason to drop work: every request that was running or held
        # back is answered (the deadline of close()/SIGTERM still applies if it comes meanwhile).
        self._draining_eof = eof
        self._close_task = asyncio.get_running_loop().create_task(self._shutdown(None if eof else 0.0, eof=True))

    # ------------------------------------------------------------------ outgoing

    def _new_id(self) -> int:
        n = self._next_id + 1
        if self._user_ids:
            while (int, n) in self._user_ids:
                n += 1
        self._next_id = n
        return n

    def _check_open(self) -> None:
        if self._closing or not self._started:
            raise ConnectionClosed(self._close_reason if self._closing else "peer not started")

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: float | None = _DEFAULT,
        id: str | int | None = None,
        on_progress: ProgressCallback | None = None,
        reset_timeout_on_progress: bool = False,
        max_timeout: float | None = _DEFAULT,
        send_cancel: bool = True,
    ) -> Any:
        """Send a request and return its result.

        Raises the remote's typed :class:`~sturdyrpc.errors.RPCError`, :class:`RequestTimeout`
        (after sending the profile's cancel notification), :class:`ConnectionClosed`, or
        re-raises ``CancelledError`` when the awaiting task is cancelled (cancel notification
        sent). ``id`` picks the id (str or int, never used before on this connection).
        ``on_progress(progress, total, message)`` receives progress; with
        ``reset_timeout_on_progress`` each progress restarts the timeout, never beyond
        ``max_timeout`` (default: the peer's; if neither is set, 10x the timeout) from the
        start of the call. ``send_cancel=False`` sends no cancel notification on timeout or
        cancellation (MCP: ``initialize`` must not be cancelled).
        """
        self._check_open()
        if timeout is _DEFAULT:
            timeout = self.default_timeout
        if max_timeout is _DEFAULT:
            max_timeout = self.max_timeout
        if timeout is not None and max_timeout is not None and timeout > max_timeout:
            timeout = max_timeout
        elif timeout is None:
            timeout = max_timeout
        key = self._take_id(id)
        hook = self.send_hook
        if hook is not None:
            return await hook(method, params, key[1], lambda p: self._send_request(
                method, p, key, timeout, max_timeout, on_progress, reset_timeout_on_progress, send_cancel))
        return await self._send_request(method, params, key, timeout, max_timeout, on_progress, reset_timeout_on_progress, send_cancel)

    async def _send_request(self, method: str, params: Any, key: tuple[type, Any], timeout: float | None, max_timeout: float | None,
                            on_progress: ProgressCallback | None, reset_timeout_on_progress: bool, send_cancel: bool) -> Any:
        id_: str | int = key[1]
        if on_progress is not None:
            params = self.profile.put_progress_token(params, id_)  # the token is the request id
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        msg["id"] = id_
        data = codec.encode(msg)  # raises TypeError/ValueError before anything is sent

        slots = self._slots
        nested = _HANDLER_OF.get() is self
        if nested:
            bw = self._below_water
            while bw is not None and not bw.is_set() and not self._closing:
                await bw.wait()
        elif slots.locked() or self._below_water is None or not self._below_water.is_set():
            await self._wait_send_room(slots)
        else:
            await slots.acquire()  # does not suspend: a slot is free
        try:
            self._check_open()
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[Any] = loop.create_future()
            now = loop.time()
            rec = _Out(id_, method, fut, now)
            if timeout is not None:
                rec.timeout = timeout
                rec.deadline = now + timeout
                if reset_timeout_on_progress:
                    rec.hard_deadline = now + (max_timeout if max_timeout is not None else 10 * timeout)
                self._arm(rec.deadline)
            if on_progress is not None:
                rec.on_progress = on_progress
                rec.reset_on_progress = reset_timeout_on_progress
            rec.send_cancel = send_cancel
            self._pending[key] = rec
            self.stats["requests_sent"] += 1
            self._enqueue(data)
            parked = current_call.get() if nested else None
            if parked is not None:
                # While it waits for the other side, this handler's slot serves others.
                self._runner.park(parked)
                if self._held:
                    self._schedule_release()
            try:
                return await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    fut.exception()  # settled in the same instant: mark it seen, the cancel wins
                if self._pending.pop(key, None) is rec:
                    # Still unanswered: tell the other side to stop, and ignore a late reply.
                    self.stats["caller_cancels"] += 1
                    self._abandon(key)
                    if send_cancel:
                        self._send_cancel(id_, "cancelled by the caller")
                raise
            finally:
                if parked is not None:
                    self._runner.unpark(parked)
                if self._pending.get(key) is rec:
                    del self._pending[key]
        finally:
            if not nested:
                slots.release()

    async def _wait_send_room(self, slots: asyncio.Semaphore) -> None:
        await slots.acquire()
        try:
            bw = self._below_water
            while bw is not None and not bw.is_set() and not self._closing:
                await bw.wait()
        except BaseException:
            slots.release()
            raise

    def _take_id(self, id_: str | int | None) -> tuple[type, Any]:
        if id_ is None:
            return (int, self._new_id())
        if type(id_) is not str and type(id_) is not int:
            raise TypeError("a request id must be a str or an int")
        key = _key(id_)
        if key in self._user_ids or (type(id_) is int and 0 < id_ <= self._next_id) or key in self._pending:
            raise ValueError(f"request id {id_!r} was already used on this connection")
        self._user_ids.add(key)
        return key

    def _abandon(self, key: tuple[type, Any]) -> None:
        ab = self._abandoned
        ab[key] = None
        if len(ab) > 4096:
            del ab[next(iter(ab))]

    def _send_cancel(self, id_: Id, reason: str) -> None:
        note = self.profile.cancel_notification(id_, reason)
        if note is None or self._closing:
            return
        method, params = note
        hook = self.notice_hook
        if hook is not None:
            try:
                params = hook(method, params, True)
            except Exception:  # instrumentation never stops a cancellation
                log.exception("%s: notice hook failed", self.name)
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        try:
            self._enqueue(codec.encode(msg))
        except (TypeError, ValueError):
            log.exception("%s: cancel notification could not be encoded", self.name)

    # One timer for all calls, set for the earliest deadline: a call that completes costs no
    # timer operation, and a deadline moved by progress is simply found later on the next scan.

    def _arm(self, deadline: float) -> None:
        h = self._timer
        if h is not None:
            if self._timer_at <= deadline:
                return
            h.cancel()
        self._timer_at = deadline
        self._timer = asyncio.get_running_loop().call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        now = asyncio.get_running_loop().time() + 1e-3  # a timer may fire a hair early
        expired: list[tuple[tuple[type, Any], _Out]] = []
        nxt: float | None = None
        for key, rec in self._pending.items():
            d = rec.deadline
            if d is None:
                continue
            if d <= now:
                expired.append((key, rec))
            elif nxt is None or d < nxt:
                nxt = d
        for key, rec in expired:
            self._expire(key, rec)
        if nxt is not None:
            self._arm(nxt)

    def _expire(self, key: tuple[type, Any], rec: _Out) -> None:
        if self._pending.get(key) is not rec or rec.future.done():
            return
        now = asyncio.get_running_loop().time()
        del self._pending[key]
        self.stats["timeouts"] += 1
        self._abandon(key)
        if rec.send_cancel:
            self._send_cancel(rec.id, "timed out")
        rec.future.set_exception(RequestTimeout(rec.method, rec.id, now - rec.started))

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (waits while the outgoing queue is above its high water)."""
        self._check_open()
        hook = self.send_hook
        if hook is not None:
            await hook(method, params, None, lambda p: self._send_notification(method, p))
            return
        await self._send_notification(method, params)

    async def _send_notification(self, method: str, params: Any) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        data = codec.encode(msg)
        bw = self._below_water
        while bw is not None and not bw.is_set() and not self._closing:
            await bw.wait()
        self._check_open()
        self.stats["notifications_sent"] += 1
        self._enqueue(data)

    async def batch(self, items: list[tuple[str, Any, bool]], *, timeout: float | None = _DEFAULT) -> list[Any]:
        """Send ``(method, params, is_notification)`` items as one batch.

        Returns one entry per item, in order: the result, the :class:`RPCError` the other side
        answered, or None for a notification. Only where ``profile.batches_allowed()``.
        Raises :class:`RequestTimeout` / :class:`ConnectionClosed` like :meth:`request`.
        """
        if not self.profile.batches_allowed():
            raise ValueError(f"profile {self.profile.name} does not allow batches")
        if not items:
            raise ValueError("a batch needs at least one item")
        self._check_open()
        if timeout is _DEFAULT:
            timeout = self.default_timeout
        if self.max_timeout is not None and (timeout is None or timeout > self.max_timeout):
            timeout = self.max_timeout
        loop = asyncio.get_running_loop()
        wire: list[dict[str, Any]] = []
        keys: list[tuple[type, Any] | None] = []
        k: tuple[type, Any] | None
        for method, params, is_note in items:
            m: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
            if params is not None:
                m["params"] = params
            if is_note:
                keys.append(None)
            else:
                k = (int, self._new_id())
                m["id"] = k[1]
                keys.append(k)
            wire.append(m)
        data = codec.encode(wire)
        bw = self._below_water
        while bw is not None and not bw.is_set() and not self._closing:
            await bw.wait()
        self._check_open()
        now = loop.time()
        recs: list[_Out | None] = []
        for (method, _p, _n), k in zip(items, keys, strict=True):
            if k is None:
                recs.append(None)
                continue
            rec = _Out(k[1], method, loop.create_future(), now)
            if timeout is not None:
                rec.timeout = timeout
                rec.deadline = now + timeout
                self._arm(rec.deadline)
            self._pending[k] = rec
            recs.append(rec)
        self.stats["requests_sent"] += sum(1 for k in keys if k is not None)
        self._enqueue(data)
        futs = [r.future for r in recs if r is not None]
        try:
            if futs:
                await asyncio.wait(futs)
        except asyncio.CancelledError:
            for k, r in zip(keys, recs, strict=True):
                if k is not None and r is not None and self._pending.pop(k, None) is r:
                    self._abandon(k)
                    self._send_cancel(r.id, "cancelled by the caller")
            raise
        finally:
            for k, r in zip(keys, recs, strict=True):
                if k is not None and self._pending.get(k) is r:
                    del self._pending[k]
        out: list[Any] = []
        failure: BaseException | None = None
        for r in recs:
            if r is None:
                out.append(None)
                continue
            exc = r.future.exception()
            if isinstance(exc, RPCError):
                out.append(exc)
            elif exc is not None:
                failure = failure or exc
                out.append(None)
            else:
                out.append(r.future.result())
        if failure is not None:
            raise failure
        return out

    def pending(self) -> list[PendingCall]:
        """Outgoing requests waiting for a reply, oldest first, with their ages in seconds."""
        now = asyncio.get_running_loop().time()
        recs = sorted(self._pending.values(), key=lambda r: r.started)
        return [PendingCall(r.id, r.method, now - r.started, r.progress, r.total) for r in recs]

    # ----------------------------------------------------------- outgoing queue

    def _deliver_reply(self, origin: Origin, data: bytes | None) -> None:
        """A reply that goes to its request's origin (an HTTP POST), kept in order with what this
        peer sent before it: a handler's notifications still queued go first."""
        if data is not None and (self._outq or self._writing):
            self._outq.append((origin, data))
            w = self._writer_wake
            if w is not None:
                self._writer_wake = None
                if not w.done():
                    w.set_result(None)
            return
        origin.reply(data)

    def _enqueue(self, data: bytes) -> None:
        """Queue one message for the writer (sync: the runner calls it from callbacks)."""
        if self._writer is None or self._writer.done():
            return  # closed: nothing can be sent any more
        if self.on_enqueue is not None:
            self.on_enqueue(data)
        if not self._outq and not self._writing:
            # Nothing queued before it: hand it straight to a transport that can take it now
            # (no task switch to the writer). It says no when it needs the writer to wait
            # (flow control) or has broken; then the message is queued, and order is kept
            # because everything after it queues too until the writer has caught up.
            nowait = self._send_nowait
            if nowait is not None:
                try:
                    if nowait(data):
                        return
                except Exception:  # the writer's send reports the failure
                    pass
        self._outq.append(data)
        self._out_bytes += len(data)
        w = self._writer_wake
        if w is not None:
            self._writer_wake = None
            if not w.done():
                w.set_result(None)
        if not self._write_pressure and (len(self._outq) >= self.out_high_messages or self._out_bytes >= self.out_high_bytes):
            self._write_pressure = True
            if self._below_water is not None:
                self._below_water.clear()

    async def _write_loop(self) -> None:
        q = self._outq
        send = self.transport.send
        loop = asyncio.get_running_loop()
        try:
            while True:
                if not q:
                    self._writing = False
                    for f in self._flush_waiters:
                        if not f.done():
                            f.set_result(None)
                    self._flush_waiters.clear()
                    w: asyncio.Future[None] = loop.create_future()
                    self._writer_wake = w
                    await w
                    continue
                self._writing = True
                item = q.popleft()
                if type(item) is tuple:  # a reply to an origin, in its place in the order
                    item[0].reply(item[1])
                    continue
                assert type(item) is bytes
                data = item
                self._out_bytes -= len(data)
                await send(data)
                if self._write_pressure and len(q) <= self.out_high_messages // 2 and self._out_bytes <= self.out_high_bytes // 2:
                    self._write_pressure = False
                    if self._below_water is not None:
                        self._below_water.set()
                    self._schedule_release()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the transport broke: nothing more can be sent
            log.debug("%s: send failed: %r", self.name, exc)
            q.clear()
            self._out_bytes = 0
            self._connection_lost(f"connection lost while sending: {exc!r}", eof=False)
        finally:
            self._writing = False
            for f in self._flush_waiters:
                if not f.done():
                    f.set_result(None)
            self._flush_waiters.clear()

    async def _flush(self, timeout: float) -> bool:
        """Wait until the outgoing queue is written (True) or ``timeout`` passes (False)."""
        if not self._outq and not self._writing:
            return True
        if self._writer is None or self._writer.done():
            return False
        f: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._flush_waiters.append(f)
        try:
            await asyncio.wait_for(f, timeout)
        except TimeoutError:
            return False
        return not self._outq

    async def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued message has been handed to the transport."""
        return await self._flush(timeout)

    # ------------------------------------------------------------------ incoming

    def _make_context(self, call: Call) -> Context:
        _HANDLER_OF.set(self)  # runs inside the handler's task: marks calls it makes as nested
        return self.context_class(call.request_id, call.method, call.params, call.is_notification, self)

    async def _read_loop(self) -> None:
        """Pull mode: take frames from ``transport.receive()`` until it ends."""
        receive = self.transport.receive
        reason = "connection closed by the other side"
        burst = 0
        try:
            while True:
                rr = self._resume_reading
                if rr is not None and not rr.is_set():
                    await rr.wait()
                frame = await receive()
                if frame is None:
                    break
                burst += 1
                if burst >= 32:
                    # A transport with many frames ready never suspends: let the writer (and
                    # the handlers) run, or replies pile up and push us into backpressure.
                    burst = 0
                    await asyncio.sleep(0)
                self._feed(frame)  # the reader task runs in the peer's context already
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reason = f"connection lost: {exc!r}"
            log.debug("%s: receive failed: %r", self.name, exc)
        self._connection_lost(reason, eof=True)

    async def _wait_input(self, source: FrameSource) -> None:
        """Push mode: the transport delivers frames to :meth:`feed`; wait for the end of its input."""
        reason = "connection closed by the other side"
        try:
            await source.wait_input_done()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reason = f"connection lost: {exc!r}"
        self._connection_lost(reason, eof=True)

    def feed(self, frame: bytes | FrameTooLarge | BadHeader) -> None:
        """Handle one incoming frame now, in the context the peer was started in, whoever calls
        (a push transport is given :meth:`_feed` and that context, entered once per chunk; pull
        transports are read by the peer itself). Never raises."""
        self._context.run(self._feed, frame)

    def _feed(self, frame: bytes | FrameTooLarge | BadHeader) -> None:
        try:
            got: Any = read(frame, self.dispatcher.limits) if type(frame) is bytes else frame
            self._incoming(got, None)
        except Exception:  # a bug of ours must not stop the peer
            log.exception("%s: internal error while handling a message", self.name)

    def feed_envelope(self, got: Any, origin: Origin | None = None) -> None:
        """Handle a message read already (what :func:`sturdyrpc.envelope.read` returns), its reply
        going to ``origin`` (see :class:`sturdyrpc.runner.Origin`; None: this peer's transport)."""
        self._incoming(got, origin)

    def _incoming(self, got: Any, origin: Origin | None) -> None:
        profile = self.profile
        t = type(got)
        if t is Envelope:
            method = got.method
            if method is UNSET:  # a reply: taken whatever the pressure, so calls waiting on it can finish
                self._to_runner(got, origin, profile)
                return
            if got.id is UNSET and (method == profile.cancel_method or method == profile.progress_method):
                self._notice(method, got.params, profile)
                if origin is not None:
                    origin.reply(None)
                return
            if not (self._closing or self._runner_pressure or self._write_pressure or self._held):
                runner = self._runner  # the usual message, at once: _to_runner's step, without the call
                runner.profile = profile
                runner.feed_envelope(got, origin)
                return
        elif t is InvalidMessage and got.is_response:
            self._to_runner(got, origin, profile)
            return
        if self._closing:
            if t is Envelope and got.id is not UNSET:
                self._refuse(got.id, origin)
            elif origin is not None:
                origin.reply(None)  # a notification, batch or framing error while closing: nobody waits for it
            return
        if self._runner_pressure or self._write_pressure or self._held:
            self._hold(got, origin)
            return
        self._to_runner(got, origin, profile)

    def _to_runner(self, got: Any, origin: Origin | None, profile: Profile) -> None:
        runner = self._runner
        runner.profile = profile
        if type(got) is FrameTooLarge or type(got) is BadHeader:
            runner.feed(got)
        else:
            runner.feed_envelope(got, origin)

    def _notice(self, method: str, params: Any, profile: Profile) -> None:
        """A cancellation or progress notification: handled here, never by the dispatcher."""
        params = None if params is UNSET else params
        hook = self.notice_hook
        if hook is not None:
            try:
                hook(method, params, False)
            except Exception:  # instrumentation never stops a cancellation
                log.exception("%s: notice hook failed", self.name)
        if method == profile.cancel_method:
            self._on_cancel(profile.read_cancel(params))
        else:
            self._on_progress(profile, params)

    def _hold(self, got: Any, origin: Origin | None) -> None:
        self.stats["held_requests"] += 1
        t = type(got)
        # what is refused with an answer if closing comes first: a request, or a message that is
        # none (it would have been answered -32600), by the id it carries (null when unreadable)
        key = _key(got.id) if (t is Envelope and got.id is not UNSET) or t is InvalidMessage else None
        # a message with an origin keeps the context it arrived in (its HTTP request's principal
        # and headers); the others are released in the peer's own, as they arrived
        self._held.append((got, origin, key, None if origin is None else contextvars.copy_context()))
        if not self._full():
            self._schedule_release()
        if len(self._held) >= self._max_held:
            self._reading(False)  # bounded: stop reading until some are started

    def _reading(self, on: bool) -> None:
        source = self._source
        if source is not None:
            source.hold(not on)
        elif self._resume_reading is not None:
            if on:
                self._resume_reading.set()
            else:
                self._resume_reading.clear()

    def _refuse(self, id_: Any, origin: Origin | None) -> None:
        self.stats["refused_while_closing"] += 1
        reply = self.dispatcher.error_reply(ServerError("Connection closing", code=-32000), id_)
        if origin is not None:
            origin.reply(reply)
        else:
            self._enqueue(reply)

    def _refuse_held(self) -> None:
        held, self._held = self._held, deque()
        for _got, origin, key, _cv in held:
            if key is not None:
                self._refuse(key[1], origin)
            elif origin is not None:
                origin.reply(None)

    def _full(self) -> bool:
        """Whether a new incoming request must wait: the outgoing queue is above its high water,
        or no slot of the runner's admission is free (handlers parked on a call back to the
        other side have given theirs back, see :meth:`Runner.park`)."""
        return self._write_pressure or not self._runner.accepting

    def _on_runner_pressure(self, on: bool) -> None:
        self._runner_pressure = on
        if not on:
            self._schedule_release()

    def _schedule_release(self) -> None:
        if self._held and not self._release_scheduled:
            self._release_scheduled = True
            asyncio.get_running_loop().call_soon(self._release, context=self._context)

    def _release(self) -> None:
        """Start held requests, oldest first, while there is room."""
        self._release_scheduled = False
        profile = self.profile
        while self._held and not (self._full() or self._refusing):
            got, origin, _key_, cv = self._held.popleft()
            try:
                if cv is None:
                    self._to_runner(got, origin, profile)
                else:
                    cv.run(self._to_runner, got, origin, profile)
            except Exception:
                log.exception("%s: internal error while handling a message", self.name)
        if len(self._held) < self._max_held:
            self._reading(True)

    def _on_cancel(self, id_: Any) -> None:
        self.stats["cancels_received"] += 1
        if id_ is NO_CANCEL:
            self.stats["cancels_ignored"] += 1
            return
        if self._runner.cancel(id_):
            return
        key = _key(id_)
        for i, (_g, _origin, k, _cv) in enumerate(self._held):
            if k == key and k is not None and k[0] is key[0]:
                del self._held[i]  # not started yet: it never runs and is never answered
                return
        self.stats["cancels_ignored"] += 1  # unknown or finished: ignored, as the protocols say

    def _on_progress(self, profile: Profile, params: Any) -> None:
        self.stats["progress_received"] += 1
        p = profile.read_progress(params)
        if p is None:
            self.stats["progress_ignored"] += 1
            return
        token, progress, total, message = p
        rec = self._pending.get(_key(token))
        if rec is None or rec.on_progress is None or rec.future.done():
            self.stats["progress_ignored"] += 1
            return
        if rec.progress is not None and not progress > rec.progress:
            self.stats["progress_ignored"] += 1  # progress must increase; a stale one is dropped
            return
        rec.progress = progress
        rec.total = total
        if rec.reset_on_progress and rec.timeout is not None:
            nd = asyncio.get_running_loop().time() + rec.timeout
            if rec.hard_deadline is not None and nd > rec.hard_deadline:
                nd = rec.hard_deadline
            rec.deadline = nd  # later than before: the shared timer finds it on a later scan
        try:
            res = rec.on_progress(progress, total, message)
        except Exception:
            log.exception("%s: progress callback failed", self.name)
            return
        if inspect.isawaitable(res):
            # Never awaited by the reader; chained so callbacks run in arrival order.
            prev = rec.progress_task
            task = asyncio.get_running_loop().create_task(_after(prev, res))
            rec.progress_task = task
            self._bg.add(task)
            task.add_done_callback(self._bg.discard)

    def _on_response(self, msg: Message | InvalidMessage) -> None:
        t = type(msg)
        if t is Response or t is ErrorResponse:
            id_ = msg.id  # type: ignore[union-attr]
            key = (type(id_), id_)
            rec = self._pending.pop(key, None)
            if rec is None:
                self._stray(key, "reply")
                if id_ is None and t is ErrorResponse and self.on_error_without_id is not None:
                    try:
                        self.on_error_without_id(msg.error)  # type: ignore[union-attr]
                    except Exception:
                        log.exception("%s: on_error_without_id failed", self.name)
                return
            self.stats["replies"] += 1
            fut = rec.future
            if not fut.done():
                if t is Response:
                    fut.set_result(msg.result)  # type: ignore[union-attr]
                else:
                    fut.set_exception(msg.error)  # type: ignore[union-attr]
            return
        assert isinstance(msg, InvalidMessage)
        self.stats["malformed_replies"] += 1
        id_ = msg.id
        key = (type(id_), id_)
        rec = self._pending.pop(key, None) if id_ is not None else None
        if rec is None:
            log.warning("%s: malformed reply ignored: %s", self.name, msg.reason)
            return
        # The id names a call we made: fail it now rather than let it wait for a timeout.
        log.warning("%s: malformed reply to %r: %s", self.name, id_, msg.reason)
        if not rec.future.done():
            rec.future.set_exception(InvalidReply("Invalid reply", {"reason": msg.reason}))

    def _stray(self, key: tuple[type, Any], what: str) -> None:
        id_ = key[1]
        if key in self._abandoned:
            self.stats["late_replies"] += 1
            log.debug("%s: late %s to %r (timed out or cancelled) ignored", self.name, what, id_)
        elif (key[0] is int and 0 < id_ <= self._next_id) or key in self._user_ids:
            self.stats["duplicate_replies"] += 1
            log.warning("%s: duplicate %s to %r ignored", self.name, what, id_)
        else:
            self.stats["unmatched_replies"] += 1
            log.warning("%s: %s to unknown id %r ignored", self.name, what, id_)

    # ------------------------------------------------------------------ introspection

    @property
    def incoming_in_flight(self) -> int:
        """Incoming requests (and notifications) whose handlers are running."""
        return self._runner.in_flight

    def running_ids(self) -> list[Id]:
        """Ids of incoming requests being handled now."""
        return self._runner.running_ids()

    def is_running(self, id_: Id) -> bool:
        """Whether an incoming request with exactly this id (type and value) is being handled."""
        return self._runner.is_running(id_)

    def accepts_id(self, id_: Id) -> bool:
        """Whether a new incoming request with id ``id_`` would not be refused now: the peer is
        not closing and no incoming request with exactly this id (type and value) is being
        handled. ``not is_closing and not is_running(id_)`` in one call."""
        return not self._closing and not self._runner.is_running(id_)

    def __repr__(self) -> str:
        state = "closed" if self._closed.is_set() else "closing" if self._closing else "open"
        return f"<Peer {self.name} {state} pending={len(self._pending)} running={self._runner.in_flight}>"


async def _after(prev: asyncio.Task[None] | None, aw: Awaitable[None]) -> None:
    if prev is not None and not prev.done():
        try:
            await asyncio.shield(prev)
        except BaseException:
            pass
    try:
        await aw
    except Exception:
        log.exception("progress callback failed")
