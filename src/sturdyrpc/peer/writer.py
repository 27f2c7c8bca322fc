"""The writing side of a peer: its outgoing queue, the task that writes it, the high water that
makes senders wait, flushing, and the replies that go to an origin in their place in the order."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from ..flag import Flag
from ..runner import Origin
from .protocols import MessageTransport, NowaitSender, Settings

log = logging.getLogger("sturdyrpc.peer")

#: The queue of a writer that has queued nothing yet: shared, always empty (nothing is added to it).
_NOTHING_QUEUED: deque[bytes | tuple[Origin, bytes]] = deque(maxlen=0)


class Writer:
    """Writes one peer's messages to its transport, in the order they were queued.

    ``on_pressure(True)`` is called when the queue rises to its high water (the peer's
    ``out_high_messages``/``out_high_bytes``), ``on_pressure(False)`` when it is back to half of it;
    :attr:`room` is set while it is below. ``on_broken(reason)`` is called once when the transport
    fails to send: nothing more can be sent.
    """

    __slots__ = (
        "room",
        "_transport",
        "_settings",
        "_send_nowait",
        "_on_pressure",
        "_on_broken",
        "_q",
        "_bytes",
        "_wake",
        "_writing",
        "_flush_waiters",
        "_pressure",
        "_task",
        "_open",
        "_name",
    )

    def __init__(
        self,
        transport: MessageTransport,
        settings: Settings,
        *,
        on_pressure: Callable[[bool], None],
        on_broken: Callable[[str], None],
    ) -> None:
        self._transport = transport
        self._settings = settings
        #: ``transport.send_nowait(data) -> bool`` when the transport has one (optional): takes a
        #: message at once (True) or declines (False: it must go through ``send``).
        self._send_nowait: Callable[[bytes], bool] | None = transport.send_nowait if isinstance(transport, NowaitSender) else None
        self._on_pressure = on_pressure
        self._on_broken = on_broken
        # what the writer sends, in order; a (origin, reply) pair is handed to its origin in its place
        self._q: deque[bytes | tuple[Origin, bytes]] = _NOTHING_QUEUED  # made on first use (see _queue)
        self._bytes = 0
        self._wake: asyncio.Future[None] | None = None
        self._writing = False
        self._flush_waiters: list[asyncio.Future[None]] = []
        self._pressure = False
        #: Set while the queue is below its high water: senders wait for it.
        self.room = Flag(True)
        #: Made when the first message has to wait in the queue: a peer whose transport takes
        #: every message at once (an HTTP session, mostly) holds no task while it is idle.
        self._task: asyncio.Task[None] | None = None
        #: Started and not broken or cancelled: what is queued will be written. Kept by start,
        #: the task's end and cancel, so queuing a message tests one flag.
        self._open = False
        self._name = "peer"

    def start(self, name: str) -> None:
        """Start writing (``name``: the peer's, for the writer task when one is needed)."""
        self._name = name
        self._open = True

    def _start_task(self) -> None:
        self._task = task = asyncio.get_running_loop().create_task(self._write_loop(), name=f"{self._name}-writer")
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        # also for a task cancelled before its first step (its body, and so its finally, never runs)
        if task is self._task:
            self._open = False

    def cancel(self) -> None:
        """Stop writing (the peer is closed): cancel the writer task."""
        t = self._task
        if t is None:
            self._open = False
        elif t is not asyncio.current_task():
            self._open = False  # at once: the task sees its cancellation on a later turn
            t.cancel()

    def wake_all(self) -> None:
        """Release whoever waits on the writer (senders, flushes): the peer is closed."""
        self.room.set()
        self._settle_flushes()

    def deliver_reply(self, origin: Origin, data: bytes | None) -> None:
        """A reply that goes to its request's origin (an HTTP POST), kept in order with what this
        peer sent before it: a handler's notifications still queued go first."""
        if data is not None and (self._q or self._writing):
            self._queue().append((origin, data))  # behind what waits: the task is running
            w = self._wake
            if w is not None:
                self._wake = None
                if not w.done():
                    w.set_result(None)
            return
        origin.reply(data)

    def enqueue(self, data: bytes) -> None:
        """Queue one message for the writer (sync: the runner calls it from callbacks)."""
        if not self._open:
            return  # closed: nothing can be sent any more
        on_enqueue = self._settings.on_enqueue
        if on_enqueue is not None:
            on_enqueue(data)
        if not self._q and not self._writing:
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
        q = self._q
        if q is _NOTHING_QUEUED:
            q = self._q = deque()  # (_queue's step, without the call: every message queued passes here)
        q.append(data)
        if self._task is None:
            self._start_task()
        self._bytes += len(data)
        w = self._wake
        if w is not None:
            self._wake = None
            if not w.done():
                w.set_result(None)
        if not self._pressure:
            s = self._settings
            if len(q) >= s.out_high_messages or self._bytes >= s.out_high_bytes:
                self._pressure = True
                self.room.clear()
                self._on_pressure(True)

    def _queue(self) -> deque[bytes | tuple[Origin, bytes]]:
        q = self._q
        if q is _NOTHING_QUEUED:
            # An idle peer's writer holds no deque (760 bytes: its first block) until it queues.
            q = self._q = deque()
        return q

    async def _write_loop(self) -> None:
        send = self._transport.send
        settings = self._settings
        loop = asyncio.get_running_loop()
        try:
            while True:
                q = self._q
                if not q:
                    self._writing = False
                    self._settle_flushes()
                    w: asyncio.Future[None] = loop.create_future()
                    self._wake = w
                    await w
                    continue
                self._writing = True
                item = q.popleft()
                if type(item) is tuple:  # a reply to an origin, in its place in the order
                    item[0].reply(item[1])
                    continue
                assert type(item) is bytes
                data = item
                self._bytes -= len(data)
                await send(data)
                if self._pressure and len(q) <= settings.out_high_messages // 2 and self._bytes <= settings.out_high_bytes // 2:
                    self._pressure = False
                    self.room.set()
                    self._on_pressure(False)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the transport broke: nothing more can be sent
            log.debug("%s: send failed: %r", settings.name, exc)
            self._q.clear()
            self._bytes = 0
            self._on_broken(f"connection lost while sending: {exc!r}")
        finally:
            self._open = False
            self._writing = False
            self._settle_flushes()

    def _settle_flushes(self) -> None:
        for f in self._flush_waiters:
            if not f.done():
                f.set_result(None)
        self._flush_waiters.clear()

    async def flush(self, timeout: float) -> bool:
        """Wait until the outgoing queue is written (True) or ``timeout`` passes (False)."""
        if not self._q and not self._writing:
            return True
        task = self._task
        if task is None or task.done():
            return False
        f: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._flush_waiters.append(f)
        try:
            await asyncio.wait_for(f, timeout)
        except TimeoutError:
            return False
        return not self._q
