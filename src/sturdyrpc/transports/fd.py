"""Reading and writing raw file descriptors on the event loop (the I/O under the stdio transport
and the proxies).

Pipes, sockets and ttys are watched by the loop; regular files and character devices the
loop cannot poll (``/dev/null``) are read by a thread and written with blocking writes.

The portable path (:func:`sturdyrpc.portable.portable`): where the loop cannot watch pipes
(Windows' proactor loop has no ``add_reader``), or when ``STURDYRPC_PORTABLE_STDIO=1`` forces it
(so that the tests run it on Linux too), a thread reads with blocking reads and another writes with blocking writes; the
writer reports backpressure past :data:`HIGH_WATER` queued bytes, as the loop's pipe transport does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import threading
from collections import deque
from collections.abc import Callable

from ..portable import portable

__all__ = ["FdReader", "FdWriter", "READ_SIZE", "HIGH_WATER"]

log = logging.getLogger("sturdyrpc")

#: The portable writer reports backpressure past this many queued bytes (asyncio's pipe default).
HIGH_WATER = 64 * 1024


def _set_blocking(fd: int) -> None:
    # The threads' reads and writes block; a descriptor left non-blocking by someone else would
    # raise BlockingIOError instead (Windows has no such flag on pipes before 3.12).
    try:
        os.set_blocking(fd, True)
    except (OSError, AttributeError):
        pass


def _pollable(fd: int) -> bool:
    """Whether the event loop can watch ``fd``: pipes, sockets and ttys (not files or /dev/null)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


#: Bytes asked for per read: below glibc's mmap threshold (128 KiB), so each chunk comes from the
#: heap. asyncio's pipe transport asks for 256 KiB, which maps and unmaps memory on every read
#: (about 10% of the MCP stdio server's time, bench_mcp).
READ_SIZE = 65536


