"""``connect_http(url)``: the MCP client (:class:`sturdyrpc.mcp.client.MCPClient`) over Streamable HTTP.

::

    async with connect_http("http://127.0.0.1:8000/mcp") as client:
        print(client.version)
        await client.call_tool("echo", {"text": "hi"})

Negotiation is the client's own (``server/discover`` at 2026-07-28, falling back to
``initialize``); ``protocol`` forces a version. Leaving the block closes the session (DELETE).
``auth``: authorization for a protected server, e.g. :class:`sturdyrpc.oauth.OAuthClientProvider`
(docs/AUTH_CLIENT.md); with it the ``server/discover`` probe is not timed (the user may be signing
in; over HTTP a server without ``server/discover`` answers it at once with an error).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from ..mcp import connectors
from ..mcp.client import Callback, MCPClient, RootsCallback
from ..mcp.profile import MCPProfile
from ..oauth import HTTPAuth
from ..peer import MessageTransport, Peer
from .client import StreamableHTTPClientTransport

__all__ = ["connect_http"]


@contextlib.asynccontextmanager
async def connect_http(
    url: str,
    protocol: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    sampling: Callback | None = None,
    elicitation: Callback | None = None,
    roots: RootsCallback | None = None,
    on_log: Callable[[dict[str, Any]], Any] | None = None,
    on_notification: Callable[[str, Any], Any] | None = None,
    log_level: str | None = None,
    client_info: dict[str, Any] | None = None,
    timeout: float | None = 60.0,
    discover_timeout: float = 10.0,
    transport: StreamableHTTPClientTransport | None = None,
    auth: HTTPAuth | None = None,
    wrap_transport: Callable[[MessageTransport], MessageTransport] | None = None,
    progress_resets_timeout: bool = True,
) -> AsyncIterator[MCPClient]:
    """Connect to the MCP endpoint ``url``, negotiate, and yield an :class:`MCPClient`.

    ``timeout``: the default per-request timeout, which each progress notification of a request
    restarts (``progress_resets_timeout``; see :class:`~sturdyrpc.mcp.client.MCPClient`).
    ``wrap_transport``: the peer runs on what it returns for the HTTP transport (``sturdyrpc
    inspect`` watches the traffic so)."""
    from .. import __version__

    profile = MCPProfile(role="client")
    client = MCPClient(
        None,
        profile,
        client_info=client_info or {"name": "sturdyrpc", "version": __version__},
        sampling=sampling,
        elicitation=elicitation,
        roots=roots,
        on_log=on_log,
        on_notification=on_notification,
        log_level=log_level,
        progress_resets_timeout=progress_resets_timeout,
    )
    t = transport or StreamableHTTPClientTransport(url, headers=headers, auth=auth)
    t.param_headers = client.tool_headers.get  # SEP-2243: what tools/list said each tool mirrors
    peer = Peer(t if wrap_transport is None else wrap_transport(t), client.dispatcher(), profile=profile, default_timeout=timeout, name="mcp-http-client")
    client.peer = peer
    async with peer:
        await client.negotiate(protocol, discover_timeout=None if auth is not None else discover_timeout)
        yield client


# create_proxy(url) opens its upstream session with this (see sturdyrpc.mcp.connectors)
connectors.register("http", connect_http)
