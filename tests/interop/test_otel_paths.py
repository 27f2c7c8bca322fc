"""OpenTelemetry on every path that answers a request (issue 12): a Streamable HTTP session's
inline tool answered on the POST's own turn (stdio's: test_otel's stdio test, whose echo and boom
tools are inline), 2026-07-28 stateless HTTP, plain JSON-RPC over HTTP (W3C headers and a params
key) and sessions in a shared store (any worker serves any session). In process, under httpx's
ASGI transport; the SDK's in-memory exporter and reader."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from support.http import open_session

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402
from support.otel import SECRET, Telemetry, no_secret_in, sha  # noqa: E402

from sturdyrpc import Dispatcher  # noqa: E402
from sturdyrpc.mcp import MCPContext, MCPServer  # noqa: E402
from sturdyrpc.otel import TraceParamsProfile, instrument_client, instrument_server  # noqa: E402

pytestmark = pytest.mark.timeout(60)

ACCEPT = "application/json, text/event-stream"
BASE = "http://127.0.0.1:8000"
MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}
TRACE, SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE}-{SPAN}-01"


def make_server() -> MCPServer:
    server = MCPServer("otel-paths", "1.0")

    @server.tool(blocking=False)  # inline: answered on the turn its request is read
    def echo(text: str) -> str:
        """Echo the text."""
        return text

    @server.tool(blocking=False)
    def boom(token: str) -> str:
        """Fail unexpectedly, with the token in the exception's text."""
        raise RuntimeError(f"database password is {token}")

    return server


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE, timeout=20)


def parented(span: Any) -> bool:
    return span.parent is not None and f"{span.parent.span_id:016x}" == SPAN and f"{span.context.trace_id:032x}" == TRACE


def tools_call(id_: Any, name: str, meta: dict[str, Any] | None = None, **args: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": args}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": params}


def test_streamable_http_inline_tool_answered_on_the_posts_turn_has_spans() -> None:
    # Without telemetry this tools/call is answered inline on the POST's own turn; with it, the
    # call goes through the chain (the telemetry middleware) and the span must exist all the same.
    from sturdyrpc.mcp_http import mcp_http_app

    t = Telemetry()
    server = make_server()
    instrument_server(server, **t.providers)
    app = mcp_http_app(server)

    async def go() -> str:
        async with client(app) as c:
            h = await open_session(c)
            r = await c.post("/mcp", json=tools_call(5, "echo", {"traceparent": TRACEPARENT}, text="hi"), headers=h)
            assert r.status_code == 200 and "hi" in r.text
            r = await c.post("/mcp", json=tools_call(6, "boom", token=SECRET), headers=h)
            assert r.status_code == 200 and '"isError":true' in r.text.replace(" ", "")
            await app.aclose()
            return h["mcp-session-id"]

    sid = asyncio.run(go())
    s = t.span("tools/call echo", SpanKind.SERVER, **{"jsonrpc.request.id": "5"})
    assert parented(s)
    assert s.attributes["mcp.session.id"] == sha(sid) and s.attributes["gen_ai.operation.name"] == "execute_tool"
    assert s.attributes["network.transport"] == "tcp" and s.attributes["mcp.protocol.version"] == "2025-11-25"
    b = t.span("tools/call boom", SpanKind.SERVER)
    assert b.attributes["error.type"] == "tool_error" and b.status.status_code == StatusCode.ERROR
    assert b.attributes["sturdyrpc.incident.id"]
    no_secret_in(t.spans())


