"""sturdyrpc.otel with the real OpenTelemetry SDK (in-memory span exporter and metric reader).

Over the test client (in memory), stdio (a real subprocess that configures the SDK itself and
writes its spans to a file) and Streamable HTTP (real uvicorn on 127.0.0.1), and plain
JSON-RPC: span names, kinds, attributes, parent/child across the wire, metrics, and that no
exception text, traceback or parameter reaches telemetry.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import SERVERS
from support.http import serve_in_thread

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402
from support.otel import SECRET, Telemetry, no_secret_in, sha  # noqa: E402

from sturdyrpc import Context, Dispatcher  # noqa: E402
from sturdyrpc.errors import RPCError  # noqa: E402
from sturdyrpc.mcp import MCPContext, MCPServer, ToolError  # noqa: E402
from sturdyrpc.mcp.client import connect  # noqa: E402
from sturdyrpc.otel import TraceParamsProfile, instrument_client, instrument_server  # noqa: E402
from sturdyrpc.otel._instrument import MCP_BUCKETS  # noqa: E402
from sturdyrpc.peer import Peer  # noqa: E402
from sturdyrpc.profile import JSONRPCProfile  # noqa: E402
from sturdyrpc.transports.memory import memory_pair  # noqa: E402


def make_server() -> MCPServer:
    server = MCPServer("otel", "1.0")

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text."""
        return text

    @server.tool()
    def boom(token: str) -> str:
        """Fail unexpectedly, with the token in the exception's text."""
        raise RuntimeError(f"database password is {token}")

    @server.tool()
    def refuse() -> str:
        """Fail on purpose (a ToolError: the model sees the message)."""
        raise ToolError("not today")

    @server.prompt()
    def summary(topic: str) -> str:
        """Summarize a topic."""
        return f"Summarize {topic}"

    @server.resource("secret://vault")
    def vault() -> str:
        raise RuntimeError(f"vault key {SECRET}")

    return server


# ---------------------------------------------------------------------------------- test client


