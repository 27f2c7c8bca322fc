"""Message transports over byte streams: asyncio streams (pipes, TCP, Unix sockets) and stdio.

Each one frames whole messages with newline-delimited JSON (``"line"``, MCP's stdio) or
``Content-Length`` headers (``"content-length"``, LSP), using the bounded framers of
:mod:`sturdyrpc.framing`: an over-long frame is reported as
:class:`~sturdyrpc.framing.FrameTooLarge` (the peer answers it) and never buffered.

- :class:`StreamTransport`: over an ``asyncio.StreamReader``/``StreamWriter`` pair
  (a subprocess's stdout/stdin, a socket).
- :func:`open_tcp` / :func:`open_unix`: connect and return a :class:`StreamTransport`.
- :func:`stdio_transport`: the server side of stdio, on this process's stdin/stdout, with
  stdout protected from stray writes (see :func:`~sturdyrpc.transports.stdio.claim_stdout`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Literal

from ..framing import BadHeader, ContentLengthFramer, FrameTooLarge, LineFramer, encode_content_length
from ..limits import DEFAULT_LIMITS
from .stdio import FdReader, FdWriter, claim_stdout

__all__ = ["StreamTransport", "StdioTransport", "open_tcp", "open_unix", "stdio_transport", "Framing"]

log = logging.getLogger("sturdyrpc")

Framing = Literal["line", "content-length"]

Frame = bytes | FrameTooLarge | BadHeader

_READ_SIZE = 65536


def _framer(framing: Framing, max_frame: int) -> LineFramer | ContentLengthFramer:
    if framing == "line":
        return LineFramer(max_frame)
    if framing == "content-length":
        return ContentLengthFramer(max_frame)
    raise ValueError(f"unknown framing {framing!r} (use 'line' or 'content-length')")


class StreamTransport:
    """A :class:`~sturdyrpc.peer.MessageTransport` over an asyncio stream pair.

    ``send`` may be called from several tasks; frames are never interleaved (each is one
    ``write``), and it waits for the stream to drain (flow control).
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        framing: Framing = "line",
        max_frame: int = DEFAULT_LIMITS.max_message_bytes,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.framing = framing
        self._framer = _framer(framing, max_frame)
        self._frames: deque[Frame] = deque()
        self._eof = False
        self._closed = False

    async def send(self, data: bytes) -> None:
        """Write one message; raises ``ConnectionError`` when the other side is gone."""
        if self._closed:
            raise ConnectionResetError("transport closed")
        w = self.writer
        if w.is_closing():
            raise ConnectionResetError("stream closed")
        w.write(data + b"\n" if self.framing == "line" else encode_content_length(data))
        await w.drain()

    def send_nowait(self, data: bytes) -> bool:
        """Write one message now if the stream takes it without waiting; False (nothing
        written) when it is closed or its buffer is above the high-water mark (then use
        :meth:`send`, which waits for the drain and raises if the connection is gone)."""
        w = self.writer
        t = w.transport
        if self._closed or t.is_closing():
            return False
        if t.get_write_buffer_size() and t.get_write_buffer_size() >= t.get_write_buffer_limits()[1]:
            return False  # send() would wait for the drain
        w.write(data + b"\n" if self.framing == "line" else encode_content_length(data))
        return True

    async def receive(self) -> Frame | None:
        """The next frame, or None at end of stream."""
        frames = self._frames
        while not frames:
            if self._eof or self._closed:
                return None
            try:
                data = await self.reader.read(_READ_SIZE)
            except (ConnectionError, OSError):
                data = b""
            if not data:
                self._eof = True
                # A trailing line without its newline is still a message.
                if self.framing == "line":
                    frames.extend(self._framer.feed(b"\n"))
                continue
            frames.extend(self._framer.feed(data))
        return frames.popleft()

    async def close(self) -> None:
        """Close the writing side (the other end sees EOF). Idempotent."""
        if self._closed:
            return
        self._closed = True
        w = self.writer
        try:
            if w.can_write_eof():
                w.write_eof()
        except (OSError, RuntimeError):
            pass
        w.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(w.wait_closed(), 2.0)