def test_stateless_2026_07_28_spans() -> None:
    from sturdyrpc.mcp_http import mcp_http_app

    t = Telemetry()
    server = make_server()
    instrument_server(server, **t.providers)
    app = mcp_http_app(server)
    h = {"accept": ACCEPT, "mcp-protocol-version": MODERN}

    async def go() -> None:
        async with client(app) as c:
            r = await c.post("/mcp", json=tools_call(1, "echo", {**META, "traceparent": TRACEPARENT}, text="hi"),
                             headers={**h, "mcp-method": "tools/call", "mcp-name": "echo"})
            assert r.status_code == 200 and r.json()["result"]["content"][0]["text"] == "hi"
            # the W3C header alone parents the span too
            r = await c.post("/mcp", json=tools_call(2, "boom", META, token=SECRET),
                             headers={**h, "mcp-method": "tools/call", "mcp-name": "boom", "traceparent": TRACEPARENT})
            assert r.status_code == 200 and r.json()["result"]["isError"] is True
            await app.aclose()

    asyncio.run(go())
    s = t.span("tools/call echo", SpanKind.SERVER)
    assert parented(s)
    assert s.attributes["mcp.protocol.version"] == MODERN and s.attributes["jsonrpc.request.id"] == "1"
    assert s.attributes["network.transport"] == "tcp" and s.attributes["network.protocol.name"] == "http"
    assert "mcp.session.id" not in s.attributes  # 2026-07-28 has no session
    b = t.span("tools/call boom", SpanKind.SERVER)
    assert parented(b) and b.attributes["error.type"] == "tool_error" and b.attributes["sturdyrpc.incident.id"]
    points = t.points("mcp.server.operation.duration")
    assert sum(p.count for p in points if p.attributes.get("gen_ai.tool.name") == "echo") == 1
    assert not t.points("mcp.server.session.duration")  # no session, no session duration
    no_secret_in(t.spans())


def test_plain_jsonrpc_over_http_headers_and_params_key() -> None:
    from sturdyrpc.transports.http import JSONRPCHTTPApp

    t = Telemetry()
    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def add(a: int, b: int) -> int:
        return a + b

    @rpc.method(blocking=False)
    def fail(token: str) -> int:
        raise ValueError(f"bad {token}")

    instrument_server(rpc, params_key="_trace", **t.providers)
    app = JSONRPCHTTPApp(rpc, profile=TraceParamsProfile("_trace"))
    other_trace, other_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"

    async def go() -> None:
        async with client(app) as c:
            r = await c.post("/", json={"jsonrpc": "2.0", "id": 1, "method": "add", "params": {"a": 1, "b": 2}},
                             headers={"traceparent": TRACEPARENT})
            assert r.json() == {"jsonrpc": "2.0", "result": 3, "id": 1}
            r = await c.post("/", json={"jsonrpc": "2.0", "id": 2, "method": "add",
                                        "params": {"a": 1, "b": 2, "_trace": {"traceparent": TRACEPARENT}}},
                             headers={"traceparent": f"00-{other_trace}-{other_span}-01"})
            assert r.json()["result"] == 3
            r = await c.post("/", json={"jsonrpc": "2.0", "id": 3, "method": "fail", "params": {"token": SECRET}})
            assert r.json()["error"]["code"] == -32603

    asyncio.run(go())
    by_header = t.span("add", SpanKind.SERVER, **{"jsonrpc.request.id": "1"})
    assert parented(by_header) and by_header.attributes["network.protocol.name"] == "http"
    by_key = t.span("add", SpanKind.SERVER, **{"jsonrpc.request.id": "2"})
    assert parented(by_key) and [f"{ln.context.span_id:016x}" for ln in by_key.links] == [other_span]
    f = t.span("fail", SpanKind.SERVER)
    assert f.attributes["error.type"] == "ValueError" and f.attributes["rpc.response.status_code"] == "-32603"
    assert f.attributes["sturdyrpc.incident.id"]
    assert sum(p.count for p in t.points("rpc.server.call.duration")) == 3
    no_secret_in(t.spans())


