"""The client the MCP conformance suite drives: ``python -m sturdyrpc.demos.conformance_client URL``.

The suite starts a test server per scenario and names it in ``MCP_CONFORMANCE_SCENARIO``.
This client speaks Streamable HTTP through :class:`StreamableHTTPClientTransport` on a
:class:`~sturdyrpc.peer.Peer`, initializes, and does what each scenario expects:

- ``initialize``: the handshake, then ``tools/list``;
- ``tools_call``: calls ``add_numbers`` ({a: 5, b: 3}) and every other listed tool without arguments;
- ``elicitation-sep1034-client-defaults``: answers ``elicitation/create`` by accepting with the
  schema's default values (SEP-1034);
- ``sse-retry``: calls ``test_reconnection``; the transport resumes the dropped stream after
  the server's ``retry`` delay with ``Last-Event-ID``.
- ``auth/*``: the same session through :class:`~sturdyrpc.oauth.OAuthClientProvider` (every tool
  called); the suite's authorization server redirects at once, so the redirect is followed
  (:class:`~sturdyrpc.oauth.FollowRedirectHandler`). Pre-registered credentials come from
  ``MCP_CONFORMANCE_CONTEXT``; the Client ID Metadata Document URL is the suite's fixed one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from typing import Any

from .._version import __version__
from ..dispatch import Dispatcher
from ..mcp.profile import MCPProfile
from ..mcp.versions import LATEST_HANDSHAKE
from ..mcp_http.client import StreamableHTTPClientTransport
from ..oauth import FollowRedirectHandler, OAuthClientProvider
from ..peer import Peer

__all__ = ["main", "run", "defaults_from_schema"]

log = logging.getLogger("sturdyrpc.conformance")


def defaults_from_schema(schema: Any) -> dict[str, Any]:
    """The elicitation answer made of the ``default`` of every property that has one."""
    out: dict[str, Any] = {}
    props = schema.get("properties") if type(schema) is dict else None
    if type(props) is dict:
        for name, prop in props.items():
            if type(prop) is dict and "default" in prop:
                out[name] = prop["default"]
    return out


def _client_dispatcher() -> Dispatcher:
    rpc = Dispatcher()

    @rpc.method(name="ping", blocking=False)
    def ping(**_: Any) -> dict[str, Any]:
        return {}

    @rpc.method(name="elicitation/create", blocking=False)
    def elicit(**params: Any) -> dict[str, Any]:
        return {"action": "accept", "content": defaults_from_schema(params.get("requestedSchema"))}

    @rpc.method(name="sampling/createMessage", blocking=False)
    def sample(**params: Any) -> dict[str, Any]:
        return {"role": "assistant", "content": {"type": "text", "text": "A sampled reply."}, "model": "sturdyrpc-test",
                "stopReason": "endTurn"}

    @rpc.method(name="roots/list", blocking=False)
    def roots(**_: Any) -> dict[str, Any]:
        return {"roots": []}

    return rpc


#: The suite's fixed client id for Client ID Metadata Documents (it does not fetch it).
CIMD_URL = "https://conformance-test.local/client-metadata.json"


def auth_provider(scenario: str, context: str | None) -> OAuthClientProvider | None:
    """The OAuth client for an ``auth/*`` scenario, or None for the others."""
    if not scenario.startswith("auth/"):
        return None
    ctx: Any = {}
    if context:
        try:
            ctx = json.loads(context)
        except ValueError:
            ctx = {}
    if type(ctx) is not dict:
        ctx = {}
    client_id = ctx.get("client_id") if type(ctx.get("client_id")) is str else None
    secret = ctx.get("client_secret") if type(ctx.get("client_secret")) is str else None
    return OAuthClientProvider(
        FollowRedirectHandler("http://127.0.0.1:3000/callback"),
        client_id=client_id,
        client_secret=secret,
        client_metadata_url=CIMD_URL,
        client_name="sturdyrpc-conformance-client",
    )


async def run(url: str, scenario: str, context: str | None = None) -> None:
    auth = auth_provider(scenario, context)
    try:
        await _session(url, scenario, auth)
    finally:
        if auth is not None:
            await auth.aclose()


async def _session(url: str, scenario: str, auth: OAuthClientProvider | None) -> None:
    # sse-retry times the GET that resumes the dropped tools/call stream, and its server takes
    # any GET for that resumption: an optional standalone GET stream opened late (the machine
    # busy) would be timed instead and look like a reconnection that ignored `retry`.
    transport = StreamableHTTPClientTransport(url, open_get_stream=scenario != "sse-retry", auth=auth)
    profile = MCPProfile(role="client")
    peer = Peer(transport, _client_dispatcher(), profile=profile, name="conformance-client", default_timeout=30.0)
    async with peer:
        init = await peer.request("initialize", {
            "protocolVersion": LATEST_HANDSHAKE,
            "capabilities": {"elicitation": {}, "sampling": {}, "roots": {"listChanged": True}},
            "clientInfo": {"name": "sturdyrpc-conformance-client", "version": __version__},
        })
        profile.set_version(init.get("protocolVersion", LATEST_HANDSHAKE))
        await peer.notify("notifications/initialized")
        tools = (await peer.request("tools/list", {})).get("tools", [])
        names = [t.get("name") for t in tools if type(t) is dict]
        if scenario == "tools_call" and "add_numbers" in names:
            await peer.request("tools/call", {"name": "add_numbers", "arguments": {"a": 5, "b": 3}})
        elif scenario.startswith("elicitation"):
            for name in names:
                await peer.request("tools/call", {"name": name, "arguments": {}})
        elif scenario == "sse-retry" and "test_reconnection" in names:
            await peer.request("tools/call", {"name": "test_reconnection", "arguments": {}}, timeout=20.0)
        elif scenario not in ("initialize", "tools_call"):
            for name in names:
                await peer.request("tools/call", {"name": name, "arguments": {}})


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        sys.stderr.write("usage: python -m sturdyrpc.demos.conformance_client URL\n")
        return 2
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "initialize")
    try:
        asyncio.run(run(args[-1], scenario, os.environ.get("MCP_CONFORMANCE_CONTEXT")))
    except Exception as exc:
        sys.stderr.write(f"conformance client failed: {exc!r}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
