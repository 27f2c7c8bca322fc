"""The connection: :class:`Peer` composes its parts and runs its lifecycle (start, close, abort,
the end of the input); :class:`PeerContext` is what its handlers get.

The parts, one per direction (as vscode-jsonrpc splits reader, writer and connection):
:mod:`.incoming` feeds the runner with what the other side sends, :mod:`.outgoing` keeps the
calls this side makes until they settle, :mod:`.writer` writes the outgoing queue in order. They
talk through the callables given here and read the peer's settings (the attributes its user may
change at any time) as :class:`~.protocols.Settings`; none of them imports another or this module.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Any

from ..dispatch import Call, Context, Dispatcher
from ..errors import RPCError
from ..flag import Flag
from ..framing import BadHeader, FrameTooLarge
from ..messages import Id
from ..profile import JSONRPCProfile, Profile
from ..runner import Origin, Runner
from .incoming import Held, Incoming
from .outgoing import Outgoing, PendingCall, handler_of
from .protocols import MessageTransport, NoticeHook, ProgressCallback, SendHook
from .writer import Writer

log = logging.getLogger("sturdyrpc.peer")

_DEFAULT: Any = object()

_COUNTERS = (
    "requests_sent",
    "notifications_sent",
    "replies",
    "unmatched_replies",
    "duplicate_replies",
    "late_replies",
    "malformed_replies",
    "timeouts",
    "caller_cancels",
    "cancels_received",
    "cancels_ignored",
    "progress_received",
    "progress_ignored",
    "held_requests",
    "refused_while_closing",
)


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
        self._profile: Profile = profile if profile is not None else JSONRPCProfile()
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
        self.stats: dict[str, int] = dict.fromkeys(_COUNTERS, 0)
        self._compose(max_outgoing, max_held)
        self._context = contextvars.copy_context()  # made again when the peer starts
        # lifecycle
        self._started = False
        self._closing = False
        self._close_reason = "connection closed"
        self._closed = Flag()
        self._close_task: asyncio.Task[None] | None = None
        self._draining_eof = False  # closing because the input ended: no deadline until close()

    def _compose(self, max_outgoing: int, max_held: int) -> None:
        """Build the parts. Each is given the callables it talks through; where the part it
        talks to is built after it (they call each other), a method here passes the call on."""
        self._writer = writer = Writer(self.transport, self, on_pressure=self._on_write_pressure, on_broken=self._send_failed)
        self._outgoing = outgoing = Outgoing(
            self, self.stats, max_outgoing=max_outgoing, enqueue=writer.enqueue, room=writer.room, park=self._park, unpark=self._unpark)
        self._runner = runner = Runner(
            self.dispatcher,
            writer.enqueue,
            deliver=writer.deliver_reply,
            on_response=outgoing.on_response,
            on_pressure=self._on_runner_pressure,
            context_factory=self._make_context,
            profile=self._profile,
        )
        self._incoming = Incoming(
            self.transport, self, self.stats, runner, self.dispatcher,
            max_held=max_held, enqueue=writer.enqueue, on_progress=outgoing.on_progress, on_end=self._input_ended)
        #: ``feed_envelope(got, origin)``: handle a message read already (what
        #: :func:`sturdyrpc.envelope.read` returns), its reply going to ``origin`` (see
        #: :class:`sturdyrpc.runner.Origin`; None: this peer's transport). The incoming side's
        #: own method, bound once: an HTTP session calls it for every message.
        self.feed_envelope: Callable[[Any, Origin | None], None] = self._incoming.feed_envelope

    @property
    def profile(self) -> Profile:
        """The connection's protocol rules (may be replaced at any time: the next message follows them)."""
        return self._profile

    @profile.setter
    def profile(self, value: Profile) -> None:
        self._profile = value
        self._runner.profile = value  # the runner reads it for every message: kept here, not per message

    # ------------------------------------------------------------------ between the parts

    def _make_context(self, call: Call) -> Context:
        handler_of.set(self._outgoing)  # runs inside the handler's task: marks calls it makes as nested
        return self.context_class(call.request_id, call.method, call.params, call.is_notification, self)

    def _park(self, call: Call) -> None:
        self._runner.park(call)
        self._incoming.schedule_release()  # its slot is free: a held request may start

    def _unpark(self, call: Call) -> None:
        self._runner.unpark(call)

    def _on_runner_pressure(self, on: bool) -> None:
        self._incoming.on_runner_pressure(on)

    def _on_write_pressure(self, on: bool) -> None:
        self._incoming.on_write_pressure(on)

    def _send_failed(self, reason: str) -> None:
        self._connection_lost(reason, eof=False)

    def _input_ended(self, reason: str) -> None:
        self._connection_lost(reason, eof=True)

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
        # Everything incoming is handled in this context (what the protocol layer set before
        # starting the peer, e.g. the MCP session, is seen by every handler), whoever delivers it.
        self._context = contextvars.copy_context()
        self._outgoing.open()
        self._writer.start(self.name)
        self._incoming.start(self._context, self.name)

    async def __aenter__(self) -> Peer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def closed(self) -> Flag:
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
            self._begin_closing()
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
        self._incoming.refuse_held()
        self._runner.cancel_all()

    def abort(self, reason: str = "connection aborted") -> None:
        """Close at once without draining: every pending call fails with ``ConnectionClosed(reason)``."""
        self._begin_closing(reason)
        self._outgoing.fail_all(reason)
        self._runner.cancel_all()
        if self._close_task is None and self._started:
            self._close_task = asyncio.get_running_loop().create_task(self._shutdown(0.0, eof=True))

    def _begin_closing(self, reason: str | None = None) -> None:
        """From now on new calls fail (with ``reason`` when given) and new requests are refused."""
        if reason is not None:
            self._close_reason = reason
        self._closing = True
        self._outgoing.stop(self._close_reason)
        self._incoming.stop()

    async def _shutdown(self, deadline: float | None, eof: bool) -> None:
        """Close; ``deadline`` None (the end of the input) waits for every request to be answered."""
        loop = asyncio.get_running_loop()
        end = None if deadline is None else loop.time() + max(deadline, 0.0)
        self._begin_closing()
        if eof:
            # No reply can arrive any more: fail what waits for one now, not at the deadline.
            # Requests held back before the end are still served (the other side may be reading).
            self._outgoing.fail_all(self._close_reason)
            self._incoming.schedule_release()
        else:
            self._incoming.refuse_held()
        try:
            while True:
                remaining = None if end is None else end - loop.time()
                if remaining is not None and remaining <= 0 or not await self._runner.drain(remaining):
                    break
                if self._runner.in_flight:
                    continue  # held requests were started meanwhile
                if not self._incoming.start_held():  # requests held back before the end: start them now
                    break
            if end is not None:
                while self._outgoing.calls and loop.time() < end and self._incoming.input_open():
                    await asyncio.sleep(min(0.01, max(end - loop.time(), 0)))
            self._outgoing.fail_all(self._close_reason)
            self._incoming.refuse_held()
            self._runner.cancel_all()
            # After the end of the input the replies still go out, but a reader that never
            # reads them must not hold the process forever.
            await self._writer.flush(10.0 if end is None else max(end - loop.time(), 0.05))
        finally:
            self._outgoing.fail_all(self._close_reason)
            self._runner.cancel_all()
            self._runner.close()
            self._incoming.cancel()
            self._writer.cancel()
            self._outgoing.close()
            await self._close_transport()
            self._writer.wake_all()
            self._incoming.resume()
            self._closed.set()

    async def _close_transport(self) -> None:
        try:
            await asyncio.wait_for(self.transport.close(), 2.0)
        except Exception as exc:  # closing must not fail the closer
            log.debug("%s: transport close failed: %r", self.name, exc)

    def _connection_lost(self, reason: str, eof: bool = True) -> None:
        if self._close_task is not None:
            self._outgoing.fail_all(self._close_reason if self._closing else reason)
            return
        self._begin_closing(reason)
        self._outgoing.fail_all(reason)
        if not eof:
            self._runner.cancel_all()  # nothing can be sent: replies are pointless
        # The end of the input is no reason to drop work: every request that was running or held
        # back is answered (the deadline of close()/SIGTERM still applies if it comes meanwhile).
        self._draining_eof = eof
        self._close_task = asyncio.get_running_loop().create_task(self._shutdown(None if eof else 0.0, eof=True))

    # ------------------------------------------------------------------ outgoing

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
        out = self._outgoing
        out.check_open()
        if timeout is _DEFAULT:
            timeout = self.default_timeout
        if max_timeout is _DEFAULT:
            max_timeout = self.max_timeout
        if timeout is not None and max_timeout is not None and timeout > max_timeout:
            timeout = max_timeout
        elif timeout is None:
            timeout = max_timeout
        key = out.take_id(id)
        hook = self.send_hook
        if hook is not None:
            return await hook(method, params, key[1], lambda p: out.send_request(
                method, p, key, timeout, max_timeout, on_progress, reset_timeout_on_progress, send_cancel))
        return await out.send_request(method, params, key, timeout, max_timeout, on_progress, reset_timeout_on_progress, send_cancel)

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (waits while the outgoing queue is above its high water)."""
        out = self._outgoing
        out.check_open()
        hook = self.send_hook
        if hook is not None:
            await hook(method, params, None, lambda p: out.send_notification(method, p))
            return
        await out.send_notification(method, params)

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
        self._outgoing.check_open()
        if timeout is _DEFAULT:
            timeout = self.default_timeout
        if self.max_timeout is not None and (timeout is None or timeout > self.max_timeout):
            timeout = self.max_timeout
        return await self._outgoing.batch(items, timeout)

    def pending(self) -> list[PendingCall]:
        """Outgoing requests waiting for a reply, oldest first, with their ages in seconds."""
        return self._outgoing.snapshot()

    async def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued message has been handed to the transport."""
        return await self._writer.flush(timeout)

    # ------------------------------------------------------------------ incoming

    def feed(self, frame: bytes | FrameTooLarge | BadHeader) -> None:
        """Handle one incoming frame now, in the context the peer was started in, whoever calls
        (a push transport is given the incoming side's ``feed_envelope`` and that context, entered
        once per chunk; pull transports are read by the peer itself). Never raises."""
        self._context.run(self._incoming.feed_frame, frame)


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

    # The parts' tables under the names they had before the parts were split (debugging, tests).
    @property
    def _pending(self) -> dict[tuple[type, Any], Any]:
        return self._outgoing.calls

    @property
    def _abandoned(self) -> dict[tuple[type, Any], None]:
        return self._outgoing.abandoned

    @property
    def _user_ids(self) -> AbstractSet[tuple[type, Any]]:
        return self._outgoing.user_ids

    @property
    def _bg(self) -> AbstractSet[asyncio.Task[Any]]:
        return self._outgoing.background

    @property
    def _held(self) -> deque[Held]:
        return self._incoming.held

    def __repr__(self) -> str:
        state = "closed" if self._closed.is_set() else "closing" if self._closing else "open"
        return f"<Peer {self.name} {state} pending={len(self._outgoing.calls)} running={self._runner.in_flight}>"