class FdReader:
    """Reads a file descriptor on the loop (pipes, sockets, ttys) or, for regular files, in a thread.

    ``on_data(bytes)`` gets each chunk as it is read (at most :data:`READ_SIZE` bytes);
    ``on_eof()`` is called at the end, after a read error, or after :meth:`close` (maybe more
    than once).
    """

    def __init__(self, fd: int, on_data: Callable[[bytes], None], on_eof: Callable[[], None]) -> None:
        self.fd = fd
        self.on_data = on_data
        self.on_eof = on_eof
        self._loop: asyncio.AbstractEventLoop | None = None  # set while the loop watches fd
        self._watching = False
        self._paused = False
        self._closed = False
        self._running = threading.Event()  # the reading thread waits while it is clear
        self._running.set()
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None  # the loop the thread hands data to
        self._delivered = threading.Event()  # the thread's last chunk was handled on the loop

    @property
    def mode(self) -> str:
        """``"loop"`` (watched by the event loop), ``"thread"`` (blocking reads in a thread), or
        ``""`` before :meth:`start`."""
        return "loop" if self._loop is not None else "thread" if self._thread is not None else ""

    async def start(self) -> None:
        """Start reading."""
        loop = asyncio.get_running_loop()
        if not portable() and _pollable(self.fd):
            try:
                os.set_blocking(self.fd, False)
                loop.add_reader(self.fd, self._read_ready)
            except (ValueError, OSError, NotImplementedError):
                _set_blocking(self.fd)  # the thread below reads with blocking reads
            else:
                self._loop = loop
                self._watching = True
                return
        else:
            _set_blocking(self.fd)
        # asyncio accepts any character device, but epoll refuses /dev/null and the like: a
        # thread reads those (and regular files, and every fd on the portable path) with
        # blocking reads.
        self._thread_loop = loop
        self._thread = threading.Thread(target=self._read_thread, args=(loop,), daemon=True, name="sturdyrpc-stdin")
        self._thread.start()

    def _read_ready(self) -> None:
        try:
            data = os.read(self.fd, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            log.warning("reading fd %d failed (%s): treated as the end of the input", self.fd, exc)
            data = b""
        if data:
            self.on_data(data)
            return
        self._stop_watching()
        self._closed = True
        assert self._loop is not None
        self._loop.call_soon(self.on_eof)

    def _deliver(self, data: bytes) -> None:
        # On the loop: a chunk the thread read before close() is dropped, as the loop's path drops it.
        try:
            if not self._closed:
                self.on_data(data)
        finally:
            self._delivered.set()

    def _stop_watching(self) -> None:
        if self._watching:
            self._watching = False
            assert self._loop is not None
            self._loop.remove_reader(self.fd)

    def _read_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            while not self._closed:
                self._running.wait()
                data = os.read(self.fd, READ_SIZE)
                if not data:
                    break
                # One chunk at a time, as on the loop's path: the next read waits until this one
                # was handled, so a pause() it caused stops reading at once (bounded read-ahead).
                self._delivered.clear()
                loop.call_soon_threadsafe(self._deliver, data)
                while not self._delivered.wait(0.5):
                    if self._closed or loop.is_closed():
                        return
        except (OSError, RuntimeError):
            pass  # RuntimeError: the loop was closed under us
        finally:
            try:
                loop.call_soon_threadsafe(self.on_eof)
            except RuntimeError:
                pass

    def pause(self) -> None:
        """Stop reading until :meth:`resume` (the writer on the other side is held by the pipe)."""
        if self._loop is not None:
            if not self._closed and not self._paused:
                self._paused = True
                self._stop_watching()
        else:
            self._running.clear()

    def resume(self) -> None:
        if self._loop is not None:
            if not self._closed and self._paused:
                self._paused = False
                self._watching = True
                self._loop.add_reader(self.fd, self._read_ready)
        else:
            self._running.set()

    def close(self) -> None:
        """Stop reading; ``on_eof`` follows (on the loop's next turn). A thread blocked in a read
        stays blocked until the read returns (it is a daemon thread): what it reads is dropped."""
        if self._closed:
            return
        if self._loop is not None:
            self._closed = True
            self._stop_watching()
            self._loop.call_soon(self.on_eof)
        elif self._thread_loop is not None:
            self._closed = True
            self._running.set()
            self._delivered.set()
            self._thread_loop.call_soon(self.on_eof)


class _WriteProtocol(asyncio.Protocol):
    def __init__(self, owner: FdWriter) -> None:
        self.owner = owner

    def pause_writing(self) -> None:
        self.owner._set_paused(True)

    def resume_writing(self) -> None:
        self.owner._set_paused(False)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner._lost()


class _WriterThread:
    """The portable writer: blocking writes in a thread, in order, with backpressure reported on
    the loop past :data:`HIGH_WATER` queued bytes and lifted below a quarter of it."""

    def __init__(self, fd: int, loop: asyncio.AbstractEventLoop, on_pause: Callable[[bool], None], on_lost: Callable[[], None]) -> None:
        self.fd = fd
        self.loop = loop
        self.on_pause = on_pause
        self.on_lost = on_lost
        self.queued = 0  # bytes handed over and not yet written (under the condition's lock)
        self.paused = False  # touched on the loop only
        self._chunks: deque[bytes] = deque()
        self._closing = False
        self._cond = threading.Condition()
        threading.Thread(target=self._run, daemon=True, name="sturdyrpc-stdout").start()

    def write(self, data: bytes) -> None:
        with self._cond:
            self._chunks.append(data)
            self.queued += len(data)
            queued = self.queued
            self._cond.notify()
        if queued > HIGH_WATER and not self.paused:
            self.paused = True
            self.on_pause(True)

    def close(self) -> None:
        """Write what is queued, then stop (``on_lost`` follows on the loop)."""
        with self._cond:
            self._closing = True
            self._cond.notify()

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._chunks and not self._closing:
                        self._cond.wait()
                    if not self._chunks:
                        return
                    data = self._chunks.popleft()
                view = memoryview(data)
                while view:
                    view = view[os.write(self.fd, view) :]
                with self._cond:
                    self.queued -= len(data)
                    drained = self.queued <= HIGH_WATER // 4
                if drained:
                    self.loop.call_soon_threadsafe(self._maybe_resume)
        except OSError:
            pass  # the reader went away: as a pipe transport's connection_lost
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                self.loop.call_soon_threadsafe(self.on_lost)

    def _maybe_resume(self) -> None:
        if self.paused and self.queued <= HIGH_WATER // 4:
            self.paused = False
            self.on_pause(False)


class FdWriter:
    """Writes to a file descriptor through the loop when it can, else with plain blocking writes.

    Writes made during one turn of the event loop are joined and leave in one system call at
    its end (typically the replies to all the requests of one read chunk). ``on_pause(True)``
    is called when the pipe's buffer is above its high-water mark, ``on_pause(False)`` when it
    drained (or broke).
    """

    def __init__(self, fd: int, on_pause: Callable[[bool], None] | None = None) -> None:
        self.fd = fd
        self.on_pause = on_pause
        #: True once the other side stopped reading (or this writer was closed): writes are dropped.
        self.broken = False
        self._transport: asyncio.WriteTransport | None = None
        self._thread: _WriterThread | None = None  # the portable path
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[bytes] = []
        self._scheduled = False  # a flush at the end of this loop turn is on its way
        self._done: asyncio.Event | None = None  # set once everything written has left, after close()

    @property
    def mode(self) -> str:
        """``"loop"`` (the loop's pipe transport), ``"thread"`` (the portable writer thread),
        ``"blocking"`` (plain blocking writes: regular files, or before :meth:`start`)."""
        return "loop" if self._transport is not None else "thread" if self._thread is not None else "blocking"

    async def start(self) -> None:
        """Attach to the running loop (until then, and for regular files, writes block)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._done = asyncio.Event()
        if portable():
            _set_blocking(self.fd)
            self._thread = _WriterThread(self.fd, loop, self._set_paused, self._lost)
            return
        file = os.fdopen(self.fd, "wb", buffering=0, closefd=False)
        try:
            self._transport, _ = await loop.connect_write_pipe(lambda: _WriteProtocol(self), file)
        except (ValueError, OSError):
            self._transport = None

    def _set_paused(self, paused: bool) -> None:
        if self.on_pause is not None:
            self.on_pause(paused)

    def _lost(self) -> None:
        self.broken = True
        if self._done is not None:
            self._done.set()
        self._set_paused(False)

    def write(self, data: bytes) -> None:
        """Queue ``data``; it is written, in order, at the end of this turn of the event loop
        (or at an earlier :meth:`flush_now`)."""
        self._pending.append(data)
        if not self._scheduled:
            self._schedule()

    def write_line(self, payload: bytes) -> None:
        """:meth:`write` ``payload`` and a newline (without copying ``payload``)."""
        pending = self._pending
        pending.append(payload)
        pending.append(b"\n")
        if not self._scheduled:
            self._schedule()

    def write_lines(self, payloads: list[bytes]) -> None:
        """:meth:`write_line` each of ``payloads``, in order (one join for all of them)."""
        if payloads:
            pending = self._pending
            pending.append(b"\n".join(payloads))
            pending.append(b"\n")
            if not self._scheduled:
                self._schedule()

    def _schedule(self) -> None:
        if self._loop is None:
            self.flush_now()  # not started: nothing joins writes yet
            return
        self._scheduled = True
        self._loop.call_soon(self._end_of_turn)

    def _end_of_turn(self) -> None:
        self._scheduled = False
        self.flush_now()

    def begin_batch(self) -> bool:
        """Writes from now on wait for :meth:`end_batch` (a caller that flushes by itself spares
        the end-of-turn callback). True if this call started the batch: pass it to end_batch."""
        if self._scheduled or self._loop is None:
            return False
        self._scheduled = True
        return True

    def end_batch(self, started: bool) -> None:
        """Write what the batch begun by :meth:`begin_batch` collected (if ``started``)."""
        if started:
            self._scheduled = False
            self.flush_now()

    def write_now(self, data: bytes) -> None:
        """Hand ``data`` to the system now, after anything queued (no end-of-turn callback)."""
        if self._pending:
            self._pending.append(data)
            self.flush_now()
        else:
            self._write_now(data)

    def flush_now(self) -> None:
        """Hand what was written so far to the system now (one ``write(2)`` for all of it)."""
        pending = self._pending
        if not pending:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        pending.clear()
        self._write_now(data)

    def _write_now(self, data: bytes) -> None:
        if self.broken:
            return
        t = self._transport
        if t is not None:
            if t.is_closing():
                self.broken = True
                return
            t.write(data)
            return
        if self._thread is not None:
            self._thread.write(data)
            return
        try:
            view = memoryview(data)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
        except OSError:
            self.broken = True

    def close(self) -> None:
        """Stop taking writes; what was written still leaves (see :meth:`wait_closed`)."""
        self.flush_now()
        t = self._transport
        if t is not None:
            if not t.is_closing():
                t.close()  # asyncio keeps writing its buffer, then reports connection_lost
        elif self._thread is not None:
            self._thread.close()  # the thread writes its queue, then reports the end (_lost)
        elif self._done is not None:
            self._done.set()
        self.broken = True

    async def wait_closed(self) -> None:
        """After :meth:`close`: wait until everything written has left the process (or the
        other side stopped reading). No deadline: a reader that is slow holds us back."""
        if self._done is not None:
            await self._done.wait()
