"""MCP Streamable HTTP server (``sturdyrpc demo --mcp --http``) spoken to with raw HTTP, and our client.

Covers: sessions (issued on initialize, 400 without, 404 once ended, DELETE), Accept rules, 202
for notifications, SSE with related messages before the reply, JSON mode, the GET stream,
MCP-Protocol-Version checks, resumption with Last-Event-ID (never another stream's events),
Origin/Host checks, the body limit, 2026-07-28 header rules and cancellation by closing the
stream, and two uvicorn workers serving stateless traffic.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from support.http import demo_http_cmd, free_port, server_process
from support.loops import LOOP_NAMES, loop_env

from sturdyrpc.mcp_http.client import StreamableHTTPClientTransport
from sturdyrpc.mcp_http.sse import SSEParser

pytestmark = pytest.mark.timeout(60)

ACCEPT = "application/json, text/event-stream"
V = "2025-11-25"
MODERN = "2026-07-28"


def init_body(id_: Any = 0, version: str = V) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {"sampling": {}, "elicitation": {}},
                       "clientInfo": {"name": "t", "version": "1"}}}


def sse_messages(text: str) -> list[tuple[str | None, Any]]:
    p = SSEParser()
    out = []
    for ev in p.feed(text.encode()):
        out.append((ev.id, json.loads(ev.data)))
    return out


@pytest.fixture(scope="module", params=LOOP_NAMES)
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The MCP demo over HTTP, on each event loop in turn."""
    port = free_port()
    with server_process(demo_http_cmd(port, mcp=True), port, env=loop_env(request.param)):
        yield f"http://127.0.0.1:{port}/mcp"


class S:
    """A raw session: initialize + initialized, then posts with the right headers."""

    def __init__(self, c: httpx.Client, url: str, version: str = V) -> None:
        self.c, self.url, self.version = c, url, version
        r = c.post(url, json=init_body(version=version), headers={"accept": ACCEPT})
        assert r.status_code == 200, r.text
        self.sid = r.headers["mcp-session-id"]
        assert all(0x21 <= ord(ch) <= 0x7E for ch in self.sid) and len(self.sid) >= 32
        msgs = sse_messages(r.text) if r.headers["content-type"].startswith("text/event-stream") else [(None, r.json())]
        assert msgs[-1][1]["result"]["protocolVersion"] == version
        r = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert r.status_code == 202 and r.content == b""

    def headers(self, **extra: str) -> dict[str, str]:
        h = {"accept": ACCEPT, "mcp-session-id": self.sid, "mcp-protocol-version": self.version}
        h.update(extra)
        return h

    def post(self, body: Any, **extra: str) -> httpx.Response:
        return self.c.post(self.url, json=body, headers=self.headers(**extra))