def test_test_client_spans_metrics_and_parent_child() -> None:
    t = Telemetry()
    server = make_server()
    assert instrument_server(server, **t.providers) is not None

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with server.test_client(protocol="2025-11-25") as client:
            assert instrument_client(client, **t.providers) is not None
            out["version"] = client.version
            out["session_id"] = server.sessions()[0].session_id
            out["echo"] = await client.call_tool("echo", {"text": SECRET})
            out["boom"] = await client.call_tool("boom", {"token": SECRET})
            out["refuse"] = await client.call_tool("refuse", {})
            out["prompt"] = await client.get_prompt("summary", {"topic": SECRET})
            with pytest.raises(RPCError) as unknown:
                await client.call_tool("nope", {})
            out["unknown"] = unknown.value
            with pytest.raises(RPCError) as internal:
                await client.read_resource("secret://vault")
            out["internal"] = internal.value
            await client.ping()
        return out

    out = asyncio.run(go())
    version = out["version"]
    assert version == "2025-11-25"

    # the handshake: a SERVER span for initialize and one for the notification (no request id)
    init = t.span("initialize", SpanKind.SERVER)
    assert init.attributes["jsonrpc.request.id"] is not None
    assert init.attributes["mcp.protocol.version"] == version
    note = t.span("notifications/initialized", SpanKind.SERVER)
    assert "jsonrpc.request.id" not in note.attributes
    assert note.attributes["mcp.method.name"] == "notifications/initialized"

    # tools/call echo: client span -> server span, across the in-memory wire
    c = t.span("tools/call echo", SpanKind.CLIENT)
    s = t.span("tools/call echo", SpanKind.SERVER)
    assert s.parent is not None and s.parent.span_id == c.context.span_id and s.parent.is_remote
    assert s.context.trace_id == c.context.trace_id
    for span in (c, s):
        a = span.attributes
        assert a["mcp.method.name"] == "tools/call"
        assert a["gen_ai.tool.name"] == "echo"
        assert a["gen_ai.operation.name"] == "execute_tool"
        assert a["mcp.protocol.version"] == version
        assert a["network.transport"] == "inproc"
        assert "error.type" not in a and span.status.status_code == StatusCode.UNSET
    assert c.attributes["jsonrpc.request.id"] == s.attributes["jsonrpc.request.id"]
    assert s.attributes["mcp.session.id"] == sha(out["session_id"]) != out["session_id"]
    assert "gen_ai.tool.call.arguments" not in s.attributes  # parameters: not recorded by default

    # an unexpected tool failure: tool_error with the incident id the client was told, no text
    text = out["boom"]["content"][0]["text"]
    b = t.span("tools/call boom", SpanKind.SERVER)
    assert b.attributes["error.type"] == "tool_error" and b.status.status_code == StatusCode.ERROR
    assert b.attributes["sturdyrpc.incident.id"] in text
    assert t.span("tools/call boom", SpanKind.CLIENT).attributes["error.type"] == "tool_error"
    # a ToolError is a tool error too, but no incident: nothing was logged
    r = t.span("tools/call refuse", SpanKind.SERVER)
    assert r.attributes["error.type"] == "tool_error" and "sturdyrpc.incident.id" not in r.attributes

    # prompts/get is named after the prompt
    p = t.span("prompts/get summary", SpanKind.SERVER)
    assert p.attributes["gen_ai.prompt.name"] == "summary" and "gen_ai.operation.name" not in p.attributes

    # a JSON-RPC error: its code, on both sides
    for kind in (SpanKind.CLIENT, SpanKind.SERVER):
        u = t.span("tools/call nope", kind)
        assert u.attributes["error.type"] == str(out["unknown"].code) == u.attributes["rpc.response.status_code"]
        assert u.status.status_code == StatusCode.ERROR

    # an unexpected exception outside tools: -32603, the exception's type and the same incident id
    rs = t.span("resources/read", SpanKind.SERVER)
    assert rs.attributes["error.type"] == "RuntimeError"
    assert rs.attributes["rpc.response.status_code"] == "-32603"
    assert rs.attributes["sturdyrpc.incident.id"] == out["internal"].data["incident"]
    assert rs.status.description == "Internal error"
    assert "mcp.resource.uri" not in rs.attributes
    rc = t.span("resources/read", SpanKind.CLIENT)
    assert rc.attributes["error.type"] == "-32603"

    t.span("ping", SpanKind.CLIENT)
    t.span("ping", SpanKind.SERVER)
    no_secret_in(t.spans())

    # metrics: one histogram point per attribute set, seconds, the conventions' buckets,
    # no per-request attributes (request id, session id)
    points = t.points("mcp.server.operation.duration")
    echo = [p for p in points if p.attributes.get("gen_ai.tool.name") == "echo"]
    assert len(echo) == 1 and echo[0].count == 1
    assert tuple(echo[0].explicit_bounds) == MCP_BUCKETS
    assert all("jsonrpc.request.id" not in p.attributes and "mcp.session.id" not in p.attributes for p in points)
    boom = [p for p in points if p.attributes.get("gen_ai.tool.name") == "boom"]
    assert boom[0].attributes["error.type"] == "tool_error"
    client_points = t.points("mcp.client.operation.duration")
    assert sum(p.count for p in client_points if p.attributes.get("mcp.method.name") == "tools/call") == 4
    # the session ended when the test client closed: one session duration on each side
    assert [p.count for p in t.points("mcp.server.session.duration")] == [1]
    assert [p.count for p in t.points("mcp.client.session.duration")] == [1]
    no_secret_in([dict(p.attributes) for p in points + client_points])


def test_record_params_opt_in() -> None:
    t = Telemetry()
    server = make_server()
    instrument_server(server, record_params=True, **t.providers)

    async def go() -> None:
        async with server.test_client() as client:
            await client.call_tool("echo", {"text": "visible"})

    asyncio.run(go())
    s = t.span("tools/call echo", SpanKind.SERVER)
    assert json.loads(s.attributes["gen_ai.tool.call.arguments"]) == {"text": "visible"}


