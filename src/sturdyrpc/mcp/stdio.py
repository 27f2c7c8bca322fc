"""Serving an :class:`~sturdyrpc.mcp.server.MCPServer` on stdin/stdout.

Newline-delimited JSON over the one stdio transport
(:class:`~sturdyrpc.transports.stdio.StdioTransport`): nothing but protocol on stdout (stray
prints go to stderr), logs on stderr. The transport pushes each frame into the session's peer,
whose runner answers an inline ``tools/call`` on the reader's turn.

When stdin ends, every request that was running or waiting is answered and every reply is
flushed before the server returns: no deadline applies to EOF. SIGTERM/SIGINT stop it
promptly: running requests are cancelled (blocking tools run on daemon threads, which do not
hold the process).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys

from ..transports.loopwatch import DEFAULT_STALL_WARNING
from ..transports.stdio import StdioTransport, claim_stdout, hold_closed_stdout, run_until_signalled
from .lifespan import LifespanError
from .server import MCPServer
from .serving import register

__all__ = ["serve_mcp_stdio", "run_mcp_stdio"]

log = logging.getLogger("sturdyrpc.mcp")

#: How long, after SIGTERM/SIGINT, cancelled requests get to settle and their output to flush.
STOP_GRACE = 1.0


async def serve_mcp_stdio(server: MCPServer, *, stdin_fd: int = 0, stdout_fd: int | None = None, protect_stdout: bool = True) -> None:
    """Serve ``server`` on this process's stdin/stdout until stdin ends (or the task is cancelled).

    The server's lifespan starts before stdin is read and ends after the last reply is written;
    a failing startup raises :class:`~sturdyrpc.mcp.lifespan.LifespanError` before anything is served.
    """
    if stdout_fd is None:
        stdout_fd = claim_stdout() if protect_stdout else 1
    async with server.lifespan.running():
        await _serve(server, stdin_fd, stdout_fd)


async def _serve(server: MCPServer, stdin_fd: int, stdout_fd: int) -> None:
    transport = StdioTransport(stdin_fd, stdout_fd, framing="line", max_frame=server.dispatcher.limits.max_message_bytes)
    peer = server.create_peer(transport, name="mcp-stdio")
    await transport.start()
    await peer.start()
    try:
        await peer.wait_closed()
    except asyncio.CancelledError:
        # A signal: running requests are cancelled, not awaited (the close deadline is for
        # this case only; at EOF the peer answers everything).
        peer.abort("the server is stopping")
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(peer.wait_closed(), STOP_GRACE)
        transport.close_nowait()
        raise
    # Every reply the peer handed over leaves before we return (and the loop with it).
    transport.close_nowait()
    await transport.wait_closed()


def run_mcp_stdio(server: MCPServer, *, stall_warning: float | None = DEFAULT_STALL_WARNING) -> int:
    """Run :func:`serve_mcp_stdio` in a fresh event loop; return the exit code (0, or 1 when the
    lifespan's startup failed: its message goes to stderr and nothing is served).
    ``stall_warning``: seconds the event loop may be blocked (a tool calling ``time.sleep`` in
    an ``async def``) before a warning is logged; None: no watch."""
    hold_closed_stdout()
    try:
        run_until_signalled(lambda: serve_mcp_stdio(server), stall_warning=stall_warning)
    except LifespanError as exc:
        sys.stderr.write(f"sturdyrpc: {server.name}: not started: {exc}\n")
        sys.stderr.flush()
        return 1
    return 0


def _run(server: MCPServer, **options: object) -> int:
    """``server.run()`` / ``server.run("stdio")``."""
    if options:
        raise TypeError(f"server.run('stdio') takes no {', '.join(sorted(options))} (host= and port= are for transport='http')")
    return run_mcp_stdio(server)


register("stdio", _run)
