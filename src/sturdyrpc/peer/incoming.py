"""The reading side of a peer: frames and messages in (read from the transport, pushed by it, or
read already by an HTTP session), cancellation and progress taken out before the dispatcher,
requests held while the runner or the outgoing queue is full and released in order, and refusal
while closing."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from ..dispatch import Dispatcher
from ..envelope import UNSET, Envelope, read
from ..errors import ServerError
from ..flag import Flag
from ..framing import BadHeader, FrameTooLarge
from ..messages import InvalidMessage
from ..profile import NO_CANCEL, Profile
from ..runner import Origin, Runner
from .protocols import FrameSource, MessageTransport, Settings, id_key

log = logging.getLogger("sturdyrpc.peer")

#: A request held back: what was read, its origin, the request's id key or None, the context it came in.
Held = tuple[Any, Origin | None, tuple[type, Any] | None, contextvars.Context | None]
#: The held requests of a peer that has held none yet: shared, always empty (nothing is added to it).
_NOTHING_HELD: deque[Held] = deque(maxlen=0)


class Incoming:
    """Feeds one peer's runner with what the other side sends.

    A pull transport is read by a task of its own (each frame to :meth:`feed_frame`); a
    :class:`~.protocols.FrameSource` pushes its frames to :meth:`feed_envelope`, where an HTTP
    session hands over what it read. Replies are taken whatever the pressure, so calls waiting on them can
    finish; progress for our calls goes to ``on_progress(profile, params)``; refusals are
    queued with ``enqueue``; ``on_end(reason)`` is called once the input has ended.
    :attr:`held` is read for introspection only.
    """

    def __init__(
        self,
        transport: MessageTransport,
        settings: Settings,
        stats: dict[str, int],
        runner: Runner,
        dispatcher: Dispatcher,
        *,
        max_held: int,
        enqueue: Callable[[bytes], None],
        on_progress: Callable[[Profile, Any], None],
        on_end: Callable[[str], None],
    ) -> None:
        self._transport = transport
        #: The transport when it pushes frames (:class:`FrameSource`): it is not read.
        self._source: FrameSource | None = transport if isinstance(transport, FrameSource) else None
        self._settings = settings
        self._stats = stats
        self._runner = runner
        self._dispatcher = dispatcher
        self._enqueue = enqueue
        self._on_progress = on_progress
        self._on_end = on_end
        #: (what was read, its origin, the request's id key or None, the context it came in), in order.
        self.held: deque[Held] = _NOTHING_HELD  # made on first use (see _hold)
        self._context: contextvars.Context | None = None  # the peer's, once started
        self._max_held = max(1, max_held)
        self._resume_reading: Flag | None = None
        self._release_scheduled = False
        self._closing = False
        self._refusing = False  # closing by our choice: requests still held are refused
        self._runner_pressure = False
        self._write_pressure = False
        # closing, or either pressure: no new request starts on arrival (with ``held``: the one test per message)
        self._blocked = False
        self._task: asyncio.Task[None] | None = None  # pull mode: the reader
        self._input_ended = False
        self._stopped_reading = False  # cancel() came: the end of a push transport's input is not told

    # ------------------------------------------------------------------ reading

    def start(self, context: contextvars.Context, name: str) -> None:
        """Start taking input: have a push transport deliver to :meth:`feed_envelope` in
        ``context``, or read a pull transport in a task (``name``: the peer's)."""
        loop = asyncio.get_running_loop()
        self._context = context
        self._resume_reading = Flag(True)
        source = self._source
        if source is not None:
            # the source logs what a frame raises (a bug of ours) and goes on with the next
            source.deliver(self.feed_envelope, context)
            # No task waits for the end: an idle connection (an HTTP session) holds none.
            source.when_input_done(self._source_ended, context)
        else:
            self._task = loop.create_task(self._read_loop(), name=f"{name}-reader")

    def input_open(self) -> bool:
        """Whether the input may still bring something (the reader has not ended)."""
        if self._source is not None:
            return self._context is not None and not self._input_ended and not self._stopped_reading
        t = self._task
        return t is not None and not t.done()

    def cancel(self) -> None:
        """Stop reading (the peer is closed)."""
        self._stopped_reading = True
        t = self._task
        if t is not None and t is not asyncio.current_task():
            t.cancel()

    def _source_ended(self) -> None:
        if self._input_ended or self._stopped_reading:
            return
        self._input_ended = True
        self._on_end("connection closed by the other side")

    async def _read_loop(self) -> None:
        """Pull mode: take frames from ``transport.receive()`` until it ends."""
        receive = self._transport.receive
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
                self.feed_frame(frame)  # the reader task runs in the peer's context already
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reason = f"connection lost: {exc!r}"
            log.debug("%s: receive failed: %r", self._settings.name, exc)
        self._on_end(reason)

    def _reading(self, on: bool) -> None:
        source = self._source
        if source is not None:
            source.hold(not on)
        elif self._resume_reading is not None:
            if on:
                self._resume_reading.set()
            else:
                self._resume_reading.clear()

    def resume(self) -> None:
        """Read again (the peer is closed: whoever waits on the input goes on to see it end)."""
        self._reading(True)

    # ------------------------------------------------------------------ messages in

    def feed_frame(self, frame: bytes | FrameTooLarge | BadHeader) -> None:
        """Handle one frame now (in the caller's context: the peer's). Never raises."""
        try:
            self.feed_envelope(frame)
        except Exception:  # a bug of ours must not stop the peer
            log.exception("%s: internal error while handling a message", self._settings.name)

    def feed_envelope(self, got: Any, origin: Origin | None = None) -> None:
        """Handle a frame (bytes, read here once, or a framing error) or a message read already
        (what :func:`~sturdyrpc.envelope.read` returns), its reply going to ``origin`` (None:
        the peer's transport). The one step between the transport and the runner: a push
        transport delivers its frames here (see :meth:`feed_frame` for the others)."""
        if type(got) is bytes:
            got = read(got, self._dispatcher.limits)
        t = type(got)
        if t is Envelope:
            method = got.method
            if method is UNSET:  # a reply: taken whatever the pressure, so calls waiting on it can finish
                self._to_runner(got, origin)
                return
            if got.id is UNSET:
                profile = self._settings.profile
                if method == profile.cancel_method or method == profile.progress_method:
                    self._notice(method, got.params, profile)
                    if origin is not None:
                        origin.reply(None)
                    return
            if not (self._blocked or self.held):
                self._runner.feed_envelope(got, origin)  # the usual message, at once: _to_runner's step, without the call
                return
        elif t is InvalidMessage and got.is_response:
            self._to_runner(got, origin)
            return
        if self._closing:
            if t is Envelope and got.id is not UNSET:
                self._refuse(got.id, origin)
            elif origin is not None:
                origin.reply(None)  # a notification, batch or framing error while closing: nobody waits for it
            return
        if self._blocked or self.held:  # not closing: under pressure, or others wait before it
            self._hold(got, origin)
            return
        self._to_runner(got, origin)

    def _to_runner(self, got: Any, origin: Origin | None) -> None:
        runner = self._runner  # its profile is the peer's (kept by Peer.profile)
        if type(got) is FrameTooLarge or type(got) is BadHeader:
            runner.feed(got)
        else:
            runner.feed_envelope(got, origin)

    def _notice(self, method: str, params: Any, profile: Profile) -> None:
        """A cancellation or progress notification: handled here, never by the dispatcher."""
        params = None if params is UNSET else params
        hook = self._settings.notice_hook
        if hook is not None:
            try:
                hook(method, params, False)
            except Exception:  # instrumentation never stops a cancellation
                log.exception("%s: notice hook failed", self._settings.name)
        if method == profile.cancel_method:
            self._on_cancel(profile.read_cancel(params))
        else:
            self._on_progress(profile, params)

    def _on_cancel(self, id_: Any) -> None:
        stats = self._stats
        stats["cancels_received"] += 1
        if id_ is NO_CANCEL:
            stats["cancels_ignored"] += 1
            return
        if self._runner.cancel(id_):
            return
        key = id_key(id_)
        for i, (_g, _origin, k, _cv) in enumerate(self.held):
            if k == key and k is not None and k[0] is key[0]:
                del self.held[i]  # not started yet: it never runs and is never answered
                return
        stats["cancels_ignored"] += 1  # unknown or finished: ignored, as the protocols say

    # ------------------------------------------------------------------ holding and releasing

    def _hold(self, got: Any, origin: Origin | None) -> None:
        self._stats["held_requests"] += 1
        t = type(got)
        # what is refused with an answer if closing comes first: a request, or a message that is
        # none (it would have been answered -32600), by the id it carries (null when unreadable)
        key = id_key(got.id) if (t is Envelope and got.id is not UNSET) or t is InvalidMessage else None
        # a message with an origin keeps the context it arrived in (its HTTP request's principal
        # and headers); the others are released in the peer's own, as they arrived
        held = self.held
        if held is _NOTHING_HELD:
            # An idle peer holds no deque (760 bytes: its first block) until it must hold a request.
            held = self.held = deque()
        held.append((got, origin, key, None if origin is None else contextvars.copy_context()))
        if not self._full():
            self.schedule_release()
        if len(held) >= self._max_held:
            self._reading(False)  # bounded: stop reading until some are started

    def _full(self) -> bool:
        """Whether a new incoming request must wait: the outgoing queue is above its high water,
        or no slot of the runner's admission is free (handlers parked on a call back to the
        other side have given theirs back, see :meth:`Runner.park`)."""
        return self._write_pressure or not self._runner.accepting

    def on_runner_pressure(self, on: bool) -> None:
        """The runner's admission is full (True) or has a free slot again (False)."""
        self._runner_pressure = on
        self._blocked = on or self._write_pressure or self._closing
        if not on:
            self.schedule_release()

    def on_write_pressure(self, on: bool) -> None:
        """The outgoing queue is above its high water (True) or back below (False)."""
        self._write_pressure = on
        self._blocked = on or self._runner_pressure or self._closing
        if not on:
            self.schedule_release()

    def schedule_release(self) -> None:
        """Start held requests soon (on the next turn of the loop), if there are any."""
        if self.held and not self._release_scheduled:
            self._release_scheduled = True
            asyncio.get_running_loop().call_soon(self._release, context=self._context)

    def _release(self) -> None:
        """Start held requests, oldest first, while there is room."""
        self._release_scheduled = False
        held = self.held
        while held and not (self._full() or self._refusing):
            got, origin, _key_, cv = held.popleft()
            try:
                if cv is None:
                    self._to_runner(got, origin)
                else:
                    cv.run(self._to_runner, got, origin)
            except Exception:
                log.exception("%s: internal error while handling a message", self._settings.name)
        if len(held) < self._max_held:
            self._reading(True)

    def start_held(self) -> bool:
        """Start the held requests there is room for now (the input has ended: they are still
        answered). False when none is held, or closing refuses them."""
        if not self.held or self._refusing:
            return False
        self._release()
        return True

    # ------------------------------------------------------------------ closing

    def stop(self) -> None:
        """The peer is closing: requests arriving from now on are refused (-32000)."""
        self._closing = True
        self._blocked = True

    def refuse_held(self) -> None:
        """Closing by our choice: refuse what is held now and what would be held later."""
        self._refusing = True
        held = list(self.held)
        self.held.clear()
        for _got, origin, key, _cv in held:
            if key is not None:
                self._refuse(key[1], origin)
            elif origin is not None:
                origin.reply(None)

    def _refuse(self, id_: Any, origin: Origin | None) -> None:
        self._stats["refused_while_closing"] += 1
        reply = self._dispatcher.error_reply(ServerError("Connection closing", code=-32000), id_)
        if origin is not None:
            origin.reply(reply)
        else:
            self._enqueue(reply)