def call(id_: Any, name: str, args: dict[str, Any] | None = None, progress: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": args or {}}
    if progress is not None:
        params["_meta"] = {"progressToken": progress}
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": params}


def test_session_lifecycle(url: str) -> None:
    with httpx.Client(timeout=10) as c:
        s = S(c, url)
        r = s.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
        assert r.headers["mcp-session-id"] == s.sid
        msgs = sse_messages(r.text)
        assert msgs[-1][1]["id"] == 1 and "tools" in msgs[-1][1]["result"]
        # no session id -> 400; unknown -> 404
        r = c.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers={"accept": ACCEPT})
        assert r.status_code == 400 and "id" not in r.json()
        r = c.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers={"accept": ACCEPT, "mcp-session-id": "nope"})
        assert r.status_code == 404
        # DELETE ends it; afterwards 404
        assert c.delete(url, headers=s.headers()).status_code == 200
        assert s.post({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).status_code == 404
        assert c.delete(url, headers=s.headers()).status_code == 404


def test_accept_version_and_content_type_rules(url: str) -> None:
    with httpx.Client(timeout=10) as c:
        s = S(c, url)
        ping = {"jsonrpc": "2.0", "id": 5, "method": "ping"}
        assert s.post(ping, **{"mcp-protocol-version": "1999-01-01"}).status_code == 400
        assert s.post(ping, **{"mcp-protocol-version": "garbage"}).status_code == 400
        assert s.post(ping, accept="text/html").status_code == 406
        r = c.post(url, content=b"{}", headers={**s.headers(), "content-type": "text/plain"})
        assert r.status_code == 415
        r = c.post(url, content=b"{not json", headers={**s.headers(), "content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["code"] == -32700
        # an absent version header is taken as 2025-03-26, which we support
        h = s.headers()
        del h["mcp-protocol-version"]
        assert c.post(url, json=ping, headers=h).status_code == 200
        # JSON-only Accept gets a JSON reply
        r = s.post({"jsonrpc": "2.0", "id": 6, "method": "ping"}, accept="application/json")
        assert r.headers["content-type"] == "application/json" and r.json() == {"jsonrpc": "2.0", "id": 6, "result": {}}
        # batches are refused after 2025-03-26
        assert s.post([ping]).status_code == 400


def test_security_refusals(url: str) -> None:
    with httpx.Client(timeout=10) as c:
        r = c.post(url, json=init_body(), headers={"accept": ACCEPT, "origin": "http://evil.example"})
        assert r.status_code == 403 and "id" not in r.json()
        r = c.post(url, json=init_body(), headers={"accept": ACCEPT, "host": "evil.example"})
        assert r.status_code == 403
        r = c.post(url, json=init_body(), headers={"accept": ACCEPT, "origin": "http://localhost:5173"})
        assert r.status_code == 200
        big = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "a" * (5 * 1024 * 1024)}}
        assert c.post(url, json=big, headers={"accept": ACCEPT}).status_code == 413
        assert c.put(url, headers={"accept": ACCEPT}).status_code == 405


def test_related_messages_come_before_the_reply_on_the_same_stream(url: str) -> None:
    with httpx.Client(timeout=10) as c:
        s = S(c, url)
        assert s.post({"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "debug"}}).status_code == 200
        r = s.post(call(2, "test_tool_with_logging"))
        msgs = [m for _, m in sse_messages(r.text)]
        assert [m.get("method") for m in msgs[:-1]] == ["notifications/message"] * 3
        assert msgs[-1]["id"] == 2
        r = s.post(call(3, "test_tool_with_progress", progress="tok"))
        msgs = [m for _, m in sse_messages(r.text)]
        assert [m["params"]["progress"] for m in msgs[:-1]] == [0, 50, 100]
        ids = [i for i, _ in sse_messages(r.text)]
        assert len(set(ids)) == len(ids) and all(ids)


def test_server_request_on_the_post_stream_answered_by_another_post(url: str) -> None:
    async def go() -> None:
        async with httpx.AsyncClient(timeout=10) as c:
            r = await c.post(url, json=init_body(), headers={"accept": ACCEPT})
            sid = r.headers["mcp-session-id"]
            h = {"accept": ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": V}
            await c.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)
            async with c.stream("POST", url, json=call(7, "test_sampling", {"prompt": "hi"}), headers=h) as resp:
                p = SSEParser()
                async for chunk in resp.aiter_raw():
                    for ev in p.feed(chunk):
                        m = json.loads(ev.data)
                        if m.get("method") == "sampling/createMessage":
                            reply = {"jsonrpc": "2.0", "id": m["id"], "result": {
                                "role": "assistant", "content": {"type": "text", "text": "yo"}, "model": "m"}}
                            rr = await c.post(url, json=reply, headers=h)
                            assert rr.status_code == 202
                        elif m.get("id") == 7:
                            assert "LLM response: yo" in json.dumps(m["result"])
                            return
            raise AssertionError("no reply")

    asyncio.run(go())


def test_get_stream_and_resumption_never_mixes_streams(url: str) -> None:
    with httpx.Client(timeout=10) as c:
        s = S(c, url)
        # standalone GET stream opens (priming event first); a second GET replaces it (see
        # test_http_limits_sessions.py), here the first one simply ends with this block
        with c.stream("GET", url, headers={**s.headers(), "accept": "text/event-stream"}) as g:
            assert g.status_code == 200 and g.headers["content-type"] == "text/event-stream"
            chunks = g.iter_raw()  # keep a reference: a dropped generator closes the stream
            first = next(chunks)
            assert first.startswith(b"id: ") and b"retry: " in first
            get_id = first.split(b"\n", 1)[0][4:].decode()
        # two POST streams answered whole at once: nothing to resume, so no event ids (not stored)
        a = sse_messages(s.post(call(10, "echo", {"text": "A"})).text)
        b = sse_messages(s.post(call(11, "echo", {"text": "B"})).text)
        assert [i for i, _ in a + b] == [None, None] and [m["id"] for _, m in a + b] == [10, 11]
        r = s.post(call(12, "test_reconnection"))  # the server drops this stream mid-call
        p = SSEParser()
        assert p.feed(r.content) == [] and p.last_event_id and p.retry and p.last_event_id != get_id
        time.sleep(0.4)
        r2 = c.get(url, headers={**s.headers(), "accept": "text/event-stream", "last-event-id": p.last_event_id})
        replay = sse_messages(r2.text)
        assert [m["id"] for _, m in replay] == [12]
        assert "Reconnection test completed" in json.dumps(replay[0][1])
        assert c.get(url, headers={**s.headers(), "accept": "text/event-stream", "last-event-id": "bogus.1"}).status_code == 400


def test_modern_headers_and_errors(url: str) -> None:
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}

    def body(method: str, **params: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}

    with httpx.Client(timeout=10) as c:
        h = {"accept": ACCEPT, "mcp-protocol-version": MODERN}
        r = c.post(url, json=body("tools/call", name="echo", arguments={"text": "hi"}), headers={**h, "mcp-method": "tools/call", "mcp-name": "echo"})
        assert r.status_code == 200 and "mcp-session-id" not in r.headers
        res = r.json()["result"]
        assert res["resultType"] == "complete" and res["content"][0]["text"] == "hi"
        # missing / mismatched headers -> 400 -32020
        r = c.post(url, json=body("tools/call", name="echo", arguments={"text": "hi"}), headers={**h, "mcp-method": "tools/call"})
        assert r.status_code == 400 and r.json()["error"]["code"] == -32020
        r = c.post(url, json=body("tools/list"), headers=h)
        assert r.status_code == 400 and r.json()["error"]["code"] == -32020
        r = c.post(url, json=body("tools/call", name="echo", arguments={"text": "x"}), headers={**h, "mcp-method": "tools/call", "mcp-name": "add"})
        assert r.status_code == 400 and r.json()["error"]["code"] == -32020
        # base64 sentinel names are decoded before comparing
        r = c.post(url, json=body("tools/call", name="echo", arguments={"text": "x"}),
                   headers={**h, "mcp-method": "tools/call", "mcp-name": "=?base64?ZWNobw==?="})
        assert r.status_code == 200
        # _meta version must equal the header
        other = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {**meta, "io.modelcontextprotocol/protocolVersion": V}}}
        assert c.post(url, json=other, headers={**h, "mcp-method": "tools/list"}).json()["error"]["code"] == -32020
        # missing _meta fields -> 400 -32602
        r = c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}, headers={**h, "mcp-method": "tools/list"})
        assert r.status_code == 400 and r.json()["error"]["code"] == -32602
        # unsupported version -> 400 -32022 with the supported list
        r = c.post(url, json=body("tools/list"), headers={**h, "mcp-protocol-version": "2099-01-01", "mcp-method": "tools/list"})
        assert r.status_code == 400 and r.json()["error"]["code"] == -32022 and MODERN in r.json()["error"]["data"]["supported"]
        # unknown method -> 404 -32601
        r = c.post(url, json=body("nope/nope"), headers={**h, "mcp-method": "nope/nope"})
        assert r.status_code == 404 and r.json()["error"]["code"] == -32601
        # progress notifications come on the request's SSE stream before the reply
        b = body("tools/call", name="slow", arguments={"seconds": 0.1, "steps": 2})
        b["params"]["_meta"]["progressToken"] = "p"
        r = c.post(url, json=b, headers={**h, "mcp-method": "tools/call", "mcp-name": "slow"})
        msgs = [m for _, m in sse_messages(r.text)]
        assert [m.get("method") for m in msgs] == ["notifications/progress", "notifications/progress", None]
        # GET and DELETE are not part of 2026-07-28
        assert c.get(url, headers={"accept": "text/event-stream", "mcp-protocol-version": MODERN}).status_code == 405


