"""Serving an :class:`~sturdyrpc.mcp.server.MCPServer` on stdin/stdout.

Newline-delimited JSON, nothing but protocol on stdout (stray prints go to stderr), logs on
stderr. The server exits when stdin ends (running requests finish first, within a deadline)
or on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from ..framing import BadHeader, FrameTooLarge, LineFramer
from ..limits import DEFAULT_LIMITS
from ..peer import MessageTransport
from ..transports.stdio import FdReader, FdWriter, claim_stdout, hold_closed_stdout, run_until_signalled
from .server import MCPServer

__all__ = ["serve_mcp_stdio", "run_mcp_stdio", "CoalescingTransport", "StdioMCPTransport"]

Frame = bytes | FrameTooLarge | BadHeader

log = logging.getLogger("sturdyrpc.mcp")


class CoalescingTransport:
    """Wraps a line-framed message transport so that messages sent in one event-loop turn
    leave in one write (one system call for many replies instead of one each).

    ``send`` returns at once while fewer than ``max_pending`` messages wait; a write error
    is raised by the next ``send`` (and ``close``), so the peer still learns that the
    connection broke.
    """

    def __init__(self, inner: Any, max_pending: int = 512) -> None:
        self.inner: MessageTransport = inner
        self.max_pending = max_pending
        #: ``intercept(frame) -> reply | None``: answers a frame on the spot (its reply joins
        #: the outgoing batch) instead of handing it to the peer (None: hand it over).
        self.intercept: Callable[[bytes], bytes | None] | None = None
        self._buf: list[bytes] = []
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None

    async def send(self, data: bytes) -> None:
        if self._error is not None:
            raise self._error
        self._buf.append(data)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._flush())
        elif len(self._buf) >= self.max_pending:
            await asyncio.shield(self._task)

    async def _flush(self) -> None:
        try:
            await asyncio.sleep(0)  # let this turn's replies join the batch
            while self._buf and self._error is None:
                batch = b"\n".join(self._buf)  # the inner framing adds the final newline
                self._buf.clear()
                await self.inner.send(batch)
        except Exception as exc:
            self._error = exc
        finally:
            self._task = None

    async def receive(self) -> bytes | FrameTooLarge | BadHeader | None:
        while True:
            frame = await self.inner.receive()
            intercept = self.intercept
            if intercept is None or type(frame) is not bytes or self._error is not None:
                return frame
            try:
                reply = intercept(frame)
            except Exception:  # a bug of ours: let the peer handle the frame
                log.exception("internal error in the fast path")
                return frame
            if reply is None:
                return frame
            self._buf.append(reply)
            if self._task is None:
                self._task = asyncio.get_running_loop().create_task(self._flush())
            elif len(self._buf) >= self.max_pending:
                await asyncio.shield(self._task)  # the reader waits for the writer: backpressure

    async def close(self) -> None:
        t = self._task
        if t is not None:
            try:
                await asyncio.wait_for(asyncio.shield(t), 5.0)
            except Exception:
                pass
        await self.inner.close()


class StdioMCPTransport:
    """The server side of MCP's stdio transport (newline-delimited) as a message transport.

    Frames are cut as the bytes arrive; ``intercept(frame) -> reply | None`` (the server's
    fast path) answers the frames it can right there, on the reader's turn, and the rest wait
    for :meth:`receive`. Everything written in one turn of the loop leaves in one write.
    Reading pauses while ``max_buffered`` frames wait or stdout cannot take more, so a client
    that does not read its replies is held back by the pipe, not by our memory.
    """

    def __init__(self, stdin_fd: int, stdout_fd: int, *, max_frame: int = DEFAULT_LIMITS.max_message_bytes, max_buffered: int = 64) -> None:
        self.intercept: Callable[[bytes], bytes | None] | None = None
        self._framer = LineFramer(max_frame)
        self._frames: deque[Frame] = deque()
        self._max_buffered = max_buffered
        self._eof = False
        self._closed = False
        self._read_paused = False
        self._write_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._write_ok = asyncio.Event()
        self._write_ok.set()
        self._reader = FdReader(stdin_fd, self._on_data, self._on_eof)
        self._writer = FdWriter(stdout_fd, on_pause=self._on_write_pause)

    async def start(self) -> None:
        await self._writer.start()
        await self._reader.start()

    def _on_data(self, data: bytes) -> None:
        frames = self._framer.feed(data)
        intercept = self.intercept
        if intercept is not None:
            write = self._writer.write_line
            queued = self._frames
            for frame in frames:
                # Only while nothing waits for the peer: a frame never overtakes an earlier one
                # the peer has not seen (it might hold the same id, or the initialize).
                if not queued and type(frame) is bytes:
                    try:
                        reply = intercept(frame)
                    except Exception:  # a bug of ours: the peer handles the frame instead
                        log.exception("internal error in the fast path")
                        reply = None
                    if reply is not None:
                        write(reply)
                        continue
                queued.append(frame)
        else:
            self._frames.extend(frames)
        self._update_reading()
        w = self._waiter
        if w is not None and not w.done() and self._frames:
            w.set_result(None)

    def _update_reading(self) -> None:
        hold = self._write_paused or len(self._frames) >= self._max_buffered
        if hold and not self._read_paused:
            self._read_paused = True
            self._reader.pause()
        elif not hold and self._read_paused and len(self._frames) <= self._max_buffered // 2:
            self._read_paused = False
            self._reader.resume()

    def _on_eof(self) -> None:
        if not self._eof:
            self._eof = True
            self._frames.extend(self._framer.feed(b"\n"))  # a last line without its newline
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _on_write_pause(self, paused: bool) -> None:
        self._write_paused = paused
        if paused:
            self._write_ok.clear()
        else:
            self._write_ok.set()
        self._update_reading()

    async def receive(self) -> Frame | None:
        frames = self._frames
        while not frames:
            if self._eof or self._closed:
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

    async def send(self, data: bytes) -> None:
        w = self._writer
        if self._closed or w.broken:
            raise BrokenPipeError("stdout is closed")
        w.write_line(data)
        if not self._write_ok.is_set():
            await self._write_ok.wait()
        if w.broken:
            raise BrokenPipeError("stdout is closed")

    def send_nowait(self, data: bytes) -> bool:
        """Queue one message for this loop turn's write if stdout takes more now; False
        (nothing written) when it is paused or broken: then use :meth:`send`."""
        w = self._writer
        if self._closed or w.broken or not self._write_ok.is_set():
            return False
        w.write_line(data)
        return True

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

    async def close(self) -> None:
        """Flush what was written, then stop reading and writing. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._writer.flush(5.0)
        except Exception:
            pass
        self._reader.close()
        self._writer.close()
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)


async def serve_mcp_stdio(server: MCPServer, *, stdin_fd: int = 0, stdout_fd: int | None = None, protect_stdout: bool = True) -> None:
    """Serve ``server`` on this process's stdin/stdout until stdin ends."""
    if stdout_fd is None:
        stdout_fd = claim_stdout() if protect_stdout else 1
    transport = StdioMCPTransport(stdin_fd, stdout_fd, max_frame=server.dispatcher.limits.max_message_bytes)
    await transport.start()
    peer = server.create_peer(transport, name="mcp-stdio")
    transport.intercept = server.fast_path(peer)
    async with peer:
        await peer.wait_closed()


def run_mcp_stdio(server: MCPServer) -> int:
    """Run :func:`serve_mcp_stdio` in a fresh event loop; return the exit code (0)."""
    hold_closed_stdout()
    run_until_signalled(lambda: serve_mcp_stdio(server))
    return 0