async def open_tcp(host: str, port: int, *, framing: Framing = "line", max_frame: int = DEFAULT_LIMITS.max_message_bytes) -> StreamTransport:
    """Connect to a TCP server and return a message transport."""
    reader, writer = await asyncio.open_connection(host, port, limit=_READ_SIZE * 4)
    return StreamTransport(reader, writer, framing=framing, max_frame=max_frame)


async def open_unix(path: str, *, framing: Framing = "line", max_frame: int = DEFAULT_LIMITS.max_message_bytes) -> StreamTransport:
    """Connect to a Unix socket and return a message transport."""
    reader, writer = await asyncio.open_unix_connection(path, limit=_READ_SIZE * 4)
    return StreamTransport(reader, writer, framing=framing, max_frame=max_frame)


class StdioTransport:
    """The server side of stdio as a message transport (see :func:`stdio_transport`).

    Reading is paused while ``max_buffered`` frames wait to be received, so a client that
    writes faster than the server reads is held back by the pipe, not by our memory.
    """

    def __init__(
        self,
        stdin_fd: int,
        stdout_fd: int,
        *,
        framing: Framing = "line",
        max_frame: int = DEFAULT_LIMITS.max_message_bytes,
        max_buffered: int = 64,
    ) -> None:
        self.framing = framing
        self._framer = _framer(framing, max_frame)
        self._frames: deque[Frame] = deque()
        self._max_buffered = max_buffered
        self._eof = False
        self._closed = False
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._write_ok: asyncio.Event = asyncio.Event()
        self._write_ok.set()
        self._reader = FdReader(stdin_fd, self._on_data, self._on_eof)
        self._writer = FdWriter(stdout_fd, on_pause=self._on_write_pause)

    async def start(self) -> None:
        await self._writer.start()
        await self._reader.start()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _on_data(self, data: bytes) -> None:
        self._frames.extend(self._framer.feed(data))
        if not self._paused and len(self._frames) >= self._max_buffered:
            self._paused = True
            self._reader.pause()
        self._wake()

    def _on_eof(self) -> None:
        if not self._eof:
            self._eof = True
            if self.framing == "line":
                self._frames.extend(self._framer.feed(b"\n"))
        self._wake()

    def _on_write_pause(self, paused: bool) -> None:
        if paused:
            self._write_ok.clear()
        else:
            self._write_ok.set()

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
        if self._paused and len(frames) <= self._max_buffered // 2:
            self._paused = False
            self._reader.resume()
        return frame

    def receive_nowait(self) -> Frame | None:
        """A frame already read, or None when none is buffered now (the end of the stream is
        reported by :meth:`receive`)."""
        frames = self._frames
        if not frames:
            return None
        frame = frames.popleft()
        if self._paused and len(frames) <= self._max_buffered // 2:
            self._paused = False
            self._reader.resume()
        return frame

    async def send(self, data: bytes) -> None:
        w = self._writer
        if self._closed or w.broken:
            raise BrokenPipeError("stdout is closed")
        w.write(data + b"\n" if self.framing == "line" else encode_content_length(data))
        if w.broken:
            raise BrokenPipeError("stdout is closed")
        if not self._write_ok.is_set():
            await self._write_ok.wait()

    def send_nowait(self, data: bytes) -> bool:
        """Queue one message for this loop turn's write if stdout takes more now; False
        (nothing written) when it is paused (flow control) or broken: then use :meth:`send`."""
        w = self._writer
        if self._closed or w.broken or not self._write_ok.is_set():
            return False
        if self.framing == "line":
            w.write_line(data)
        else:
            w.write(encode_content_length(data))
        return True

    async def close(self) -> None:
        """Flush what was written, then stop reading and writing. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            await self._writer.flush(5.0)
        self._reader.close()
        self._writer.close()
        self._wake()


async def stdio_transport(
    framing: Framing = "line",
    *,
    stdin_fd: int = 0,
    stdout_fd: int | None = None,
    protect_stdout: bool = True,
    max_frame: int = DEFAULT_LIMITS.max_message_bytes,
) -> StdioTransport:
    """A started message transport on this process's stdin/stdout, for servers.

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