def test_modern_closing_the_stream_cancels() -> None:
    from sturdyrpc.mcp.server import MCPServer
    from sturdyrpc.mcp_http import mcp_http_app

    server = MCPServer("t")
    state: dict[str, Any] = {}

    @server.tool()
    async def hang() -> str:
        state["started"] = True
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            state["cancelled"] = True
            raise
        return "never"

    app = mcp_http_app(server)
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "hang", "arguments": {}, "_meta": meta}}).encode()

    async def go() -> None:
        msgs: list[dict[str, Any]] = [{"type": "http.request", "body": body, "more_body": False}]
        gone = asyncio.Event()

        async def receive() -> dict[str, Any]:
            if msgs:
                return msgs.pop(0)
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(m: dict[str, Any]) -> None:
            pass

        headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), (b"accept", ACCEPT.encode()),
                   (b"mcp-protocol-version", MODERN.encode()), (b"mcp-method", b"tools/call"), (b"mcp-name", b"hang")]
        task = asyncio.create_task(app({"type": "http", "method": "POST", "path": "/mcp", "headers": headers}, receive, send))
        for _ in range(100):
            if state.get("started"):
                break
            await asyncio.sleep(0.01)
        gone.set()
        await asyncio.wait_for(task, 5)
        await asyncio.sleep(0.05)

    asyncio.run(go())
    assert state == {"started": True, "cancelled": True}