def test_outermost_sees_what_other_middleware_does() -> None:
    """Added after another middleware, the telemetry still wraps it: a refusal by that middleware
    is on the span, and the span is current inside it (its own spans are children)."""
    t = Telemetry()
    server = make_server()
    seen: list[Any] = []

    @server.middleware
    async def policy(ctx: Context, call_next: Any) -> Any:
        from opentelemetry import trace

        seen.append(trace.get_current_span().get_span_context().span_id)
        if ctx.method == "prompts/get":
            raise RPCError("Forbidden by policy", code=-32001)
        return await call_next(ctx)

    instrument_server(server, **t.providers)

    async def go() -> None:
        async with server.test_client() as client:
            with pytest.raises(RPCError):
                await client.get_prompt("summary", {"topic": "x"})

    asyncio.run(go())
    s = t.span("prompts/get summary", SpanKind.SERVER)
    assert s.attributes["error.type"] == "-32001" and s.status.description == "Forbidden by policy"
    assert s.context.span_id in seen


def test_malformed_trace_context_never_fails_the_request() -> None:
    t = Telemetry()
    server = make_server()
    instrument_server(server, **t.providers)

    async def go() -> list[Any]:
        async with server.test_client() as client:  # not instrumented: _meta as the test writes it
            out = []
            for meta in ({"traceparent": 5, "tracestate": ["x"]}, {"traceparent": "00-zz-yy-01"}, {"traceparent": {"a": 1}}):
                out.append(await client.request("tools/call", {"name": "echo", "arguments": {"text": "ok"}, "_meta": meta}))
            return out

    for result in asyncio.run(go()):
        assert result["content"][0]["text"] == "ok" and not result["isError"]
    spans = [s for s in t.spans() if s.name == "tools/call echo"]
    assert len(spans) == 3 and all(s.parent is None and "error.type" not in s.attributes for s in spans)


def test_server_to_client_requests_continue_the_trace() -> None:
    """tools/call (client -> server) whose tool asks the client's LLM (server -> client) and logs:
    one trace, each hop the child of the one before."""

    t = Telemetry()
    server = make_server()

    @server.tool()
    async def ask(question: str, ctx: MCPContext) -> str:
        """Ask the client's model."""
        await ctx.info("asking")
        result = await ctx.sample([{"role": "user", "content": {"type": "text", "text": question}}], 10)
        return str(result["content"]["text"])

    instrument_server(server, **t.providers)

    def sampling(params: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": {"type": "text", "text": "42"}, "model": "m"}

    async def go() -> Any:
        async with server.test_client(protocol="2025-11-25", sampling=sampling, log_level="info") as client:
            instrument_client(client, **t.providers)
            return await client.call_tool("ask", {"question": "?"})

    result = asyncio.run(go())
    assert result.get("structuredContent") == {"result": "42"}, result
    c1 = t.span("tools/call ask", SpanKind.CLIENT)
    s1 = t.span("tools/call ask", SpanKind.SERVER)
    c2 = t.span("sampling/createMessage", SpanKind.CLIENT)  # sent by the server
    s2 = t.span("sampling/createMessage", SpanKind.SERVER)  # handled by the client
    chain = [c1, s1, c2, s2]
    assert len({x.context.trace_id for x in chain}) == 1
    for parent, child in zip(chain, chain[1:], strict=False):
        assert child.parent is not None and child.parent.span_id == parent.context.span_id, (parent.name, child.name)
    assert c2.attributes["mcp.session.id"] == s1.attributes["mcp.session.id"]
    log_out = t.span("notifications/message", SpanKind.CLIENT)
    log_in = t.span("notifications/message", SpanKind.SERVER)
    assert log_out.parent.span_id == s1.context.span_id and log_in.parent.span_id == log_out.context.span_id
    assert "jsonrpc.request.id" not in log_in.attributes


# ---------------------------------------------------------------------------------- no provider


def _python(code: str, **env: str) -> str:
    full = dict(os.environ)
    for k in list(full):
        if k.startswith("OTEL_"):
            del full[k]
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=60, check=True).stdout


