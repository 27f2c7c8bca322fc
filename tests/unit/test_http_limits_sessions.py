"""Streamable HTTP: the stdio limits on every mode, the server-wide in-flight cap (503), a second
GET stream replacing the first, and sessions that can never lock clients out (idle timer,
per-principal cap, eviction at the global cap)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from support.http import free_port

from sturdyrpc import Dispatcher, Limits
from sturdyrpc.mcp import MCPServer
from sturdyrpc.mcp_http import StreamableHTTPApp, mcp_http_app
from sturdyrpc.mcp_http.sse import SSEParser
from sturdyrpc.transports.asgi import BearerAuth, HTTPSecurity

pytestmark = pytest.mark.timeout(60)

ACCEPT = "application/json, text/event-stream"
BASE = "http://127.0.0.1:8000"


def init_body(version: str = "2025-11-25") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def make_server(limits: Limits | None = None) -> tuple[MCPServer, dict[str, int]]:
    """A server with a ``slow`` tool that counts how many times it started."""
    server = MCPServer("limits-test", limits=limits or Limits())
    started = {"n": 0}

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleeps."""
        started["n"] += 1
        await asyncio.sleep(seconds)
        return "done"

    return server, started


def asgi_client(app: StreamableHTTPApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE, timeout=20)


async def open_session(c: httpx.AsyncClient, version: str = "2025-11-25", **headers: str) -> dict[str, str]:
    r = await c.post("/mcp", json=init_body(version), headers={"accept": ACCEPT, **headers})
    assert r.status_code == 200, r.text
    h = {"accept": ACCEPT, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": version, **headers}
    r = await c.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)
    assert r.status_code == 202
    return h


def replies(r: httpx.Response) -> list[Any]:
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        return [json.loads(e.data) for e in SSEParser().feed(r.content)]
    body = r.json()
    return body if type(body) is list else [body]


def ping(i: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "method": "ping"}


def slow_call(i: int, seconds: float) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "slow", "arguments": {"seconds": seconds}}}


# ------------------------------------------------------------------------------------ limits


@pytest.mark.parametrize("options", [{}, {"json_response": True}, {"stateless": True}],
                         ids=["sse", "json", "stateless"])
def test_batch_of_80000_pings_gets_one_batch_too_large_error_like_stdio(options: dict[str, Any]) -> None:
    server, _ = make_server()
    app = mcp_http_app(server, **options)
    batch = [ping(i) for i in range(80_000)]
    body = json.dumps(batch).encode()
    stdio_reply = json.loads(Dispatcher().receive(body))  # what stdio answers to the same bytes

    async def go() -> None:
        async with asgi_client(app) as c:
            h = {"accept": ACCEPT, "mcp-protocol-version": "2025-03-26"} if options.get("stateless") else \
                await open_session(c, "2025-03-26")
            r = await c.post("/mcp", content=body, headers={**h, "content-type": "application/json"})
            assert r.status_code == 400
            # stdio's reply, without the id: an HTTP error body may have none, and a client
            # whose schema knows no null id (2025-11-25+) would otherwise fail to read it
            assert r.json() == {k: v for k, v in stdio_reply.items() if k != "id"}
            assert r.json()["error"] == {"code": -32600, "message": "Batch too large", "data": {"limit": "max_batch", "max": 1000}}
            # a batch within the limit is still served
            r = await c.post("/mcp", json=[ping(1), ping(2)], headers=h)
            assert sorted(m["id"] for m in replies(r)) == [1, 2]
            await app.aclose()

    asyncio.run(go())


def test_http_applies_the_servers_max_batch_depth_and_message_size() -> None:
    server, _ = make_server(Limits(max_batch=3, max_depth=8, max_message_bytes=2000))
    app = mcp_http_app(server, json_response=True)

    async def go() -> None:
        async with asgi_client(app) as c:
            h = await open_session(c, "2025-03-26")
            r = await c.post("/mcp", json=[ping(i) for i in range(4)], headers=h)
            assert r.status_code == 400 and r.json()["error"]["data"] == {"limit": "max_batch", "max": 3}
            deep: Any = "x"
            for _ in range(20):
                deep = [deep]
            r = await c.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"d": deep}}, headers=h)
            assert r.status_code == 400
            assert r.json() == {"jsonrpc": "2.0", "error": {
                "code": -32600, "message": "Nesting too deep", "data": {"limit": "max_depth", "max": 8}}}
            r = await c.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"s": "x" * 3000}}, headers=h)
            assert r.status_code == 413
            assert r.json()["error"] == {"code": -32600, "message": "Message too large",
                                         "data": {"limit": "max_message_bytes", "max": 2000}}
            assert replies(await c.post("/mcp", json=ping(2), headers=h)) == [{"jsonrpc": "2.0", "id": 2, "result": {}}]
            await app.aclose()

    asyncio.run(go())