async def _client_session(url: str) -> tuple[list[tuple[str, int, str]], list[float]]:
    from sturdyrpc.mcp.profile import MCPProfile
    from sturdyrpc.peer import Peer

    t = StreamableHTTPClientTransport(url, default_retry_ms=100)
    prof = MCPProfile(role="client")
    seen: list[float] = []
    async with Peer(t, profile=prof) as peer:
        init = await peer.request("initialize", init_body()["params"])
        prof.set_version(init["protocolVersion"])
        await peer.notify("notifications/initialized")
        got = await peer.request("tools/call", {"name": "echo", "arguments": {"text": "yo"}})
        assert got["content"][0]["text"] == "yo"
        res = await peer.request("tools/call", {"name": "slow", "arguments": {"seconds": 0.05, "steps": 2}},
                                 on_progress=lambda p, tot, m: seen.append(p))
        assert res["content"][0]["text"].startswith("slept")
        # the dropped stream is resumed after the server's retry delay (SSE mode; JSON mode just answers)
        res = await peer.request("tools/call", {"name": "test_reconnection", "arguments": {}}, timeout=10)
        assert "Reconnection" in res["content"][0]["text"]
        assert t.session_id is not None
    return t.exchanges, seen


def test_our_client_sse_mode_resumes_and_deletes(url: str) -> None:
    ex, seen = asyncio.run(_client_session(url))
    assert seen == [1, 2]
    assert ("DELETE", 200, "") in ex
    assert any(m == "POST" and ct == "text/event-stream" for m, st, ct in ex)
    assert any(m == "GET" and st == 200 for m, st, _ in ex)


def test_our_client_json_mode() -> None:
    import uvicorn

    from sturdyrpc.demos.mcp_http import make_demo_app

    async def go() -> list[tuple[str, int, str]]:
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(make_demo_app(json_response=True), host="127.0.0.1", port=port, log_level="warning"))
        task = asyncio.create_task(server.serve())
        try:
            while not server.started:
                await asyncio.sleep(0.02)
            ex, _ = await _client_session(f"http://127.0.0.1:{port}/mcp")
            return ex
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, 10)

    ex = asyncio.run(go())
    posts = [ct for m, st, ct in ex if m == "POST" and st == 200]
    assert posts and all(ct == "application/json" for ct in posts)