def test_without_a_provider_nothing_is_installed_nor_imported() -> None:
    out = _python(
        "import sys\n"
        "from sturdyrpc.mcp import MCPServer\n"
        "from sturdyrpc.otel import instrument_server\n"
        "s = MCPServer('x')\n"
        "print(instrument_server(s), len(s.dispatcher.middleware_chain), 'opentelemetry' in sys.modules)\n"
        "import opentelemetry.trace\n"  # imported, but still no provider: still nothing
        "print(instrument_server(s), len(s.dispatcher.middleware_chain))\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "opentelemetry.trace.set_tracer_provider(TracerProvider())\n"
        "print(instrument_server(s) is not None, len(s.dispatcher.middleware_chain))\n"
    )
    assert out.split("\n")[:3] == ["None 0 False", "None 0", "True 1"]


# ---------------------------------------------------------------------------------- stdio


def test_stdio_parent_child_across_a_real_process(tmp_path: Path) -> None:
    spans_file = tmp_path / "spans.jsonl"
    t = Telemetry()

    async def go() -> dict[str, Any]:
        env = dict(os.environ, OTEL_TEST_SPANS=str(spans_file))
        async with connect([sys.executable, str(SERVERS / "otel_stdio_server.py")], protocol="2025-11-25", env=env) as client:
            instrument_client(client, **t.providers)
            return {"echo": await client.call_tool("echo", {"text": "hi"}),
                    "boom": await client.call_tool("boom", {"token": SECRET}),
                    "nested": await client.call_tool("nested", {"text": "ab"})}

    out = asyncio.run(go())
    assert out["nested"]["structuredContent"] == {"result": "AB"}
    server_spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    by_name = {s["name"]: s for s in server_spans}

    c = t.span("tools/call echo", SpanKind.CLIENT)
    s = by_name["tools/call echo"]
    assert s["kind"] == "SpanKind.SERVER"
    assert s["parent_id"] == f"0x{c.context.span_id:016x}"
    assert s["context"]["trace_id"] == f"0x{c.context.trace_id:032x}"
    assert s["attributes"]["network.transport"] == "pipe" == c.attributes["network.transport"]
    assert s["attributes"]["jsonrpc.request.id"] == c.attributes["jsonrpc.request.id"]
    assert s["attributes"]["mcp.protocol.version"] == "2025-11-25"
    assert len(s["attributes"]["mcp.session.id"]) == 32
    assert by_name["initialize"]["kind"] == "SpanKind.SERVER"

    b = by_name["tools/call boom"]
    assert b["attributes"]["error.type"] == "tool_error"
    assert b["attributes"]["sturdyrpc.incident.id"] in out["boom"]["content"][0]["text"]
    assert b["parent_id"] == f"0x{t.span('tools/call boom', SpanKind.CLIENT).context.span_id:016x}"

    # the tool's own span is the child of the request's server span (the span is current in the tool)
    assert by_name["app work"]["parent_id"] == by_name["tools/call nested"]["context"]["span_id"]
    no_secret_in(server_spans + t.spans())


def test_official_python_sdk_client_is_the_parent(tmp_path: Path) -> None:
    """Interop: the official MCP Python SDK's client puts its span in ``_meta`` the same way; its
    CLIENT span (in its own process) is the parent of our SERVER span (in the server's)."""
    pytest.importorskip("mcp.client.client")
    spans_file = tmp_path / "spans.jsonl"
    out = subprocess.run([sys.executable, str(SERVERS / "otel_sdk_client.py"), "legacy"], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, OTEL_TEST_SPANS=str(spans_file)), check=True).stdout
    theirs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    ours = {s["name"]: s for s in map(json.loads, spans_file.read_text().splitlines())}
    call = next(s for s in theirs if s["attributes"].get("mcp.method.name") == "tools/call")
    assert call["kind"] == "SpanKind.CLIENT"
    server = ours["tools/call echo"]
    assert server["parent_id"] == call["context"]["span_id"] and server["context"]["trace_id"] == call["context"]["trace_id"]
    assert server["attributes"]["jsonrpc.request.id"] == call["attributes"]["jsonrpc.request.id"]


