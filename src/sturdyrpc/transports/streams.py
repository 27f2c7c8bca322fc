"""Message transports over asyncio streams: a subprocess's pipes, TCP, Unix sockets.

Each one frames whole messages with newline-delimited JSON (``"line"``, MCP's stdio) or
``Content-Length`` headers (``"content-length"``, LSP), using the bounded framers of
:mod:`sturdyrpc.framing`: an over-long frame is reported as
:class:`~sturdyrpc.framing.FrameTooLarge` (the peer answers it) and never buffered.

- :class:`StreamTransport`: over an ``asyncio.StreamReader``/``StreamWriter`` pair
  (a subprocess's stdout/stdin, a socket).
- :func:`open_tcp` / :func:`open_unix`: connect and return a :class:`StreamTransport`.

The server side of stdio (this process's own stdin/stdout) is
:class:`~sturdyrpc.transports.stdio.StdioTransport` (:func:`stdio_transport`, re-exported here).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

from ..framing import encode_content_length
from ..limits import DEFAULT_LIMITS
from .stdio import Frame, Framing, make_framer, stdio_transport

__all__ = ["StreamTransport", "open_tcp", "open_unix", "stdio_transport", "Framing"]

log = logging.getLogger("sturdyrpc")

_READ_SIZE = 65536


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
        self._framer = make_framer(framing, max_frame)
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