def test_two_workers_stateless() -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "uvicorn", "--factory", "sturdyrpc.demos.mcp_http:make_stateless_demo_app",
           "--host", "127.0.0.1", "--port", str(port), "--workers", "2", "--log-level", "warning"]
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    with server_process(cmd, port):
        pids = set()
        for i in range(30):
            with httpx.Client(timeout=10) as c:  # a fresh connection each time: the kernel spreads them
                u = f"http://127.0.0.1:{port}/mcp"
                if i % 2:
                    r = c.post(u, json={"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "pid", "arguments": {}, "_meta": meta}},
                               headers={"accept": ACCEPT, "mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": "pid"})
                    assert r.status_code == 200, r.text
                    pids.add(r.json()["result"]["content"][0]["text"])
                else:
                    # handshake-era stateless: no session id, any worker answers without one
                    r = c.post(u, json={"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "pid", "arguments": {}}},
                               headers={"accept": "application/json", "mcp-protocol-version": V})
                    assert r.status_code == 200, r.text
                    assert "mcp-session-id" not in r.headers
                    pids.add(r.json()["result"]["content"][0]["text"])
        assert len(pids) == 2, pids


def test_related_messages_routed_by_request_with_several_in_flight(url: str) -> None:
    """With several requests in flight, each request's notifications go on its own stream only."""

    async def go() -> None:
        async with httpx.AsyncClient(timeout=10) as c:
            r = await c.post(url, json=init_body(), headers={"accept": ACCEPT})
            sid = r.headers["mcp-session-id"]
            h = {"accept": ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": V}
            await c.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)
            await c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "debug"}}, headers=h)
            calls = [call(10, "test_tool_with_logging"), call(11, "slow", {"seconds": 0.3, "steps": 3}, progress="p11"),
                     call(12, "test_tool_with_logging"), call(13, "slow", {"seconds": 0.2}, progress=13)]
            replies = await asyncio.gather(*(c.post(url, json=b, headers=h) for b in calls))
            for b, r in zip(calls, replies, strict=True):
                msgs = [m for _, m in sse_messages(r.text)]
                assert msgs[-1]["id"] == b["id"]
                methods = [m.get("method") for m in msgs[:-1]]
                if b["params"]["name"] == "test_tool_with_logging":
                    assert methods == ["notifications/message"] * 3, (b["id"], msgs)
                elif b["id"] == 11:
                    assert methods == ["notifications/progress"] * 3 and all(m["params"]["progressToken"] == "p11" for m in msgs[:-1])
                else:
                    assert methods == ["notifications/progress"] and msgs[0]["params"]["progressToken"] == 13

    asyncio.run(go())


def test_routed_in_starlette_with_auth_and_sessions_bound_to_principal() -> None:
    from starlette.applications import Starlette
    from starlette.routing import Route

    from sturdyrpc.demos.mcp_http import make_demo_app
    from sturdyrpc.transports.asgi import BearerAuth, HTTPSecurity

    tokens = {"tok-alice": "alice", "tok-bob": "bob"}
    mcp_app = make_demo_app(path=None, json_response=True, security=HTTPSecurity(auth=BearerAuth(tokens.get, realm="mcp")))
    app = Starlette(routes=[Route("/mcp", endpoint=mcp_app)])  # an ASGI app as endpoint: every method

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as c:
            r = await c.post("/mcp", json=init_body(), headers={"accept": ACCEPT})
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith('Bearer realm="mcp"')
            r = await c.post("/mcp?access_token=tok-alice", json=init_body(), headers={"accept": ACCEPT})
            assert r.status_code == 401  # never from the query string
            alice = {"accept": ACCEPT, "authorization": "Bearer tok-alice"}
            r = await c.post("/mcp", json=init_body(), headers=alice)
            assert r.status_code == 200 and r.headers["content-type"] == "application/json"
            sid = r.headers["mcp-session-id"]
            ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            r = await c.post("/mcp", json=ping, headers={**alice, "mcp-session-id": sid})
            assert r.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
            # bob holding alice's session id gets exactly what an unknown id gets
            bob = {"accept": ACCEPT, "authorization": "Bearer tok-bob", "mcp-session-id": sid}
            assert (await c.post("/mcp", json=ping, headers=bob)).status_code == 404
            assert (await c.delete("/mcp", headers=bob)).status_code == 404
            assert (await c.delete("/mcp", headers={**alice, "mcp-session-id": sid})).status_code == 200
            await mcp_app.aclose()

    asyncio.run(go())