def test_our_client_is_the_parent_of_the_official_sdk_server(tmp_path: Path) -> None:
    """Interop the other way: our CLIENT span is the parent of the official SDK server's SERVER span."""
    pytest.importorskip("mcp.server.mcpserver")
    spans_file = tmp_path / "spans.jsonl"
    t = Telemetry()

    async def go() -> None:
        env = dict(os.environ, OTEL_TEST_SPANS=str(spans_file))
        async with connect([sys.executable, str(SERVERS / "otel_sdk_server.py")], protocol="2025-11-25", env=env) as client:
            instrument_client(client, **t.providers)
            await client.call_tool("echo", {"text": "hi"})

    asyncio.run(go())
    theirs = [json.loads(line) for line in spans_file.read_text().splitlines()]
    server = next(s for s in theirs if s["kind"] == "SpanKind.SERVER" and s["name"] == "tools/call echo")
    c = t.span("tools/call echo", SpanKind.CLIENT)
    assert server["parent_id"] == f"0x{c.context.span_id:016x}" and server["context"]["trace_id"] == f"0x{c.context.trace_id:032x}"


# ---------------------------------------------------------------------------------- HTTP


@contextmanager
def serve_http(app: Any) -> Iterator[str]:
    with serve_in_thread(app) as base:
        yield base + "/mcp"


