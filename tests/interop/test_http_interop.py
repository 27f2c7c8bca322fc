"""Interop over Streamable HTTP with the official SDKs.

- The official Python SDK client (PyPI ``mcp``) against our server, 2026-07-28 ("auto") and
  2025-11-25 ("legacy"): tools, progress, concurrency, cancellation, errors without internals,
  resources/prompts/completion/logging/sampling/elicitation, and a dropped-stream resumption.
  Every message our server writes is recorded at the ASGI layer and validated against the
  official JSON Schema of the negotiated version.
- Our client (``connect_http``) against the official Python SDK's HTTP server, every version.
- The TypeScript SDK clients (1.x, 2.x; installed by scripts/install_ts_sdks.sh) when present.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import jsonschema
import pytest
from support import SERVERS
from support.http import free_port, server_process
from support.mcp import has_def, validate_def, validate_server_message
from support.sdk import Client, check_http_session, client_callbacks, need_python_sdk
from support.thirdparty import node, ts_sdk

from sturdyrpc.demos.mcp_http import make_demo_app
from sturdyrpc.mcp_http.sse import SSEParser

pytestmark = [pytest.mark.timeout(90), pytest.mark.filterwarnings("ignore:.*2026-07-28")]



class Recorder:
    """Wraps an ASGI app; keeps every JSON-RPC message in (POST bodies) and out (JSON bodies, SSE events)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sent: list[Any] = []
        self.received: list[Any] = []
        self.resumed = 0  # GETs carrying Last-Event-ID
        self.versions: set[str] = set()  # MCP-Protocol-Version headers seen

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        hdrs = {k.lower(): v for k, v in scope["headers"]}
        if scope["method"] == "GET" and b"last-event-id" in hdrs:
            self.resumed += 1
        if b"mcp-protocol-version" in hdrs:
            self.versions.add(hdrs[b"mcp-protocol-version"].decode())
        body = bytearray()

        async def rec_receive() -> Any:
            m = await receive()
            if m["type"] == "http.request":
                body.extend(m.get("body", b""))
                if not m.get("more_body") and body:
                    try:
                        self.sent.append(json.loads(bytes(body)))
                    except ValueError:
                        pass
            return m

        kind: list[str] = [""]
        parser = SSEParser()
        out = bytearray()

        async def rec_send(m: Any) -> None:
            if m["type"] == "http.response.start":
                for k, v in m.get("headers", []):
                    if k.lower() == b"content-type":
                        kind[0] = v.decode()
            elif m["type"] == "http.response.body":
                chunk = m.get("body", b"")
                if kind[0].startswith("text/event-stream"):
                    for ev in parser.feed(chunk):
                        self.received.append(json.loads(ev.data))
                elif kind[0].startswith("application/json"):
                    out.extend(chunk)
                    if not m.get("more_body") and out:
                        self.received.append(json.loads(bytes(out)))
            await send(m)

        await self.app(scope, rec_receive, rec_send)

    def validate(self, version: str) -> int:
        methods: dict[Any, str] = {}
        for m in self.sent:
            for item in m if isinstance(m, list) else [m]:
                if isinstance(item, dict) and "method" in item and "id" in item:
                    methods[(type(item["id"]), item["id"])] = item["method"]
        for msg in self.received:
            try:
                validate_server_message(version, msg, methods)
            except jsonschema.ValidationError as exc:
                raise AssertionError(f"{version}: does not validate: {json.dumps(msg)[:400]}\n{exc.message}") from None
        return len(self.received)