def test_shared_store_sessions_any_worker_has_spans() -> None:
    # Sessions in Redis: the worker that did not see the initialize serves the session on a
    # replica; its requests get spans with the same (hashed) session id and the caller's parent.
    from support.redis import RedisServer, unique_prefix

    from sturdyrpc.mcp_http import mcp_http_app
    from sturdyrpc.store import open_store

    srv = RedisServer()
    srv.start()
    try:
        t = Telemetry()
        prefix = unique_prefix()
        servers = [make_server(), make_server()]
        for s in servers:
            instrument_server(s, **t.providers)
        apps = [mcp_http_app(s, store=open_store(srv.url, prefix=prefix)) for s in servers]

        async def go() -> str:
            async with client(apps[0]) as c0, client(apps[1]) as c1:
                h = await open_session(c0)
                r = await c1.post("/mcp", json=tools_call(5, "echo", {"traceparent": TRACEPARENT}, text="hi"), headers=h)
                assert r.status_code == 200 and "hi" in r.text, r.text
                r = await c0.post("/mcp", json=tools_call(6, "echo", text="again"), headers=h)
                assert r.status_code == 200 and "again" in r.text
                for app in apps:
                    await app.aclose()
                return h["mcp-session-id"]

        sid = asyncio.run(go())
    finally:
        srv.stop()
    on_replica = t.span("tools/call echo", SpanKind.SERVER, **{"jsonrpc.request.id": "5"})
    assert parented(on_replica)
    assert on_replica.attributes["mcp.session.id"] == sha(sid) and on_replica.attributes["mcp.protocol.version"] == "2025-11-25"
    assert on_replica.attributes["network.transport"] == "tcp"
    t.span("tools/call echo", SpanKind.SERVER, **{"jsonrpc.request.id": "6"})
    # one initialize span: the client's; the replica's replay of it behind the scenes is no request
    inits = [s for s in t.spans() if s.name == "initialize"]
    assert [s.attributes["jsonrpc.request.id"] for s in inits] == ["0"], [dict(s.attributes) for s in inits]
    assert len([s for s in t.spans() if s.name == "notifications/initialized"]) == 1
    # ... nor counted as one: one initialize in the duration histogram
    assert sum(p.count for p in t.points("mcp.server.operation.duration") if p.attributes.get("mcp.method.name") == "initialize") == 1


@pytest.mark.parametrize("protocol", ["2025-11-25", "2026-07-28"])
def test_cancellation_and_progress_notifications_get_spans(protocol: str) -> None:
    # The peer handles notifications/cancelled and notifications/progress itself (the dispatcher
    # never sees them) and sends the cancellation of a call it gave up on on the spot: spans too.
    t = Telemetry()
    server = MCPServer("notices", "1.0")
    started = asyncio.Event()

    @server.tool()
    async def slow(ctx: MCPContext) -> str:
        """Report progress, then wait to be cancelled."""
        await ctx.report_progress(1, 2, "half")
        started.set()
        await asyncio.sleep(10)
        return "never"

    instrument_server(server, **t.providers)
    progress: list[Any] = []

    async def go() -> None:
        async with server.test_client(protocol) as client:
            instrument_client(client, **t.providers)
            task = asyncio.ensure_future(client.call_tool("slow", {}, on_progress=lambda *a: progress.append(a)))
            await asyncio.wait_for(started.wait(), 5)
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.1)

    asyncio.run(go())
    assert progress
    sent = t.span("notifications/cancelled", SpanKind.CLIENT)
    got = t.span("notifications/cancelled", SpanKind.SERVER)
    assert got.parent is not None and got.parent.span_id == sent.context.span_id  # across the wire, in _meta
    assert got.attributes["mcp.method.name"] == "notifications/cancelled" and "jsonrpc.request.id" not in got.attributes
    t.span("notifications/progress", SpanKind.CLIENT)  # sent by the server through notify()
    received = t.span("notifications/progress", SpanKind.SERVER)  # handled by the client's peer itself
    assert received.attributes["mcp.method.name"] == "notifications/progress"
    if protocol == "2025-11-25":
        assert got.attributes["mcp.session.id"] and got.attributes["mcp.protocol.version"] == protocol
    counts = {p.attributes["mcp.method.name"]: p.count for p in t.points("mcp.server.operation.duration")}
    assert counts.get("notifications/cancelled") == 1 and counts.get("notifications/progress") == 1
    no_secret_in(t.spans())