def test_http_meta_and_w3c_headers() -> None:
    from sturdyrpc.mcp_http import mcp_http_app
    from sturdyrpc.mcp_http.connect import connect_http

    t = Telemetry()
    server = make_server()
    headers_seen: dict[Any, str | None] = {}

    @server.middleware
    async def record(ctx: Context, call_next: Any) -> Any:
        headers_seen[ctx.id] = (ctx.headers or {}).get("traceparent")
        meta = ctx.meta
        headers_seen[("meta", ctx.id)] = meta.get("traceparent")
        return await call_next(ctx)

    instrument_server(server, **t.providers)
    app = mcp_http_app(server)
    foreign_trace, foreign_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    meta_trace, meta_span = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"

    async def go() -> str:
        async with connect_http(url, protocol="2025-11-25") as client:
            instrument_client(client, **t.providers)
            await client.call_tool("echo", {"text": "hi"})
            sid = client.peer.transport.session_id  # type: ignore[attr-defined]
            # a request whose trace context is in the W3C header only: the server takes it from there
            async with httpx.AsyncClient() as h:
                r = await h.post(url, json={"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}},
                                 headers={"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25",
                                          "accept": "application/json, text/event-stream",
                                          "traceparent": f"00-{foreign_trace}-{foreign_span}-01"})
                assert r.status_code == 200
                # both: _meta is the parent (the MCP convention), the header's span a link
                r = await h.post(url, json={"jsonrpc": "2.0", "id": 100, "method": "tools/call", "params": {
                    "name": "echo", "arguments": {"text": "x"}, "_meta": {"traceparent": f"00-{meta_trace}-{meta_span}-01"}}},
                                 headers={"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25",
                                          "accept": "application/json, text/event-stream",
                                          "traceparent": f"00-{foreign_trace}-{foreign_span}-01"})
                assert r.status_code == 200
            return str(sid)

    with serve_http(app) as url:
        sid = asyncio.run(go())

    c = t.span("tools/call echo", SpanKind.CLIENT)
    s = t.span("tools/call echo", SpanKind.SERVER, **{"jsonrpc.request.id": c.attributes["jsonrpc.request.id"]})
    assert s.parent is not None and s.parent.span_id == c.context.span_id and s.context.trace_id == c.context.trace_id
    for span in (c, s):
        assert span.attributes["network.transport"] == "tcp"
        assert span.attributes["network.protocol.name"] == "http"
        assert span.attributes["mcp.session.id"] == sha(sid) != sid
    # the HTTP client sent the same context as W3C headers as in _meta
    rid = int(c.attributes["jsonrpc.request.id"])
    assert headers_seen[rid] is not None and headers_seen[rid] == headers_seen[("meta", rid)]
    assert not s.links  # header and _meta name the same span: nothing to link

    note = t.span("notifications/initialized", SpanKind.SERVER)  # no POST in flight carries it: still HTTP
    assert note.attributes["network.transport"] == "tcp" and note.attributes["mcp.session.id"] == sha(sid)
    h = t.span("tools/call echo", SpanKind.SERVER, **{"jsonrpc.request.id": "99"})
    assert h.parent is not None and f"{h.parent.span_id:016x}" == foreign_span and f"{h.context.trace_id:032x}" == foreign_trace
    both = t.span("tools/call echo", SpanKind.SERVER, **{"jsonrpc.request.id": "100"})
    assert both.parent is not None and f"{both.parent.span_id:016x}" == meta_span
    assert [f"{ln.context.span_id:016x}" for ln in both.links] == [foreign_span]
    no_secret_in(t.spans())


# ---------------------------------------------------------------------------------- plain JSON-RPC


def test_plain_jsonrpc_params_key() -> None:
    t = Telemetry()
    rpc = Dispatcher()

    @rpc.method
    def add(a: int, b: int) -> int:
        return a + b

    @rpc.method
    def fail(token: str) -> int:
        raise ValueError(f"bad {token}")

    instrument_server(rpc, params_key="_trace", **t.providers)

    async def go() -> tuple[int, Any]:
        a, b = memory_pair()
        async with Peer(a, rpc, profile=TraceParamsProfile("_trace")), Peer(b, profile=JSONRPCProfile()) as client:
            instrument_client(client, params_key="_trace", **t.providers)
            total = await client.request("add", {"a": 1, "b": 2})
            with pytest.raises(RPCError) as err:
                await client.request("fail", {"token": SECRET})
            await client.request("add", [3, 4])  # positional params: traced, nothing injected
            return total, err.value

    total, err = asyncio.run(go())
    assert total == 3
    spans = [s for s in t.spans() if s.name == "add"]
    c = next(s for s in spans if s.kind == SpanKind.CLIENT and s.attributes["jsonrpc.request.id"] == "1")
    s = next(s for s in spans if s.kind == SpanKind.SERVER and s.attributes["jsonrpc.request.id"] == "1")
    assert s.parent is not None and s.parent.span_id == c.context.span_id
    assert s.attributes["rpc.system.name"] == "jsonrpc" and s.attributes["rpc.method"] == "add"
    assert "mcp.method.name" not in s.attributes
    positional = next(s for s in spans if s.kind == SpanKind.SERVER and s.attributes["jsonrpc.request.id"] == "3")
    assert positional.parent is None
    f = t.span("fail", SpanKind.SERVER)
    assert f.attributes["error.type"] == "ValueError" and f.attributes["sturdyrpc.incident.id"] == err.data["incident"]
    assert [p.count for p in t.points("rpc.server.call.duration") if p.attributes["rpc.method"] == "add"] == [2]
    no_secret_in(t.spans())


def test_serving_turns_telemetry_on_by_itself_when_the_sdk_is_configured(tmp_path: Path) -> None:
    """The real SDK configured before serving, no ``instrument_server`` call: the server's spans
    are there all the same (as with the official SDK and FastMCP)."""
    spans_file = tmp_path / "spans.jsonl"

    async def go() -> None:
        env = dict(os.environ, OTEL_TEST_SPANS=str(spans_file), OTEL_AUTO="1")
        async with connect([sys.executable, str(SERVERS / "otel_stdio_server.py")], protocol="2025-11-25", env=env) as client:
            assert (await client.call_tool("echo", {"text": "hi"}))["content"][0]["text"] == "hi"

    asyncio.run(go())
    spans = {s["name"]: s for s in map(json.loads, spans_file.read_text().splitlines())}
    assert spans["tools/call echo"]["kind"] == "SpanKind.SERVER" and "initialize" in spans


NO_SDK_SERVER = """
import asyncio, sys
from sturdyrpc.mcp import MCPServer
server = MCPServer("plain")
server.tool(lambda: "ok", name="ok")
async def main():
    async with server.test_client() as c:
        assert (await c.call_tool("ok", {}))["content"][0]["text"] == "ok"
asyncio.run(main())
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")), len(server.dispatcher.middleware_chain))
"""


def test_serving_without_a_configured_sdk_costs_nothing() -> None:
    """No provider configured: nothing of OpenTelemetry is imported, no middleware installed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", NO_SDK_SERVER], capture_output=True, text=True, timeout=60, env=env, check=True)
    assert out.stdout.split() == ["[]", "0"], out.stdout + out.stderr
