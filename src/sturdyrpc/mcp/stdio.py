"""Serving an :class:`~sturdyrpc.mcp.server.MCPServer` on stdin/stdout.

Newline-delimited JSON, nothing but protocol on stdout (stray prints go to stderr), logs on
stderr. The server exits when stdin ends (running requests finish first, within a deadline)
or on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import signal

from ..transports.streams import stdio_transport
from .server import MCPServer

__all__ = ["serve_mcp_stdio", "run_mcp_stdio"]


async def serve_mcp_stdio(server: MCPServer, *, stdin_fd: int = 0, stdout_fd: int | None = None, protect_stdout: bool = True) -> None:
    """Serve ``server`` on this process's stdin/stdout until stdin ends."""
    transport = await stdio_transport("line", stdin_fd=stdin_fd, stdout_fd=stdout_fd, protect_stdout=protect_stdout)
    await server.serve(transport, name="mcp-stdio")


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