def test_flood_beyond_the_server_wide_in_flight_cap_gets_503_and_nothing_runs() -> None:
    server, started = make_server(Limits(max_server_in_flight=4))
    app = mcp_http_app(server, json_response=True)

    async def go() -> None:
        async with asgi_client(app) as c:
            a = await open_session(c, "2025-03-26")
            b = await open_session(c, "2025-03-26")
            # four slow calls from two sessions fill the server-wide cap
            running = [asyncio.ensure_future(c.post("/mcp", json=slow_call(i, 0.6), headers=a if i % 2 else b))
                       for i in range(4)]
            for _ in range(100):
                if started["n"] == 4:
                    break
                await asyncio.sleep(0.01)
            assert app.admission.full
            r = await c.post("/mcp", json=slow_call(9, 0.01), headers=a)
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert r.json()["error"]["code"] == -32000 and "busy" in r.json()["error"]["message"]
            r = await c.post("/mcp", json=[ping(10), ping(11)], headers=b)  # a batch: all or nothing
            assert r.status_code == 503
            r = await c.post("/mcp", json=init_body(), headers={"accept": ACCEPT})  # no new session either
            assert r.status_code == 503
            # a 2026-07-28 request counts against the same cap
            meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
            modern = {"jsonrpc": "2.0", "id": 12, "method": "ping", "params": {"_meta": meta}}
            r = await c.post("/mcp", json=modern, headers={"accept": ACCEPT, "mcp-protocol-version": "2026-07-28",
                                                          "mcp-method": "ping"})
            assert r.status_code == 503
            assert started["n"] == 4  # nothing refused ran
            for resp in await asyncio.gather(*running):
                assert resp.status_code == 200 and replies(resp)[0]["result"]["content"][0]["text"] == "done"
            assert app.admission.in_use == 0  # every slot came back
            assert replies(await c.post("/mcp", json=[ping(13), ping(14)], headers=b))[0]["result"] == {}
            assert app.admission.in_use == 0
            await app.aclose()

    asyncio.run(go())


def test_cancelled_request_gives_its_server_slot_back() -> None:
    server, started = make_server(Limits(max_server_in_flight=1))
    app = mcp_http_app(server, json_response=True)

    async def go() -> None:
        async with asgi_client(app) as c:
            h = await open_session(c)
            call = asyncio.ensure_future(c.post("/mcp", json=slow_call(1, 5), headers=h))
            while started["n"] == 0:
                await asyncio.sleep(0.01)
            assert app.admission.full
            cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
            assert (await c.post("/mcp", json=cancel, headers=h)).status_code == 202
            assert app.admission.in_use == 0
            assert replies(await c.post("/mcp", json=ping(2), headers=h)) == [{"jsonrpc": "2.0", "id": 2, "result": {}}]
            call.cancel()
            await app.aclose()

    asyncio.run(go())


# -------------------------------------------------------------------------- GET replacement


