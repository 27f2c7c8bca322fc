"""Serving a dispatcher on stdin/stdout (newline-delimited JSON by default).

- Nothing but protocol reaches stdout: on start the real stdout is moved to a private
  file descriptor and fd 1 is pointed at stderr, so a stray ``print()`` (or a C library,
  or a child process) writes to stderr instead of corrupting the stream.
- Replies are written as whole lines as soon as each is ready.
- stdin EOF: requests still running finish, their replies are flushed, and
  :func:`serve_stdio` returns. SIGTERM/SIGINT (with :func:`run_stdio`): running requests
  are cancelled and it returns promptly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import queue
import signal
import stat
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from ..dispatch import Dispatcher
from ..framing import ContentLengthFramer, LineFramer, encode_content_length
from ..runner import Runner

__all__ = ["serve_stdio", "run_stdio", "run_until_signalled", "hold_closed_stdout", "claim_stdout", "FdReader", "FdWriter"]

log = logging.getLogger("sturdyrpc")

Framing = Literal["line", "content-length"]


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


def _pollable(fd: int) -> bool:
    """Whether the event loop can watch ``fd``: pipes, sockets and ttys (not files or /dev/null)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


class DaemonThreadPool(concurrent.futures.Executor):
    """A bounded thread pool whose threads are daemons, for sync handlers.

    The stdlib pool joins its threads at interpreter exit, so one handler stuck in
    ``time.sleep`` or a slow call would hold the process open after SIGTERM. Daemon
    threads let the process exit promptly; on EOF the server still waits for running
    requests (see :func:`serve_stdio`).
    """

    def __init__(self, max_workers: int, name: str = "sturdyrpc") -> None:
        self._max = max_workers
        self._name = name
        self._queue: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None] = (
            queue.SimpleQueue()
        )
        self._threads: list[threading.Thread] = []
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            self._queue.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._max:
                t = threading.Thread(target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True)
                self._threads.append(t)
                t.start()
            return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args, kwargs = item
            del item
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:  # handed to the awaiting task, like the stdlib pool
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del future, fn, args, kwargs
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            for _ in self._threads:
                self._queue.put(None)
        if wait:
            for t in self._threads:
                t.join()


class _ReadProtocol(asyncio.Protocol):
    def __init__(self, on_data: Any, on_eof: Any) -> None:
        self.on_data = on_data
        self.on_eof = on_eof

    def data_received(self, data: bytes) -> None:
        self.on_data(data)

    def eof_received(self) -> bool:
        self.on_eof()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.on_eof()


class FdReader:
    """Reads a file descriptor on the loop (pipes, sockets, ttys) or, for regular files, in a thread."""

    def __init__(self, fd: int, on_data: Any, on_eof: Any) -> None:
        self.fd = fd
        self.on_data = on_data
        self.on_eof = on_eof
        self._transport: asyncio.ReadTransport | None = None
        self._paused = threading.Event()
        self._paused.set()  # set = running
        self._thread: threading.Thread | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        file = os.fdopen(self.fd, "rb", buffering=0, closefd=False)
        try:
            if not _pollable(self.fd):
                # asyncio accepts any character device, but epoll refuses /dev/null and the
                # like later, inside a callback: the reader would then never see EOF.
                raise ValueError("not pollable")
            self._transport, _ = await loop.connect_read_pipe(lambda: _ReadProtocol(self.on_data, self.on_eof), file)
        except (ValueError, OSError):
            self._thread = threading.Thread(target=self._read_thread, args=(loop,), daemon=True, name="sturdyrpc-stdin")
            self._thread.start()

    def _read_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            while True:
                self._paused.wait()
                data = os.read(self.fd, 65536)
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
        if self._transport is not None:
            self._transport.pause_reading()
        else:
            self._paused.clear()

    def resume(self) -> None:
        if self._transport is not None:
            self._transport.resume_reading()
        else:
            self._paused.set()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class _WriteProtocol(asyncio.Protocol):
    def __init__(self, owner: FdWriter) -> None:
        self.owner = owner

    def pause_writing(self) -> None:
        self.owner._set_paused(True)

    def resume_writing(self) -> None:
        self.owner._set_paused(False)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner.broken = True
        self.owner._set_paused(False)


