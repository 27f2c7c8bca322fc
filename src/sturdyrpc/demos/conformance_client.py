"""The client the MCP conformance suite drives: ``python -m sturdyrpc.demos.conformance_client URL``.

The suite starts a test server per scenario and names it in ``MCP_CONFORMANCE_SCENARIO``.
This client is the library's MCP client over Streamable HTTP (:func:`~sturdyrpc.mcp_http.connect_http`,
which chooses the era: ``server/discover`` first, ``initialize`` for a server that does not
know it; ``MCP_CONFORMANCE_PROTOCOL_VERSION`` forces a version), and does what each scenario
expects:

- ``initialize``, ``json-schema-ref-no-deref``: the negotiation, then ``tools/list`` (a network
  ``$ref`` in a tool's schema is never fetched: schemas are kept as sent);
- ``tools_call``: calls ``add_numbers`` ({a: 5, b: 3}) and every other listed tool without arguments;
- ``elicitation-sep1034-client-defaults``: answers ``elicitation/create`` by accepting with the
  schema's default values (SEP-1034);
- ``sse-retry``: calls ``test_reconnection``; the transport resumes the dropped stream after
  the server's ``retry`` delay with ``Last-Event-ID``;
- a context with ``toolCalls`` (``http-custom-headers``): exactly those calls (their
  ``Mcp-Param-*`` headers are the client's, SEP-2243);
- ``json-schema-2020-12-preservation``: the focal tool's ``inputSchema`` sent back unchanged to
  ``json_schema_echo``;
- any other: every listed tool called without arguments (a tool whose ``x-mcp-header``
  annotations break SEP-2243's rules is not listed by the client, so never called).
- ``auth/*``: the same session through :class:`~sturdyrpc.oauth.OAuthClientProvider` (every tool
  called); the suite's authorization server redirects at once, so the redirect is followed
  (:class:`~sturdyrpc.oauth.FollowRedirectHandler`). Pre-registered credentials come from
  ``MCP_CONFORMANCE_CONTEXT``; the Client ID Metadata Document URL is the suite's fixed one.
  The extension scenarios use the grants without a user (:mod:`sturdyrpc.oauth.grants`) with
  the context's credentials: ``client_credentials`` with a secret or a private key
  (``auth/client-credentials-*``), the ID token exchanged at the identity provider, then the
  JWT bearer grant (``auth/enterprise-managed-authorization``), the workload's JWT
  (``auth/wif-jwt-bearer``); ``auth/dpop*`` add DPoP proofs to the usual flow.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from typing import Any

from .._version import __version__
from ..mcp.client import MCPClient
from ..mcp.skills import SKILLS_EXTENSION, SkillVerificationError, list_skills, load_skill, read_skill_file
from ..mcp_http.client import StreamableHTTPClientTransport
from ..mcp_http.connect import connect_http
from ..oauth import FollowRedirectHandler, OAuthClientProvider
from ..oauth.grants import ClientCredentialsGrant, EnterpriseGrant, Grant, JWTBearerGrant

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


#: The suite's fixed client id for Client ID Metadata Documents (it does not fetch it).
CIMD_URL = "https://conformance-test.local/client-metadata.json"


def _context(context: str | None) -> dict[str, Any]:
    """``MCP_CONFORMANCE_CONTEXT`` as an object (empty when absent or not an object)."""
    try:
        ctx = json.loads(context) if context else {}
    except ValueError:
        return {}
    return ctx if type(ctx) is dict else {}


def tool_calls(context: str | None) -> list[dict[str, Any]]:
    """The calls a scenario's context asks for (``toolCalls``: ``[{name, arguments}]``)."""
    calls = _context(context).get("toolCalls")
    return [c for c in calls if type(c) is dict and type(c.get("name")) is str] if type(calls) is list else []


def _str(ctx: dict[str, Any], key: str) -> str | None:
    value = ctx.get(key)
    return value if type(value) is str and value else None


def grant(scenario: str, ctx: dict[str, Any]) -> Grant | None:
    """The grant without a user an extension scenario asks for, from its context; else None."""
    client_id = _str(ctx, "client_id") or ""
    if scenario == "auth/client-credentials-jwt":
        return ClientCredentialsGrant(client_id, private_key=_str(ctx, "private_key_pem"),
                                      signing_algorithm=_str(ctx, "signing_algorithm") or "ES256")
    if scenario == "auth/client-credentials-basic":
        return ClientCredentialsGrant(client_id, _str(ctx, "client_secret"))
    if scenario == "auth/wif-jwt-bearer":
        return JWTBearerGrant(_str(ctx, "valid_jwt") or "", client_id=client_id or None)
    if scenario == "auth/enterprise-managed-authorization":
        return EnterpriseGrant(_str(ctx, "idp_token_endpoint") or "", _str(ctx, "idp_id_token") or "",
                               ClientCredentialsGrant(client_id, _str(ctx, "client_secret")),
                               idp_client_id=_str(ctx, "idp_client_id"))
    return None


