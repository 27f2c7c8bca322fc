"""``MCPServer.test_client()``: an MCP client connected to the server in memory.

The server end is the same :meth:`~sturdyrpc.mcp.server.MCPServer.create_peer` session stdio
uses (middleware, the negotiated version's rules, ``ctx.state``); the client is the real
:class:`~sturdyrpc.mcp.client.MCPClient`. The lifespan is entered before connecting and left
after the connection closes.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, Protocol

from ..peer import MessageTransport, Peer
from ..transports.memory import memory_pair
from .client import MCPClient
from .lifespan import LifespanRunner
from .profile import MCPProfile

__all__ = ["connect_in_memory", "CreatePeer"]

class CreatePeer(Protocol):
    """``create_peer(transport, name=...)``: a peer (not started) serving the server's session on
    ``transport`` (:meth:`MCPServer.create_peer <sturdyrpc.mcp.server.MCPServer.create_peer>`)."""

    def __call__(self, transport: MessageTransport, *, name: str = ...) -> Peer: ...


@contextlib.asynccontextmanager
async def connect_in_memory(create_peer: CreatePeer, lifespan: LifespanRunner, protocol: str | None = None, *,
                            timeout: float | None = 30.0, client_info: dict[str, Any] | None = None,
                            **options: Any) -> AsyncIterator[MCPClient]:
    """Connect an :class:`MCPClient` in memory to a server session made by ``create_peer``, with
    the server's ``lifespan`` entered around it (see :meth:`MCPServer.test_client
    <sturdyrpc.mcp.server.MCPServer.test_client>`)."""
    async with lifespan.running():
        client_end, server_end = memory_pair()
        server_peer = create_peer(server_end, name="mcp-test-server")
        profile = MCPProfile(role="client")
        client = MCPClient(None, profile, client_info=client_info or {"name": "sturdyrpc-test", "version": "0"}, **options)
        client.peer = Peer(client_end, client.dispatcher(), profile=profile, default_timeout=timeout, name="mcp-test-client")
        async with server_peer:
            try:
                async with client.peer:
                    await client.negotiate(protocol)
                    yield client
            finally:
                await server_end.close()
