"""Reading and writing raw file descriptors on the event loop (the I/O under the stdio transport).

Pipes, sockets and ttys are watched by the loop; regular files and character devices the
loop cannot poll (``/dev/null``) are read by a thread and written with blocking writes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import threading
from collections.abc import Callable

__all__ = ["FdReader", "FdWriter", "READ_SIZE"]

log = logging.getLogger("sturdyrpc")


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

    async def start(self) -> None:
        """Start reading."""
        loop = asyncio.get_running_loop()
        if _pollable(self.fd):
            try:
                os.set_blocking(self.fd, False)
                loop.add_reader(self.fd, self._read_ready)
            except (ValueError, OSError):
                try:
                    os.set_blocking(self.fd, True)  # the thread below reads with blocking reads
                except OSError:
                    pass
            else:
                self._loop = loop
                self._watching = True
                return
        # asyncio accepts any character device, but epoll refuses /dev/null and the like: a
        # thread reads those (and regular files) with blocking reads.
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

    def _stop_watching(self) -> None:
        if self._watching:
            self._watching = False
            assert self._loop is not None
            self._loop.remove_reader(self.fd)

    def _read_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            while True:
                self._running.wait()
                data = os.read(self.fd, READ_SIZE)
                if not data:
                    break
                loop.call_soon_threadsafe(self.on_data, data)
        except OSError:
            pass
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
        """Stop reading; ``on_eof`` follows (on the loop's next turn)."""
        if self._loop is not None and not self._closed:
            self._closed = True
            self._stop_watching()
            self._loop.call_soon(self.on_eof)


class _WriteProtocol(asyncio.Protocol):
    def __init__(self, owner: FdWriter) -> None:
        self.owner = owner

    def pause_writing(self) -> None:
        self.owner._set_paused(True)

    def resume_writing(self) -> None:
        self.owner._set_paused(False)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner._lost()


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
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[bytes] = []
        self._scheduled = False  # a flush at the end of this loop turn is on its way
        self._done: asyncio.Event | None = None  # set once everything written has left, after close()

    async def start(self) -> None:
        """Attach to the running loop (until then, and for regular files, writes block)."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._done = asyncio.Event()
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
        elif self._done is not None:
            self._done.set()
        self.broken = True

    async def wait_closed(self) -> None:
        """After :meth:`close`: wait until everything written has left the process (or the
        other side stopped reading). No deadline: a reader that is slow holds us back."""
        if self._done is not None:
            await self._done.wait()
