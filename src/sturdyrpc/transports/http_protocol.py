"""uvicorn's httptools protocol with a bound on the request line + headers and a timer on them.

httptools keeps an unfinished request line and header in memory however long it grows (six
unfinished 150 MiB headers held 1 GB, kept after the connections closed), and uvicorn has no
timer for a client that opens a connection and sends its head slowly or never. This protocol
counts the bytes of each request's head as they arrive:

- more than ``max_header_bytes`` before the head is complete -> ``431 Request Header Fields
  Too Large`` (a fixed JSON-RPC error body, id null), and the connection is closed: the parser
  and what it holds go with it;
- no complete head ``header_timeout`` seconds after the connection opened (or after the first
  byte of a later request on it) -> ``408 Request Timeout`` and the connection is closed. A
  head that waits because the server is still answering the previous request (pipelining)
  is not the client's delay: the timer starts again.

Every connection also gets ``TCP_NODELAY``: asyncio sets it only on sockets whose protocol
number says TCP, and the listening socket uvicorn binds for ``--workers N`` has 0 there, so on
asyncio the connections accepted by several workers kept Nagle's algorithm, and a response
written in two parts (head, body) waited for the client's delayed ACK: 40 ms per request.

Each response's head waits for its body's first write, so that a JSON response leaves in one
system call and one TCP segment (uvicorn writes the head the moment the app starts its response):
on wrk against ``demo --http``, 28.4 -> 25.7 us of server CPU per plain JSON-RPC request.

Bodies are not counted here: the apps bound them (``HTTPSecurity.max_body_bytes``). Imported
only when uvicorn serves (``serve_http``): it needs uvicorn and httptools (the ``http`` extra).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .asgi import error_body

__all__ = ["BoundedHttpToolsProtocol", "HeadHeldForBody", "bounded_protocol", "DEFAULT_MAX_HEADER_BYTES", "DEFAULT_HEADER_TIMEOUT"]

#: Default bound on one request's line + headers, in bytes (beyond it: 431).
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
#: Default time a client has to send a whole request line + headers, in seconds (then: 408).
DEFAULT_HEADER_TIMEOUT = 10.0

# How long a refused connection keeps reading (and discarding) before it closes: closing with
# unread input makes the kernel send a reset, which can destroy the refusal before it is read.
_LINGER = 1.0


def _refusal(status: bytes, message: str) -> bytes:
    body = error_body(-32600, message)
    return (
        b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\ncontent-length: "
        + str(len(body)).encode("ascii") + b"\r\nconnection: close\r\n\r\n" + body
    )


_TOO_LARGE = _refusal(b"431 Request Header Fields Too Large", "Request header fields too large")
_TIMEOUT = _refusal(b"408 Request Timeout", "Request header not received in time")


class HeadHeldForBody(asyncio.Transport):
    """The connection's transport, with each response head held back until the body's first
    write: a JSON response leaves in one ``write`` (one system call, one TCP segment), not two.
    A head with no body write in the same turn of the loop (an SSE stream's first event still
    to come) leaves at the end of that turn."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._inner = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._inner.write(held + data)
        elif data[:5] == b"HTTP/" and data[-4:] == b"\r\n\r\n":
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self._inner.write(data)

    def flush(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            self._inner.write(held)

    def close(self) -> None:
        self.flush()
        self._inner.close()

    def write_eof(self) -> None:
        self.flush()
        self._inner.write_eof()

    def can_write_eof(self) -> bool:
        return self._inner.can_write_eof()

    def abort(self) -> None:
        self._held = None
        self._inner.abort()

    def is_closing(self) -> bool:
        return self._inner.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._inner.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._inner.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._inner.get_protocol()

    def pause_reading(self) -> None:
        self._inner.pause_reading()

    def resume_reading(self) -> None:
        self._inner.resume_reading()

    def is_reading(self) -> bool:
        return self._inner.is_reading()

    def get_write_buffer_size(self) -> int:
        return self._inner.get_write_buffer_size() + len(self._held or b"")

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._inner.set_write_buffer_limits(high, low)


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """:class:`HttpToolsProtocol` with a byte bound and a timer on each request's head.

    The limits are class attributes (uvicorn builds the protocol itself); :func:`bounded_protocol`
    makes a subclass with other values.
    """

    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    header_timeout: float = DEFAULT_HEADER_TIMEOUT

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # bytes received now belong to a request line or header
        self._head_seen = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused = False

    # ----------------------------------------------------------------- timer

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._in_head or self._refused or self.transport is None or self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            self._arm()  # the server is still answering the previous request
            return
        self._refuse(_TIMEOUT)

    def _refuse(self, response: bytes) -> None:
        self._refused = True
        self._disarm()
        transport = self.transport
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # A pipelined head while the previous response is still being written: a refusal
            # would land inside that response. Close; the running request learns it is gone.
            transport.close()
            self.parser = None  # type: ignore[assignment]
            return
        transport.write(response)
        if transport.can_write_eof():
            transport.write_eof()
            self.loop.call_later(_LINGER, transport.close)
        else:
            transport.close()
        self.parser = None  # type: ignore[assignment]  # what it buffered goes now, not at close

    # ------------------------------------------------------------- protocol

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(HeadHeldForBody(transport, self.loop))
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):  # responses leave at once (see the module docstring)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._arm()  # a connection that never sends a whole head is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # read and dropped until the connection closes
        # Fed in pieces no longer than what the current head may still take: a piece may end
        # the head (what follows is body, fed whole) or even whole pipelined requests (the
        # next head then starts counting from zero), and a head still unfinished once it has
        # had all its bytes is refused before anything more of it is parsed.
        while data:
            if not self._in_head:
                super().data_received(data)
                return
            room = self.max_header_bytes - self._head_seen
            if room <= 0:
                self._refuse(_TOO_LARGE)
                return
            if len(data) <= room:
                piece, data = data, b""
            else:
                piece, data = data[:room], data[room:]
            self._head_seen += len(piece)
            super().data_received(piece)
            if self._refused or self.parser is None or self.transport.is_closing():
                return

    # -------------------------------------------------------- parser events

    def on_message_begin(self) -> None:
        self._arm()
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True
        self._head_seen = 0


def bounded_protocol(max_header_bytes: int | None = None, header_timeout: float | None = None) -> type[BoundedHttpToolsProtocol]:
    """The protocol class for these limits (None: the default); the module's own class for the
    defaults, so that uvicorn worker processes can import it by name."""
    if max_header_bytes is None:
        max_header_bytes = DEFAULT_MAX_HEADER_BYTES
    if header_timeout is None:
        header_timeout = DEFAULT_HEADER_TIMEOUT
    if type(max_header_bytes) is not int or max_header_bytes < 1:
        raise ValueError("max_header_bytes must be a positive integer")
    if not header_timeout > 0:
        raise ValueError("header_timeout must be positive")
    if max_header_bytes == DEFAULT_MAX_HEADER_BYTES and header_timeout == DEFAULT_HEADER_TIMEOUT:
        return BoundedHttpToolsProtocol
    attrs = {"max_header_bytes": max_header_bytes, "header_timeout": float(header_timeout)}
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), attrs)
