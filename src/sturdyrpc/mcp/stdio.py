"""Serving an :class:`~sturdyrpc.mcp.server.MCPServer` on stdin/stdout.

Newline-delimited JSON, nothing but protocol on stdout (stray prints go to stderr), logs on
stderr. The server exits when stdin ends (running requests finish first, within a deadline)
or on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from typing import Any

from ..framing import BadHeader, FrameTooLarge
from ..peer import MessageTransport
from ..transports.streams import stdio_transport
from .server import MCPServer

__all__ = ["serve_mcp_stdio", "run_mcp_stdio", "CoalescingTransport"]

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


async def serve_mcp_stdio(server: MCPServer, *, stdin_fd: int = 0, stdout_fd: int | None = None, protect_stdout: bool = True) -> None:
    """Serve ``server`` on this process's stdin/stdout until stdin ends."""
    transport = CoalescingTransport(await stdio_transport("line", stdin_fd=stdin_fd, stdout_fd=stdout_fd, protect_stdout=protect_stdout))
    peer = server.create_peer(transport, name="mcp-stdio")
    transport.intercept = server.fast_path(peer)
    async with peer:
        await peer.wait_closed()


def run_mcp_stdio(server: MCPServer) -> int:
    """Run :func:`serve_mcp_stdio` in a fresh event loop; return the exit code (0)."""

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
            await serve_mcp_stdio(server)
        except asyncio.CancelledError:
            pass

    asyncio.run(main())
    return 0