@asynccontextmanager
async def serve(app: Any) -> AsyncIterator[str]:
    """Run ``app`` on uvicorn in this event loop, on a free 127.0.0.1 port; yield the MCP URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(500):
            if server.started:
                break
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


def _no_reply_to_cancelled(rec: Recorder) -> None:
    slow30 = {m["id"] for m in rec.sent if isinstance(m, dict) and m.get("method") == "tools/call"
              and (m.get("params") or {}).get("arguments") == {"seconds": 30}}
    assert slow30
    answered = {m.get("id") for m in rec.received if isinstance(m, dict) and ("result" in m or "error" in m)}
    assert not (slow30 & answered), "a cancelled request was answered"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_python_sdk_client_against_our_http_server(mode: str) -> None:
    need_python_sdk()
    rec = Recorder(make_demo_app())

    async def main() -> None:
        async with serve(rec) as url, Client(url, mode=mode, read_timeout_seconds=20) as c:
            assert c.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
            if mode == "legacy":
                await c.send_ping()
            await check_http_session(c, mode)
            await asyncio.sleep(0.3)

    asyncio.run(main())
    _no_reply_to_cancelled(rec)
    assert rec.validate("2026-07-28" if mode == "auto" else "2025-11-25") >= 15


def test_python_sdk_features_and_resumption_over_http() -> None:
    need_python_sdk()
    import mcp.types as mt

    rec = Recorder(make_demo_app())
    logs: list[Any] = []

    async def main() -> None:
        async with serve(rec) as url, Client(url, mode="legacy", read_timeout_seconds=20, **client_callbacks(logs)) as c:
            res = await c.list_resources()
            assert "test://static-text" in {str(r.uri) for r in res.resources}
            rr = await c.read_resource("test://template/123/data")
            assert '"id":"123"' in rr.contents[0].text
            p = await c.get_prompt("test_prompt_with_arguments", {"arg1": "hello", "arg2": "world"})
            assert "hello" in p.messages[0].content.text
            comp = await c.complete(mt.PromptReference(type="ref/prompt", name="test_prompt_with_arguments"), {"name": "arg1", "value": "par"})
            assert "paris" in comp.completion.values
            await c.set_logging_level("debug")
            await c.call_tool("test_tool_with_logging", {})
            r = await c.call_tool("test_sampling", {"prompt": "Capital of France?"})
            assert r.content[0].text == "LLM response: Paris"
            r = await c.call_tool("test_elicitation", {"message": "who?"})
            assert "action=accept" in r.content[0].text
            await c.subscribe_resource("test://watched-resource")
            await c.unsubscribe_resource("test://watched-resource")
            # the server drops the SSE stream mid-call; the SDK resumes with Last-Event-ID
            r = await c.call_tool("test_reconnection", {})
            assert r.content[0].text == "Reconnection test completed successfully"

    asyncio.run(main())
    assert len(logs) >= 3
    assert rec.resumed >= 1  # the reconnection's reply came on a resumed GET, not the original POST
    assert rec.validate("2025-11-25") >= 15


SDK_HTTP_SERVER = [sys.executable, str(SERVERS / "mcp_py_sdk_http_server.py")]


@pytest.mark.parametrize("protocol", [None, "2025-11-25", "2025-06-18", "2025-03-26"])
def test_our_client_against_python_sdk_http_server(protocol: str | None) -> None:
    need_python_sdk()
    from sturdyrpc.mcp_http.connect import connect_http

    port = free_port()
    from sturdyrpc.mcp_http.client import StreamableHTTPClientTransport

    sent: list[bytes] = []

    class Recording(StreamableHTTPClientTransport):
        async def send(self, data: bytes) -> None:
            sent.append(data)
            await super().send(data)

    async def main() -> None:
        t = Recording(f"http://127.0.0.1:{port}/mcp")
        async with connect_http(f"http://127.0.0.1:{port}/mcp", protocol, timeout=20, transport=t) as c:
            assert c.version == (protocol or "2026-07-28")
            assert c.server_info.get("name") == "python-sdk-demo"
            names = {t["name"] for t in await c.list_tools()}
            assert {"echo", "add", "slow"} <= names
            r = await c.call_tool("echo", {"text": "hi"})
            assert r["content"][0]["text"] == "hi"
            seen: list[float] = []
            r = await c.call_tool("slow", {"seconds": 0.1, "steps": 2}, on_progress=lambda p, t, m: seen.append(p))
            assert r["content"][0]["text"].startswith("slept") and seen == [1, 2]
            rs = await asyncio.gather(*(c.call_tool("add", {"a": i, "b": 1}) for i in range(10)))
            assert [x["structuredContent"]["result"] for x in rs] == [i + 1 for i in range(10)]

    with server_process(SDK_HTTP_SERVER + [str(port)], port):
        asyncio.run(main())
    # every message our client sent validates against the negotiated version's schema
    version = protocol or "2026-07-28"
    n = 0
    for raw in sent:
        msg = json.loads(raw)
        if isinstance(msg, dict) and msg.get("method") == "server/discover" and version != "2026-07-28":
            continue  # the era probe is not a message of the handshake-era version
        validate_def(version, "JSONRPCMessage", msg)
        name = CLIENT_DEFS.get(msg.get("method", ""))
        if name is not None and has_def(version, name):
            validate_def(version, name, msg)
            n += 1
    assert n >= 14


CLIENT_DEFS = {"initialize": "InitializeRequest", "notifications/initialized": "InitializedNotification",
               "tools/list": "ListToolsRequest", "tools/call": "CallToolRequest", "server/discover": "DiscoverRequest"}


# --------------------------------------------------------------------------- TypeScript SDK clients

TS_CLIENT = SERVERS / "ts_http" / "client.mjs"


@pytest.mark.parametrize("major", ["1", "2"])
def test_typescript_sdk_client_against_our_http_server(major: str) -> None:
    modules = ts_sdk(major) / "node_modules"
    rec = Recorder(make_demo_app())

    async def main() -> subprocess.CompletedProcess[str]:
        async with serve(rec) as url:
            env = dict(os.environ, NODE_PATH=str(modules))
            proc = await asyncio.create_subprocess_exec(node(), str(TS_CLIENT), url, str(modules), env=env,
                                                        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            return subprocess.CompletedProcess([], proc.returncode or 0, out.decode(), err.decode())

    r = asyncio.run(main())
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["echo"] == "hi" and report["progress"] == [1, 2] and report["reconnection"].startswith("Reconnection")
    assert report["tools"] == ["add", "echo", "slow"] and report["add"] == "42" and report["failHidden"]
    assert report["concurrent"] == ["2", "3", "4", "5", "6"]
    modern = any(isinstance(m, dict) and "io.modelcontextprotocol/protocolVersion" in ((m.get("params") or {}).get("_meta") or {})
                 for m in rec.sent)
    inits = [m["result"]["protocolVersion"] for m in rec.received if isinstance(m, dict) and "protocolVersion" in (m.get("result") or {})]
    version = "2026-07-28" if modern else inits[0]
    sys.stderr.write(f"TS SDK {major}.x negotiated {version}; headers {sorted(rec.versions)}; resumed {rec.resumed}\n")
    if not modern:
        assert rec.resumed >= 1
    assert rec.validate(version) >= 8


class _CuttingProxy:
    """A TCP proxy on 127.0.0.1 that can drop the client side of the connections whose last request
    was a GET, leaving the server side open: the server still holds the old SSE stream when the
    client reconnects (as after a network change, or a NAT dropping an idle connection)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.conns: list[dict[str, Any]] = []
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        conn: dict[str, Any] = {"writer": writer, "get": False, "cut": False, "answered": False}
        self.conns.append(conn)

        async def up() -> None:
            try:
                while chunk := await reader.read(65536):
                    if chunk[:4] in (b"GET ", b"POST", b"DELE"):
                        conn["get"], conn["answered"] = chunk.startswith(b"GET "), False
                    uw.write(chunk)
            except OSError:
                pass
            if not conn["cut"]:
                uw.close()  # the client closed: so does the server side (the cut keeps it open)

        async def down() -> None:
            try:
                while chunk := await ur.read(65536):
                    if not conn["cut"]:
                        writer.write(chunk)
                        conn["answered"] = True
            except OSError:
                pass
            if not conn["cut"]:
                writer.close()

        await asyncio.gather(up(), down())

    def get_stream_started(self) -> bool:
        """Whether a GET response has begun reaching the client (cutting before would fail its fetch)."""
        return any(c["get"] and c["answered"] and not c["cut"] for c in self.conns)

    def cut_get_streams(self) -> int:
        n = 0
        for c in self.conns:
            if c["get"] and not c["cut"]:
                c["cut"] = True
                c["writer"].transport.abort()
                n += 1
        return n

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for c in self.conns:
            c["writer"].transport.abort()


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_typescript_sdk_1x_client_reconnecting_its_get_stream_replaces_the_held_one(version: str) -> None:
    """The TS SDK 1.x client reconnects its standalone GET stream while the server still holds the old
    connection; it used to get 409 ("Failed to reconnect SSE stream: Conflict") and lose every
    server notification from then on. Without a priming event (before 2025-11-25) the reconnect is a
    plain GET; with one it carries Last-Event-ID."""
    from sturdyrpc.mcp import MCPServer
    from sturdyrpc.mcp_http import mcp_http_app

    modules = ts_sdk("1") / "node_modules"
    server = MCPServer("reconnect-test", supported_versions=(version,))
    app = mcp_http_app(server)

    def standalone_conn() -> Any:
        for s in app.sessions.values():
            st = s.standalone
            if st is not None and not st.finished and st.conn is not None and not st.conn.closed:
                return st.conn
        return None

    async def until(pred: Any, what: str, timeout: float = 15.0) -> Any:
        for _ in range(int(timeout / 0.02)):
            v = pred()
            if v:
                return v
            await asyncio.sleep(0.02)
        raise AssertionError(f"timed out waiting for {what}")

    async def main() -> tuple[int, list[str]]:
        async with serve(app) as url:
            port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
            proxy = _CuttingProxy(port)
            pport = await proxy.start()
            env = dict(os.environ, NODE_PATH=str(modules))
            proc = await asyncio.create_subprocess_exec(node(), str(SERVERS / "ts_http" / "reconnect.mjs"),
                                                        f"http://127.0.0.1:{pport}/mcp", str(modules), env=env,
                                                        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            assert proc.stdout is not None
            lines: list[str] = []

            async def line() -> str:
                raw = await asyncio.wait_for(proc.stdout.readline(), 20)  # type: ignore[union-attr]
                lines.append(raw.decode().strip())
                return lines[-1]

            try:
                while await line() != "ready":
                    pass
                old = await until(standalone_conn, "the GET stream")
                await until(proxy.get_stream_started, "the GET response")
                assert proxy.cut_get_streams() == 1
                await until(lambda: standalone_conn() not in (None, old), "the reconnected GET stream")
                assert not old.closed or old.ended  # the held one was ended, not left dangling
                for kind in ("tools", "tools"):
                    await server.notify_list_changed(kind)
                    while not (await line()).startswith("notified"):
                        pass
                code = await asyncio.wait_for(proc.wait(), 20)
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
                await app.aclose()
                await proxy.close()
            return code, lines

    code, lines = asyncio.run(main())
    assert code == 0, lines
    assert not any("Conflict" in ln for ln in lines), lines
    assert lines.count("notified: notifications/tools/list_changed") == 2, lines