class FdWriter:
    """Writes to a file descriptor through the loop when it can, else with plain blocking writes."""

    def __init__(self, fd: int, on_pause: Any = None) -> None:
        self.fd = fd
        self.on_pause = on_pause
        self.broken = False
        self._transport: asyncio.WriteTransport | None = None
        self._paused = False
        self._drained: asyncio.Event | None = None
        # Writes made during one turn of the event loop are joined and leave in one system
        # call at its end (replies to all the requests of one read chunk, typically).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[bytes] = []

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        file = os.fdopen(self.fd, "wb", buffering=0, closefd=False)
        try:
            self._transport, _ = await loop.connect_write_pipe(lambda: _WriteProtocol(self), file)
        except (ValueError, OSError):
            self._transport = None

    def _set_paused(self, paused: bool) -> None:
        self._paused = paused
        if self.on_pause is not None:
            self.on_pause(paused)
        if not paused and self._drained is not None:
            self._drained.set()

    def write(self, data: bytes) -> None:
        """Queue ``data``; it is written, in order, at the end of this turn of the event loop."""
        if self.broken:
            return
        pending = self._pending
        if pending:
            pending.append(data)
            return
        if self._loop is not None:
            pending.append(data)
            self._loop.call_soon(self._flush_pending)
            return
        self._write_now(data)

    def write_line(self, payload: bytes) -> None:
        """:meth:`write` ``payload`` and a newline (without copying ``payload``)."""
        pending = self._pending
        if pending and not self.broken:
            pending.append(payload)
            pending.append(b"\n")
            return
        self.write(payload + b"\n")

    def _flush_pending(self) -> None:
        pending = self._pending
        if not pending:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        pending.clear()
        self._write_now(data)

    def _write_now(self, data: bytes) -> None:
        if self.broken:
            return
        if self._transport is not None:
            if self._transport.is_closing():
                self.broken = True
                return
            self._transport.write(data)
            return
        try:
            view = memoryview(data)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
        except OSError:
            self.broken = True

    async def flush(self, timeout: float = 10.0) -> None:
        """Wait until everything written has left the process (or the pipe broke)."""
        self._flush_pending()
        t = self._transport
        if t is None:
            return
        deadline = asyncio.get_running_loop().time() + timeout
        while not self.broken and t.get_write_buffer_size() > 0 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.005)

    def close(self) -> None:
        self._flush_pending()
        if self._transport is not None:
            self._transport.close()


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
    ``protect_stdout`` is true. On EOF, running requests finish (within
    ``drain_timeout`` seconds, unbounded by default) and their replies are flushed.
    """
    if stdout_fd is None:
        stdout_fd = claim_stdout() if protect_stdout else 1
    limits = dispatcher.limits
    framer = LineFramer(limits.max_message_bytes) if framing == "line" else ContentLengthFramer(limits.max_message_bytes)
    eof = asyncio.Event()
    pressure = {"runner": False, "writer": False}
    reader: FdReader

    def set_pressure(source: str, on: bool) -> None:
        was = any(pressure.values())
        pressure[source] = on
        now = any(pressure.values())
        if now and not was:
            reader.pause()
        elif was and not now:
            reader.resume()

    writer = FdWriter(stdout_fd, on_pause=lambda p: set_pressure("writer", p))
    send: Callable[[bytes], None]
    if framing == "line":
        send = writer.write_line
    else:

        def send(payload: bytes) -> None:
            writer.write(encode_content_length(payload))

    pool = DaemonThreadPool(limits.max_threads)
    runner = Runner(dispatcher, send, executor=pool, on_pressure=lambda p: set_pressure("runner", p))
    feed = runner.feed
    framer_feed = framer.feed

    def on_data(data: bytes) -> None:
        for frame in framer_feed(data):
            try:
                feed(frame)
            except Exception:  # a bug of ours must not stop the server
                log.exception("internal error while handling a frame")

    def on_eof() -> None:
        if eof.is_set():
            return
        if framing == "line":
            on_data(b"\n")  # a last line without its newline is still a message
        eof.set()

    reader = FdReader(stdin_fd, on_data, on_eof)
    await writer.start()
    await reader.start()
    try:
        await eof.wait()
        reader.close()
        await runner.drain(drain_timeout)
        await writer.flush()
    except asyncio.CancelledError:
        runner.cancel_all()
        reader.close()
        raise
    finally:
        runner.close()
        pool.shutdown(wait=False, cancel_futures=True)
        writer.close()


def run_until_signalled(serve: Callable[[], Awaitable[None]]) -> None:
    """Run ``serve()`` in a fresh event loop until it returns or SIGTERM/SIGINT arrives.

    A signal cancels the serving task, so running requests are cancelled and this returns
    promptly; stdio servers (plain and MCP) share it.
    """

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, task.cancel)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        try:
            await serve()
        except asyncio.CancelledError:
            pass

    asyncio.run(main())


def run_stdio(dispatcher: Dispatcher, **kwargs: Any) -> int:
    """Run :func:`serve_stdio` in a fresh event loop; return the process exit code.

    SIGTERM and SIGINT stop it promptly (running requests are cancelled); exit code 0.
    """
    if kwargs.get("stdout_fd") is None:
        hold_closed_stdout()
    run_until_signalled(lambda: serve_stdio(dispatcher, **kwargs))
    return 0


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
