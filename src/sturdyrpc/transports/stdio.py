"""stdio: the one transport on this process's stdin/stdout, and the servers that use it.

:class:`StdioTransport` moves frames between two file descriptors and whoever consumes them:

- a :class:`~sturdyrpc.peer.Peer` pulls messages with ``receive()`` and writes with ``send()``
  (the plain two-way server, :func:`stdio_transport`, and the MCP server);
- :func:`serve_stdio` has them pushed (:meth:`StdioTransport.deliver`) straight into a
  :class:`~sturdyrpc.runner.Runner`, one frame at a time, and holds the rest back while the
  runner is full (:meth:`StdioTransport.hold`).

The framing (``"line"`` or ``"content-length"``) is chosen by argument and comes from
:mod:`sturdyrpc.framing`, so frames are bounded (``Limits.max_message_bytes``). In push mode a
frame is handed over on the reader's turn, so a request answered at once (an inline handler)
has its reply written in the same turn's one ``write(2)``.

Guarantees:

- Nothing but protocol reaches stdout: :func:`claim_stdout` moves the real stdout to a private
  descriptor and points fd 1 at stderr, so a stray ``print()`` (or a C library, or a child
  process) writes to stderr instead of corrupting the stream.
- Backpressure both ways: reading pauses while frames wait (``max_buffered``), while the
  consumer is held, and while stdout cannot take more; nothing is buffered without bound.
- Replies written during one turn of the event loop leave in one ``write(2)``.
- stdin EOF: every frame read before it is delivered (a last line without its newline too),
  requests still running finish, and every reply is flushed before the server returns; no
  deadline applies. SIGTERM/SIGINT (:func:`run_until_signalled`): running requests are
  cancelled and the server returns promptly.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import signal
import sys
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from ..dispatch import Dispatcher
from ..execute import shared_pool
from ..flag import Flag
from ..framing import BadHeader, ContentLengthFramer, FrameTooLarge, LineFramer, encode_content_length
from ..limits import DEFAULT_LIMITS
from ..runner import Runner
from .fd import FdReader, FdWriter
from .loopwatch import DEFAULT_STALL_WARNING, LoopWatch

__all__ = [
    "Framing",
    "Frame",
    "StdioTransport",
    "stdio_transport",
    "serve_stdio",
    "run_stdio",
    "run_until_signalled",
    "hold_closed_stdout",
    "claim_stdout",
    "make_framer",
    "FdReader",
    "FdWriter",
]

log = logging.getLogger("sturdyrpc")

Framing = Literal["line", "content-length"]

Frame = bytes | FrameTooLarge | BadHeader

#: While a long chunk of requests is served, replies are written every this many frames (a
#: power of two): the client reads them, and writes its next requests, while we serve the rest,
#: instead of waiting for the whole chunk (bench_stdio, client and server on their own cores:
#: about 0.55x the bare loop without this, 0.75-0.9x with it; one more write(2) per 16 replies).
_FLUSH_EVERY = 16
_FLUSH_MASK = _FLUSH_EVERY - 1


def make_framer(framing: Framing, max_frame: int) -> LineFramer | ContentLengthFramer:
    """The bounded framer of :mod:`sturdyrpc.framing` for ``framing``."""
    if framing == "line":
        return LineFramer(max_frame)
    if framing == "content-length":
        return ContentLengthFramer(max_frame)
    raise ValueError(f"unknown framing {framing!r} (use 'line' or 'content-length')")


def claim_stdout() -> int:
    """Take fd 1 for the protocol and point fd 1 (and ``sys.stdout``) at stderr.

    Returns the new descriptor that reaches the real stdout.
    """
    try:
        sys.stdout.flush()
    except Exception:
        pass
    proto = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto


def hold_closed_stdout() -> None:
    """Started with fd 1 closed (``cmd >&-``): put /dev/null there before the event loop opens
    its own descriptors, or fd 1 would be one of them and be claimed as "stdout". Served as a
    client that closed stdout: requests run, replies go nowhere."""
    try:
        os.fstat(1)
    except OSError:
        fd = os.open(os.devnull, os.O_WRONLY)
        if fd != 1:
            os.dup2(fd, 1)
            os.close(fd)
        log.warning("stdout is closed: replies will be discarded")


# ------------------------------------------------------------------ the transport


class StdioTransport:
    """The server side of stdio: frames from ``stdin_fd``, messages to ``stdout_fd``.

    In push mode (:meth:`deliver`) each frame is handed to a callback as soon as it is read:
    a :class:`~sturdyrpc.runner.Runner` (:func:`serve_stdio`) or a :class:`~sturdyrpc.peer.Peer`
    (the transport is a :class:`~sturdyrpc.peer.FrameSource`); as a
    :class:`~sturdyrpc.peer.MessageTransport` it can also be read with ``receive()``.
    """

    def __init__(
        self,
        stdin_fd: int = 0,
        stdout_fd: int = 1,
        *,
        framing: Framing = "line",
        max_frame: int = DEFAULT_LIMITS.max_message_bytes,
        max_buffered: int = 64,
    ) -> None:
        self.framing = framing
        self._framer = make_framer(framing, max_frame)
        self._frames: deque[Frame] = deque()
        self._max_buffered = max_buffered
        self._consumer: Callable[[Frame], None] | None = None
        self._context: contextvars.Context | None = None  # where frames are handed over (push mode)
        self._held = False
        self._stopped = False  # held, or stdout paused: push mode delivers nothing
        self._pump_scheduled = False
        self._eof = False
        self._closed = False
        self._read_paused = False
        self._write_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._write_ok = asyncio.Event()
        self._write_ok.set()
        self._input_done = Flag()
        self._reader = FdReader(stdin_fd, self._on_data, self._on_eof)
        self._writer = FdWriter(stdout_fd, on_pause=self._on_write_pause)
        w = self._writer
        #: ``write(payload)``: queue one message (framed) for this turn's write without waiting.
        self.write: Callable[[bytes], None] = w.write_line if framing == "line" else (lambda payload: w.write(encode_content_length(payload)))
        #: ``write_many(payloads)``: :attr:`write` each of a list of messages, in order.
        self.write_many: Callable[[list[bytes]], None] = w.write_lines if framing == "line" else self._write_each

    def _write_each(self, payloads: list[bytes]) -> None:
        write = self.write
        for payload in payloads:
            write(payload)

    async def start(self) -> None:
        """Start reading stdin and writing stdout (on the running loop)."""
        await self._writer.start()
        await self._reader.start()
        # Which path each side took (the loop, or the portable threads): one line at -vv.
        log.debug("stdio: reading fd %d: %s; writing fd %d: %s", self._reader.fd, self._reader.mode, self._writer.fd, self._writer.mode)

    # ------------------------------------------------------------ input

    def deliver(self, on_frame: Callable[[Frame], None], context: contextvars.Context | None = None) -> None:
        """Push mode: hand every frame, in order, to ``on_frame`` as soon as it is read (or
        released by :meth:`hold`), instead of waiting for :meth:`receive`; in ``context`` when
        given (entered once per chunk read, not per frame), else the reader's own."""
        self._consumer = on_frame
        self._context = context
        self._schedule_pump()

    def hold(self, on: bool) -> None:
        """Push mode: while held, frames are not delivered; they wait in order (and reading
        pauses). Released, they are delivered again from the oldest. A runner's ``on_pressure``."""
        self._held = on
        self._stopped = on or self._write_paused
        if on:
            self._update_reading()
        else:
            self._schedule_pump()

    @property
    def input_done(self) -> bool:
        """Whether stdin has ended and every frame read before the end was delivered."""
        return self._input_done.is_set()

    async def wait_input_done(self) -> None:
        """Wait until stdin has ended and every frame read before the end was delivered."""
        await self._input_done.wait()

    def when_input_done(self, callback: Callable[[], object], context: contextvars.Context | None = None) -> None:
        """Call ``callback()`` from the loop once :meth:`wait_input_done` would return."""
        self._input_done.when_set(callback, context=context)

    def _on_data(self, data: bytes) -> None:
        frames = self._framer.feed(data)
        if frames:
            w = self._writer
            started = w.begin_batch()
            cv = self._context
            if cv is None:
                self._take(frames)
            else:
                cv.run(self._take, frames)
            w.end_batch(started)

    def _take(self, frames: list[Frame]) -> None:
        queued = self._frames
        if not queued:
            consumer = self._consumer
            if consumer is not None:
                i = self._hand_over(frames, consumer)
                if i == len(frames):
                    return
                frames = frames[i:]
        queued.extend(frames)
        self._update_reading()
        self._wake()

    def _hand_over(self, frames: list[Frame], consumer: Callable[[Frame], None]) -> int:
        """Deliver ``frames`` from the first; the index of the first one left waiting. Replies
        written meanwhile leave every ``_FLUSH_EVERY`` frames, handed to the system at once."""
        i = 0
        flush = self._writer.flush_now
        n = len(frames)
        mask = _FLUSH_MASK
        while i < n:
            if self._stopped:
                return i
            try:
                consumer(frames[i])
            except Exception:  # a bug of ours must not stop the server
                log.exception("internal error while handling a frame")
            i += 1
            if not i & mask:
                flush()
        return i

    def _schedule_pump(self) -> None:
        if self._consumer is not None and not self._pump_scheduled:
            self._pump_scheduled = True
            asyncio.get_running_loop().call_soon(self._pump, context=self._context)

    def _pump(self) -> None:
        self._pump_scheduled = False
        queued = self._frames
        consumer = self._consumer
        if consumer is None:
            return
        w = self._writer
        started = w.begin_batch()
        while queued and not self._stopped:
            frame = queued.popleft()
            try:
                consumer(frame)
            except Exception:
                log.exception("internal error while handling a frame")
        w.end_batch(started)
        self._update_reading()
        if self._eof and not queued:
            self._input_done.set()

    def _update_reading(self) -> None:
        n = len(self._frames)
        stop = self._write_paused or n >= self._max_buffered or (self._held and self._consumer is not None)
        if stop:
            if not self._read_paused:
                self._read_paused = True
                self._reader.pause()
        elif self._read_paused and n <= self._max_buffered // 2 and not self._eof:
            self._read_paused = False
            self._reader.resume()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _on_eof(self) -> None:
        if self._eof:
            return
        self._eof = True
        if self.framing == "line":
            frames = self._framer.feed(b"\n")  # a last line without its newline is still a message
            if frames:
                w = self._writer
                started = w.begin_batch()
                self._take(frames)
                w.end_batch(started)
        if not self._frames:
            self._input_done.set()
        self._wake()

    async def receive(self) -> Frame | None:
        """The next frame, or None once stdin has ended and every frame was received."""
        frames = self._frames
        while not frames:
            if self._eof or self._closed:
                self._input_done.set()
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        frame = frames.popleft()
        if self._read_paused:
            self._update_reading()
        return frame

    def receive_nowait(self) -> Frame | None:
        """A frame already read, or None when none waits now (the end of the stream is
        reported by :meth:`receive`)."""
        frames = self._frames
        if not frames:
            return None
        frame = frames.popleft()
        if self._read_paused:
            self._update_reading()
        return frame

    # ------------------------------------------------------------ output

    def _on_write_pause(self, paused: bool) -> None:
        self._write_paused = paused
        self._stopped = paused or self._held
        if paused:
            self._write_ok.clear()
        else:
            self._write_ok.set()
            self._schedule_pump()
        self._update_reading()

    async def send(self, data: bytes) -> None:
        """Write one message; waits while stdout cannot take more. ``BrokenPipeError`` once
        stdout is closed (by us or by the other side)."""
        w = self._writer
        if self._closed or w.broken:
            raise BrokenPipeError("stdout is closed")
        self.write(data)
        if not self._write_ok.is_set():
            await self._write_ok.wait()
        if w.broken and not self._closed:
            raise BrokenPipeError("stdout is closed")

    def send_nowait(self, data: bytes) -> bool:
        """Queue one message for this turn's write if stdout takes more now; False (nothing
        written) when it is paused (flow control) or broken: then use :meth:`send`."""
        if self._write_paused or self._closed or self._writer.broken:
            return False
        self.write(data)
        return True

    # ------------------------------------------------------------ closing

    def close_nowait(self) -> None:
        """Stop reading and writing at once; what was already written still leaves while the
        loop runs (see :meth:`wait_closed`). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._reader.close()
        self._writer.close()
        self._write_ok.set()
        self._wake()

    async def close(self) -> None:
        """Stop reading, and wait until everything written has left (or stdout broke)."""
        self.close_nowait()
        await self._writer.wait_closed()

    async def wait_closed(self) -> None:
        """After closing: wait, without a deadline, until every reply has left the process."""
        await self._writer.wait_closed()


async def stdio_transport(
    framing: Framing = "line",
    *,
    stdin_fd: int = 0,
    stdout_fd: int | None = None,
    protect_stdout: bool = True,
    max_frame: int = DEFAULT_LIMITS.max_message_bytes,
) -> StdioTransport:
    """A started :class:`StdioTransport` on this process's stdin/stdout, for servers.

    With ``protect_stdout`` (default) the real stdout is claimed for the protocol and fd 1
    (and ``sys.stdout``) is pointed at stderr, so stray ``print()`` calls cannot corrupt the
    stream. Typical use::

        async with Peer(await stdio_transport(), dispatcher) as peer:
            await peer.wait_closed()   # until the client closes stdin
    """
    if stdout_fd is None:
        stdout_fd = claim_stdout() if protect_stdout else 1
    t = StdioTransport(stdin_fd, stdout_fd, framing=framing, max_frame=max_frame)
    await t.start()
    return t


# ------------------------------------------------------------------ the plain server


async def serve_stdio(
    dispatcher: Dispatcher,
    *,
    framing: Framing = "line",
    stdin_fd: int = 0,
    stdout_fd: int | None = None,
    protect_stdout: bool = True,
    drain_timeout: float | None = None,
) -> None:
    """Serve ``dispatcher`` on stdin/stdout until stdin ends.

    ``stdout_fd`` defaults to the real stdout, claimed with :func:`claim_stdout` when
    ``protect_stdout`` is true. Frames are fed to the runner one at a time; at
    ``Limits.max_in_flight`` running requests the rest wait (in order) and stdin is not read
    until a request finishes. On EOF, every frame read is served, running requests finish
    (within ``drain_timeout`` seconds, unbounded by default) and their replies are flushed.
    """
    if stdout_fd is None:
        stdout_fd = claim_stdout() if protect_stdout else 1
    limits = dispatcher.limits
    transport = StdioTransport(stdin_fd, stdout_fd, framing=framing, max_frame=limits.max_message_bytes)
    runner = Runner(dispatcher, transport.write, executor=shared_pool(limits.max_threads), on_pressure=transport.hold)
    transport.deliver(runner.feed)
    await transport.start()
    try:
        await transport.wait_input_done()
        await runner.drain(drain_timeout)
    except asyncio.CancelledError:
        runner.cancel_all()
        runner.close()
        transport.close_nowait()
        raise
    runner.close()
    await transport.close()


def run_until_signalled(serve: Callable[[], Awaitable[None]], *, stall_warning: float | None = DEFAULT_STALL_WARNING) -> None:
    """Run ``serve()`` in a fresh event loop until it returns or SIGTERM/SIGINT arrives.

    A signal cancels the serving task, so running requests are cancelled and this returns
    promptly; stdio servers (plain and MCP) share it. ``stall_warning``: seconds the loop may be
    blocked before a warning is logged (:class:`~sturdyrpc.transports.loopwatch.LoopWatch`;
    None: no watch).
    """

    watch = LoopWatch(stall_warning) if stall_warning is not None else None

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, task.cancel)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        if watch is not None:
            watch.start()
        try:
            await serve()
        except asyncio.CancelledError:
            pass
        finally:
            if watch is not None:
                watch.stop()

    asyncio.run(main())


def run_stdio(dispatcher: Dispatcher, *, stall_warning: float | None = DEFAULT_STALL_WARNING, **kwargs: Any) -> int:
    """Run :func:`serve_stdio` in a fresh event loop; return the process exit code.

    SIGTERM and SIGINT stop it promptly (running requests are cancelled); exit code 0.
    ``stall_warning``: see :func:`run_until_signalled`.
    """
    if kwargs.get("stdout_fd") is None:
        hold_closed_stdout()
    run_until_signalled(lambda: serve_stdio(dispatcher, **kwargs), stall_warning=stall_warning)
    return 0