def test_batches_on_2025_03_26(url: str) -> None:
    with httpx.Client(timeout=10) as c:
        s = S(c, url, version="2025-03-26")
        batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"}, call(2, "echo", {"text": "b"}),
                 {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}]
        r = s.post(batch)
        assert r.status_code == 200
        msgs = {m["id"]: m for _, m in sse_messages(r.text)}
        assert msgs[1]["result"] == {} and msgs[2]["result"]["content"][0]["text"] == "b"
        r = s.post(batch[:2], accept="application/json")
        assert sorted(m["id"] for m in r.json()) == [1, 2]
        # only notifications and responses: 202
        assert s.post([{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}]).status_code == 202
        # initialize must not be in a batch
        r = c.post(url, json=[init_body(version="2025-03-26")], headers={"accept": ACCEPT})
        assert r.status_code == 400


def test_quiet_streams_get_keepalive_comments() -> None:
    from sturdyrpc.demos.mcp_http import make_demo_app

    app = make_demo_app(keepalive_interval=0.05)  # an app option (default 15 s; the CLI's --keepalive)

    async def go() -> None:
        import uvicorn

        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
        task = asyncio.create_task(server.serve())
        try:
            while not server.started:
                await asyncio.sleep(0.01)
            u = f"http://127.0.0.1:{port}/mcp"
            async with httpx.AsyncClient(timeout=10) as c:
                r = await c.post(u, json=init_body(), headers={"accept": ACCEPT})
                h = {"accept": ACCEPT, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": V}
                await c.post(u, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)
                async with c.stream("POST", u, json=call(5, "slow", {"seconds": 0.4}), headers=h) as resp:
                    raw = b"".join([chunk async for chunk in resp.aiter_raw()])
                assert raw.count(b":\n\n") >= 2  # comments while the tool was quiet
                p = SSEParser()
                events = p.feed(raw)
                assert [json.loads(e.data)["id"] for e in events] == [5]  # comments are not events
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, 10)

    asyncio.run(go())


def test_caps_on_sessions_and_open_streams() -> None:
    from sturdyrpc.demos.mcp_http import make_demo_app

    app = make_demo_app(json_response=True, max_sessions=2, max_streams_per_session=1)
    # (a third session evicts the least recently active one: test_http_limits_sessions.py)

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as c:
            sids = []
            for _ in range(2):
                r = await c.post("/mcp", json=init_body(), headers={"accept": ACCEPT})
                assert r.status_code == 200
                sids.append(r.headers["mcp-session-id"])
            h = {"accept": ACCEPT, "mcp-session-id": sids[0], "mcp-protocol-version": V}
            slow = asyncio.ensure_future(c.post("/mcp", json=call(1, "slow", {"seconds": 0.5}), headers=h))
            await asyncio.sleep(0.2)
            r = await c.post("/mcp", json=call(2, "echo", {"text": "x"}), headers=h)
            assert r.status_code == 503  # one open stream allowed per session here
            assert (await slow).status_code == 200
            r = await c.post("/mcp", json=call(3, "echo", {"text": "x"}), headers=h)
            assert r.status_code == 200
            await app.aclose()

    asyncio.run(go())


def test_header_timer_survives_a_new_event_loop() -> None:
    """The module-wide header timer must work on every event loop, not only the first one that used
    it: a handle left pending on a closed loop used to stall every later SSE response's start."""
    from sturdyrpc.mcp_http.responses import _GenerationTimer

    timer = _GenerationTimer(0.01)

    async def leave_pending() -> None:
        timer.add(asyncio.get_running_loop().create_future())  # the loop ends before the tick

    async def fires() -> bool:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer.add(fut)
        await asyncio.wait_for(fut, 2)
        return True

    asyncio.run(leave_pending())
    assert asyncio.run(fires())