def auth_provider(scenario: str, context: str | None) -> OAuthClientProvider | None:
    """The OAuth client for an ``auth/*`` scenario, or None for the others."""
    if not scenario.startswith("auth/"):
        return None
    ctx = _context(context)
    no_user = grant(scenario, ctx)
    if no_user is not None:
        return OAuthClientProvider(grant=no_user)
    return OAuthClientProvider(
        FollowRedirectHandler("http://127.0.0.1:3000/callback"),
        client_id=_str(ctx, "client_id"),
        client_secret=_str(ctx, "client_secret"),
        client_metadata_url=CIMD_URL,
        client_name="sturdyrpc-conformance-client",
        dpop=scenario.startswith("auth/dpop"),
    )


async def run(url: str, scenario: str, context: str | None = None, protocol: str | None = None) -> None:
    auth = auth_provider(scenario, context)
    try:
        await _session(url, scenario, auth, protocol, tool_calls(context))
    finally:
        if auth is not None:
            await auth.aclose()


async def _session(url: str, scenario: str, auth: OAuthClientProvider | None, protocol: str | None = None,
                   calls: list[dict[str, Any]] | None = None) -> None:
    # sse-retry times the GET that resumes the dropped tools/call stream, and its server takes
    # any GET for that resumption: an optional standalone GET stream opened late (the machine
    # busy) would be timed instead and look like a reconnection that ignored `retry`.
    transport = StreamableHTTPClientTransport(url, open_get_stream=scenario != "sse-retry", auth=auth)
    # The library's client chooses the era: server/discover first (2026-07-28), initialize when
    # the server does not know it; ``protocol`` (the suite's MCP_CONFORMANCE_PROTOCOL_VERSION)
    # forces a version.
    async with connect_http(url, protocol, transport=transport, sampling=_sample, elicitation=_elicit, roots=_roots,
                            client_info={"name": "sturdyrpc-conformance-client", "version": __version__}, timeout=30.0,
                            auth=auth) as client:
        if scenario.startswith("sep-2640-"):
            await _skills(client, load=scenario != "sep-2640-client-no-prefetch")
            return
        tools = [t for t in await client.list_tools() if type(t) is dict]
        names = [t.get("name") for t in tools]
        if calls:
            for call in calls:
                await client.call_tool(call["name"], call.get("arguments") or {})
        elif scenario.startswith("json-schema-2020-12") and "json_schema_echo" in names:
            # the schema of the focal tool, sent back exactly as received
            for tool in tools:
                if tool.get("name") != "json_schema_echo":
                    await client.call_tool("json_schema_echo", {"schema": tool.get("inputSchema")})
        elif scenario == "tools_call" and "add_numbers" in names:
            await client.call_tool("add_numbers", {"a": 5, "b": 3})
        elif scenario == "sse-retry" and "test_reconnection" in names:
            await client.call_tool("test_reconnection", {}, timeout=20.0)
        elif scenario not in ("initialize", "tools_call", "json-schema-ref-no-deref"):  # the last: listing only
            for name in names:
                if type(name) is str:
                    await client.call_tool(name, {})


async def _skills(client: MCPClient, *, load: bool) -> None:
    # A host lists skills at connection and reads a skill's files only when the skill is used:
    # ``load`` plays the model asking for the first skill, then for each of its files.
    if SKILLS_EXTENSION not in (client.server_capabilities.get("extensions") or {}):
        return
    entries = await list_skills(client)
    if not load or not entries:
        return
    try:
        skill = await load_skill(client, entries[0])
        for f in skill.entry.files:
            if f.uri != skill.entry.uri:
                await read_skill_file(client, skill, f.uri)
    except SkillVerificationError as exc:
        sys.stderr.write(f"skill refused: {exc}\n")


async def _elicit(params: dict[str, Any]) -> dict[str, Any]:
    return {"action": "accept", "content": defaults_from_schema(params.get("requestedSchema"))}


async def _sample(params: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": {"type": "text", "text": "A sampled reply."}, "model": "sturdyrpc-test",
            "stopReason": "endTurn"}


async def _roots() -> list[dict[str, Any]]:
    return []


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        sys.stderr.write("usage: python -m sturdyrpc.demos.conformance_client URL\n")
        return 2
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "initialize")
    try:
        asyncio.run(run(args[-1], scenario, os.environ.get("MCP_CONFORMANCE_CONTEXT"),
                        os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION") or None))
    except Exception as exc:
        sys.stderr.write(f"conformance client failed: {exc!r}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