@asynccontextmanager
async def served(app: StreamableHTTPApp) -> AsyncIterator[str]:
    """``app`` on a real uvicorn server (streaming responses need one) at 127.0.0.1."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        await app.aclose()
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def next_event(chunks: AsyncIterator[bytes], parser: SSEParser, pred: Callable[[Any], bool]) -> Any:
    while True:
        chunk = await asyncio.wait_for(chunks.__anext__(), 5)
        for ev in parser.feed(chunk):
            if ev.data and pred(json.loads(ev.data)):
                return json.loads(ev.data)


def test_second_get_stream_replaces_the_first_and_notifications_go_to_the_new_one() -> None:
    server, _ = make_server()
    app = mcp_http_app(server)

    async def go() -> None:
        async with served(app) as url, httpx.AsyncClient(timeout=10) as c:
            r = await c.post(url, json=init_body(), headers={"accept": ACCEPT})
            h = {"accept": "text/event-stream", "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            await c.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers={**h, "accept": ACCEPT})
            async with c.stream("GET", url, headers=h) as first:
                assert first.status_code == 200
                old = first.aiter_raw()
                old_parser = SSEParser()
                old_parser.feed(await old.__anext__())  # the priming event
                async with c.stream("GET", url, headers=h) as second:
                    assert second.status_code == 200  # not 409: the client may reconnect at any time
                    # the old response ends cleanly (no error, no event lost to it)
                    rest = b"".join([chunk async for chunk in old])
                    assert old_parser.feed(rest) == []
                    new = second.aiter_raw()
                    parser = SSEParser()
                    await server.notify_list_changed("tools")
                    msg = await next_event(new, parser, lambda m: True)
                    assert msg["method"] == "notifications/tools/list_changed"
                    last = parser.last_event_id
                    assert last
                    # a third GET with Last-Event-ID resumes this stream and replays what came after it
                    await server.notify_list_changed("prompts")
                    msg = await next_event(new, parser, lambda m: True)
                    assert msg["method"] == "notifications/prompts/list_changed"
                    async with c.stream("GET", url, headers={**h, "last-event-id": last}) as third:
                        assert third.status_code == 200
                        replayed = await next_event(third.aiter_raw(), SSEParser(), lambda m: True)
                        assert replayed["method"] == "notifications/prompts/list_changed"

    asyncio.run(go())


# --------------------------------------------------------------------------------- sessions


def test_idle_sessions_expire_on_a_timer_without_new_sessions() -> None:
    server, _ = make_server()
    app = mcp_http_app(server, json_response=True, session_idle_timeout=0.2)

    async def go() -> None:
        async with asgi_client(app) as c:
            h = await open_session(c)
            assert len(app.sessions) == 1
            await asyncio.sleep(0.8)  # nobody opens a session: only the timer can end it
            assert app.sessions == {}
            assert (await c.post("/mcp", json=ping(1), headers=h)).status_code == 404
            await app.aclose()

    asyncio.run(go())


def test_default_idle_timeout_is_ten_minutes() -> None:
    server, _ = make_server()
    assert mcp_http_app(server).session_idle_timeout == 600.0


def test_principal_at_its_session_cap_evicts_its_own_least_recently_active_session() -> None:
    server, _ = make_server()
    tokens = {"tok-alice": "alice", "tok-bob": "bob"}
    app = mcp_http_app(server, json_response=True, max_sessions_per_principal=2,
                       security=HTTPSecurity(auth=BearerAuth(tokens.get)))
    alice = {"authorization": "Bearer tok-alice"}

    async def go() -> None:
        async with asgi_client(app) as c:
            bob = await open_session(c, authorization="Bearer tok-bob")
            a1 = await open_session(c, **alice)
            a2 = await open_session(c, **alice)
            assert replies(await c.post("/mcp", json=ping(1), headers=a1))  # a1 is now more recent than a2
            a3 = await open_session(c, **alice)
            assert (await c.post("/mcp", json=ping(2), headers=a2)).status_code == 404  # evicted
            for h in (a1, a3, bob):
                assert replies(await c.post("/mcp", json=ping(3), headers=h)) == [{"jsonrpc": "2.0", "id": 3, "result": {}}]
            assert sum(1 for s in app.sessions.values() if s.principal == "alice") == 2
            await app.aclose()

    asyncio.run(go())


def test_anonymous_clients_filling_the_session_table_lock_a_new_client_out_for_evict_idle_after_at_most() -> None:
    """Without auth nothing tells clients apart: at max_sessions a newcomer waits (503 +
    Retry-After) until a session has been idle for evict_idle_after, which then makes room; a
    session with a response open is never the one."""
    server, _ = make_server()
    app = mcp_http_app(server, json_response=True, max_sessions=3, evict_idle_after=0.3)

    async def go() -> None:
        async with asgi_client(app) as c:
            first = await open_session(c)
            busy = asyncio.ensure_future(c.post("/mcp", json=slow_call(1, 2.0), headers=first))  # an open response
            await asyncio.sleep(0.4)
            flood = [await open_session(c) for _ in range(2)]
            r = await c.post("/mcp", json=init_body(), headers={"accept": ACCEPT})
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert len(app.sessions) == 3
            await asyncio.sleep(0.4)
            newcomer = await open_session(c)
            assert replies(await c.post("/mcp", json=ping(2), headers=newcomer)) == [{"jsonrpc": "2.0", "id": 2, "result": {}}]
            # the least recently active idle session went; the one with a response open stayed
            assert (await c.post("/mcp", json=ping(3), headers=flood[0])).status_code == 404
            assert (await busy).status_code == 200
            assert replies(await c.post("/mcp", json=ping(4), headers=first))[0]["result"] == {}
            await app.aclose()

    asyncio.run(go())


def test_streamable_http_names_the_bound_when_an_id_cannot_be_echoed_exactly() -> None:
    """The core's reason reaches the HTTP client (as on stdio), alone and as a batch element."""

    async def go() -> None:
        server, _ = make_server()
        app = mcp_http_app(server)
        async with asgi_client(app) as c:
            h = await open_session(c, "2025-03-26")
            long_id = "9" * 5000
            body = ('{"jsonrpc":"2.0","id":' + long_id + ',"method":"ping"}').encode()
            r = await c.post("/mcp", content=body, headers={**h, "content-type": "application/json"})
            assert r.status_code == 400
            err = r.json()["error"]
            assert err["code"] == -32600 and "4300" in err["message"].replace(",", ""), err
            r = await c.post("/mcp", content=b'[{"jsonrpc":"2.0","id":1e-400,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]',
                             headers={**h, "content-type": "application/json"})
            replies = r.json() if r.headers["content-type"].startswith("application/json") else None
            if replies is None:
                replies = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()]
                replies = [x for part in replies for x in (part if isinstance(part, list) else [part])]
            bad = [x for x in replies if "error" in x]
            assert len(bad) == 1 and bad[0]["id"] is None and bad[0]["error"]["code"] == -32600, replies
            assert "exactly" in bad[0]["error"]["message"], bad
            assert any(x.get("id") == 2 and "result" in x for x in replies), replies

    asyncio.run(go())
