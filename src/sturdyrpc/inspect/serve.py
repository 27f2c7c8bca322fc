"""Running the inspector: the web app on uvicorn at ``127.0.0.1`` (a free port unless one is
given), the MCP client beside it on the same event loop, until the user stops it (Ctrl-C)."""

from __future__ import annotations

import asyncio
import secrets
import socket
import sys
from typing import IO

from .app import InspectorApp, Signal, build_app
from .connector import Inspector
from .session import Session

__all__ = ["serve", "HOST"]

#: The only address the inspector listens on: it is a local tool, its page holds the traffic.
HOST = "127.0.0.1"


async def serve(command: list[str] | None, url: str | None, *, port: int = 0, timeout: float = 60.0, deadline: float = 10.0,
                protocol: str | None = None, redact: bool = True, out: IO[str] = sys.stderr) -> int:
    """Inspect the server ``command`` starts (or the one at ``url``); the page's URL, with its
    token, is written to ``out``. ``deadline``: seconds after which a request without a reply is
    marked unanswered; ``protocol``: the MCP version to require (None: negotiated). Returns 0 once
    stopped."""
    import uvicorn

    from ..transports.serve_http import uvicorn_config

    token = secrets.token_urlsafe(24)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    port = sock.getsockname()[1]
    sock.listen(128)  # before the address is printed: a client may connect at once (uvicorn accepts later)
    signal = Signal()
    session = Session(list(command or [url or ""]), redact=redact, on_entry=signal.notify)
    inspector = Inspector(session, command=command, url=url, timeout=timeout, protocol=protocol, on_change=signal.notify)
    app = build_app(InspectorApp(inspector, token, signal, deadline=deadline), port=port)
    server = uvicorn.Server(uvicorn_config(app, HOST, port, timeout_graceful_shutdown=2))
    stop = asyncio.Event()
    client = asyncio.create_task(inspector.run(stop))
    out.write(f"sturdyrpc inspect: open http://{HOST}:{port}/?token={token}\n")
    out.write("sturdyrpc inspect: Ctrl-C stops the inspector and the server\n")
    out.flush()
    try:
        await server.serve(sockets=[sock])
    finally:
        stop.set()
        await client
        sock.close()
    return 0
