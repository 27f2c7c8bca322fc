"""The session table's rules, the same on both tables: the local one (one process) and the shared
one (two apps, "workers", on one real redis-server).

Caps (sessions per worker, replicas included; the global cap never ends an active session and
refuses with 503 + Retry-After instead; open streams per session, resumed ones included), a
malformed ``Last-Event-ID`` (400), and what a session leaves in Redis once abandoned (keys with
TTLs of the idle timeout and of the replay window). Apps are served by uvicorn on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx
import pytest
from support.http import ACCEPT, serve_in_loop
from support.redis import RedisServer, unique_prefix

from sturdyrpc.mcp import MCPServer
from sturdyrpc.mcp_http import close_current_stream, mcp_http_app
from sturdyrpc.mcp_http.sse import SSEParser
from sturdyrpc.store import open_store
from sturdyrpc.transports.asgi import BearerAuth, HTTPSecurity

pytestmark = pytest.mark.timeout(90)

V = "2025-11-25"
KINDS = ["local", "shared"]
TOKENS = {"tok-alice": "alice", "tok-bob": "bob", "tok-carol": "carol"}


def make_server() -> MCPServer:
    server = MCPServer("tables", "1")

    @server.tool(blocking=False)
    def echo(text: str) -> str:
        return text

    @server.tool()
    async def later(text: str) -> str:
        await asyncio.sleep(0)
        return text

    @server.tool()
    async def rows(n: int) -> list[dict[str, Any]]:
        """A large structured result (its text content is the same JSON)."""
        await asyncio.sleep(0)
        return [{"id": i, "name": f"row {i}"} for i in range(n)]

    @server.tool()
    async def detach(seconds: float) -> str:
        """Closes its SSE response at once (the client resumes) and answers later."""
        close_current_stream()
        await asyncio.sleep(seconds)
        return "late"

    return server


class Worker:
    def __init__(self, app: Any, url: str, prefix: str = "") -> None:
        self.app, self.url, self.prefix = app, url + "/mcp", prefix


@asynccontextmanager
async def workers(kind: str, request: pytest.FixtureRequest, *, options_b: dict[str, Any] | None = None,
                  **options: Any) -> AsyncIterator[list[Worker]]:
    """Two workers: the same app twice ("local") or two apps on one Redis ("shared"), the second
    with ``options_b`` on top of ``options``."""
    prefix = ""
    if kind == "local":
        apps = [mcp_http_app(make_server(), **options, **(options_b or {}))]
    else:
        redis: RedisServer = request.getfixturevalue("redis_server")
        prefix = unique_prefix()
        apps = [mcp_http_app(make_server(), store=open_store(redis.url, prefix=prefix), **options, **extra)
                for extra in ({}, options_b or {})]
    async with AsyncExitStack() as stack:
        ws = [Worker(a, await stack.enter_async_context(serve_in_loop(a)), prefix) for a in apps]
        try:
            yield ws if len(ws) == 2 else ws * 2
        finally:
            for a in apps:
                await a.aclose()


async def initialize(c: httpx.AsyncClient, w: Worker, token: str | None = None) -> dict[str, str]:
    auth = {"authorization": f"Bearer {token}"} if token else {}
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": V, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    r = await c.post(w.url, json=body, headers={"accept": ACCEPT, **auth})
    assert r.status_code == 200, r.text
    h = {"accept": ACCEPT, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": V, **auth}
    assert (await c.post(w.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)).status_code == 202
    return h


def call(i: int, name: str, **arguments: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def ping(i: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "method": "ping"}


def events(body: bytes) -> list[tuple[str | None, str]]:
    parser = SSEParser()
    out = []
    for ev in parser.feed(body):
        out.append((ev.id, ev.data))
    return out


async def detached_stream(c: httpx.AsyncClient, w: Worker, h: dict[str, str], i: int, seconds: float) -> str:
    """A POST stream whose response closes at once while its request runs on: its priming event id."""
    r = await c.post(w.url, json=call(i, "detach", seconds=seconds), headers=h)
    assert r.status_code == 200
    parser = SSEParser()
    parser.feed(r.content)
    assert parser.last_event_id is not None
    return parser.last_event_id


# ------------------------------------------------------------------------ the caps


def initialize_body() -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": V, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


@pytest.mark.parametrize("kind", KINDS)
def test_a_full_table_refuses_a_newcomer_rather_than_end_an_active_session(kind: str, request: pytest.FixtureRequest) -> None:
    """At max_sessions, with every session active (used within evict_idle_after, 5 s by
    default), another principal's new session gets 503 + Retry-After and nobody's session goes."""
    security = HTTPSecurity(auth=BearerAuth(TOKENS.get))

    async def go() -> None:
        async with workers(kind, request, json_response=True, security=security, max_sessions=2) as (a, _), \
                httpx.AsyncClient(timeout=20) as c:
            alice = await initialize(c, a, "tok-alice")
            bob = await initialize(c, a, "tok-bob")
            r = await c.post(a.url, json=initialize_body(), headers={"accept": ACCEPT, "authorization": "Bearer tok-carol"})
            assert r.status_code == 503 and r.headers["retry-after"] == "5", r.text  # when bob's will have been idle 5 s
            assert r.json()["error"] == {"code": -32000, "message": "Server busy: too many sessions"}
            for h in (alice, bob):
                assert (await c.post(a.url, json=ping(1), headers=h)).json()["result"] == {}
            assert len(a.app.sessions) == 2

    asyncio.run(go())


@pytest.mark.parametrize("kind", KINDS)
def test_at_the_cap_the_session_idle_longest_beyond_evict_idle_after_makes_room(kind: str, request: pytest.FixtureRequest) -> None:
    security = HTTPSecurity(auth=BearerAuth(TOKENS.get))

    async def go() -> None:
        async with workers(kind, request, json_response=True, security=security, max_sessions=2,
                           evict_idle_after=1.0) as (a, _), httpx.AsyncClient(timeout=20) as c:
            alice = await initialize(c, a, "tok-alice")
            bob = await initialize(c, a, "tok-bob")
            r = await c.post(a.url, json=initialize_body(), headers={"accept": ACCEPT, "authorization": "Bearer tok-carol"})
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            for _ in range(8):  # alice stays active; bob goes quiet for longer than evict_idle_after
                await asyncio.sleep(0.2)
                assert (await c.post(a.url, json=ping(2), headers=alice)).status_code == 200
            carol = await initialize(c, a, "tok-carol")
            assert (await c.post(a.url, json=ping(3), headers=alice)).json()["result"] == {}
            assert (await c.post(a.url, json=ping(4), headers=carol)).json()["result"] == {}
            # bob's session was the one let go: gone here; on a shared table only this worker's
            # replica went (the session lives on in the store), and the full table refuses to rebuild it
            assert (await c.post(a.url, json=ping(5), headers=bob)).status_code == (404 if kind == "local" else 503)
            assert len(a.app.sessions) == 2

    asyncio.run(go())


def test_replicas_another_worker_rebuilds_count_toward_max_sessions(request: pytest.FixtureRequest) -> None:
    async def go() -> None:
        async with workers("shared", request, json_response=True, options_b={"max_sessions": 3}) as (a, b), \
                httpx.AsyncClient(timeout=20) as c:
            sessions = [await initialize(c, a) for _ in range(5)]
            for h in sessions[:3]:
                assert (await c.post(b.url, json=ping(1), headers=h)).status_code == 200  # a replica each on b
            for h in sessions[3:]:
                r = await c.post(b.url, json=ping(2), headers=h)
                assert r.status_code == 503 and r.headers["retry-after"] == "5"  # b's replicas are all active
            assert len(b.app.sessions) == 3
            for h in sessions:  # the sessions themselves are fine
                assert (await c.post(a.url, json=ping(3), headers=h)).json()["result"] == {}

    asyncio.run(go())


def test_an_idle_replica_makes_room_and_is_rebuilt_when_used_again(request: pytest.FixtureRequest) -> None:
    async def go() -> None:
        async with workers("shared", request, json_response=True, options_b={"max_sessions": 3, "evict_idle_after": 0.5}) as (a, b), \
                httpx.AsyncClient(timeout=20) as c:
            sessions = [await initialize(c, a) for _ in range(4)]
            for h in sessions[:3]:
                assert (await c.post(b.url, json=ping(1), headers=h)).status_code == 200
            assert (await c.post(b.url, json=ping(2), headers=sessions[3])).status_code == 503
            await asyncio.sleep(0.7)
            assert (await c.post(b.url, json=ping(3), headers=sessions[3])).json()["result"] == {}
            assert set(b.app.sessions) == {h["mcp-session-id"] for h in sessions[1:]}  # the least recently active went
            await asyncio.sleep(0.7)
            assert (await c.post(b.url, json=ping(4), headers=sessions[0])).json()["result"] == {}  # rebuilt from the store
            assert len(b.app.sessions) == 3 and sessions[0]["mcp-session-id"] in b.app.sessions

    asyncio.run(go())


def test_resumed_streams_count_toward_the_streams_of_a_session(request: pytest.FixtureRequest) -> None:
    """A resumption on another worker follows the stream from the store, holding a connection:
    past max_streams_per_session (the GET stream counted) it gets 503 as a POST would."""
    async def go() -> None:
        async with workers("shared", request, max_streams_per_session=4) as (a, b), httpx.AsyncClient(timeout=20) as c:
            h = await initialize(c, a)
            ids = [await detached_stream(c, a, h, i, 3.0) for i in range(1, 4)]  # with the GET stream: 4 on a
            r = await c.post(a.url, json=call(9, "detach", seconds=0), headers=h)
            assert r.status_code == 503 and r.json()["error"]["message"] == "Too many open streams"
            resumes = [asyncio.ensure_future(c.get(b.url, headers={**h, "accept": "text/event-stream", "last-event-id": eid}))
                       for eid in ids * 2]
            done = await asyncio.gather(*resumes)
            codes = sorted(r.status_code for r in done)
            assert codes == [200, 200, 200, 503, 503, 503], codes
            for r in done:  # the ones let through got their request's reply from the store
                if r.status_code == 200:
                    assert json.loads(events(r.content)[-1][1])["result"]["content"][0]["text"] == "late"
            await asyncio.sleep(0.2)
            assert b.app.sessions[h["mcp-session-id"]].relays == 0  # every follow ended with its response

    asyncio.run(go())


@pytest.mark.parametrize("kind", KINDS)
def test_a_malformed_last_event_id_is_400_at_once(kind: str, request: pytest.FixtureRequest) -> None:
    async def go() -> None:
        async with workers(kind, request) as (a, b), httpx.AsyncClient(timeout=5) as c:
            h = await initialize(c, a)
            stream = (await detached_stream(c, a, h, 1, 0.5)).rpartition(".")[0]
            for bad in (f"{stream}.zzz", "g.zzz", f"{stream}.", ".1", "zzz", f"{stream}.1.2x", f"{stream}.-1"):
                r = await asyncio.wait_for(c.get(b.url, headers={**h, "accept": "text/event-stream", "last-event-id": bad}), 5)
                assert r.status_code == 400, (bad, r.text)
                assert r.json()["error"]["message"] == "Bad Request: unknown Last-Event-ID"
            # the session and its resumption still work (on the other worker, at once)
            r = await c.get(b.url, headers={**h, "accept": "text/event-stream", "last-event-id": f"{stream}.0"})
            assert r.status_code == 200 and json.loads(events(r.content)[-1][1])["id"] == 1, r.text

    asyncio.run(go())


# ----------------------------------------------------------------- what Redis keeps


async def abandon_a_session(app: Any, server: MCPServer) -> tuple[str, str]:
    """Initialize, make one call answered on a stream, get one event on the GET stream, leave:
    (session id, the call's stream id)."""
    async with serve_in_loop(app) as url, httpx.AsyncClient(timeout=20) as c:
        w = Worker(app, url)
        h = await initialize(c, w)
        r = await c.post(w.url, json=call(1, "later", text="x" * 100), headers=h)
        finished = events(r.content)[0][0]  # the priming event of the call's stream
        assert finished is not None
        async with c.stream("GET", w.url, headers={**h, "accept": "text/event-stream"}) as g:
            assert g.status_code == 200
            await server.notify_list_changed("tools")  # one event on the session's GET stream
            async for chunk in g.aiter_raw():
                if b"list_changed" in chunk:
                    break
        await asyncio.sleep(0.2)
        await app.aclose()
    return h["mcp-session-id"], finished.rpartition(".")[0]


def test_an_abandoned_session_leaves_nothing_in_redis_beyond_its_idle_timeout(redis_server: RedisServer) -> None:
    """Every key of a session has a TTL: the record, its GET stream and the delivered position the
    idle timeout; a finished POST stream the replay window (30 s by default)."""
    import redis as redis_py

    prefix = unique_prefix()
    server = make_server()
    app = mcp_http_app(server, store=open_store(redis_server.url, prefix=prefix), session_idle_timeout=20)
    sid, stream = asyncio.run(abandon_a_session(app, server))
    raw = redis_py.Redis.from_url(redis_server.url)
    keys = sorted(k.decode() for k in raw.scan_iter(f"{prefix}*{sid}*"))
    assert {f"{prefix}session:{sid}", f"{prefix}ev:{sid}:{stream}", f"{prefix}ev:{sid}:g", f"{prefix}gpos:{sid}"} <= set(keys), keys
    for k in keys:
        ttl = raw.pttl(k)
        assert 0 < ttl <= (30000 if k == f"{prefix}ev:{sid}:{stream}" else 20000), (k, ttl)


def test_a_finished_stream_is_gone_from_redis_after_the_replay_window(redis_server: RedisServer) -> None:
    import time

    import redis as redis_py

    prefix = unique_prefix()
    server = make_server()
    app = mcp_http_app(server, store=open_store(redis_server.url, prefix=prefix), session_idle_timeout=20, replay_window=1.0)
    sid, stream = asyncio.run(abandon_a_session(app, server))
    raw = redis_py.Redis.from_url(redis_server.url)
    assert 0 < raw.pttl(f"{prefix}ev:{sid}:{stream}") <= 1000
    time.sleep(1.2)
    assert not raw.exists(f"{prefix}ev:{sid}:{stream}")  # the replay window is over
    assert raw.exists(f"{prefix}session:{sid}")  # the session itself lives until its idle timeout


# --------------------------------------------------------------- a result stored once


@pytest.mark.parametrize("kind", KINDS)
def test_a_tool_result_is_stored_once_and_replayed_byte_for_byte(kind: str, request: pytest.FixtureRequest) -> None:
    """A result's text content repeats its structuredContent (the spec asks for both): the event
    store keeps it once, and a resumption gets exactly the bytes that were sent."""
    async def go() -> None:
        async with workers(kind, request) as (a, b), httpx.AsyncClient(timeout=20) as c:
            h = await initialize(c, a)
            sent = {}
            for body in [call(1, "later", text="\u00e9\"x" * 20000), call(2, "rows", n=2000)]:
                r = await c.post(a.url, json=body, headers=h)
                prime = r.content.split(b"\n", 1)[0].removeprefix(b"id: ").decode()  # the priming event first
                (_, data), = events(r.content)
                sent[prime] = data.encode()
            sid = h["mcp-session-id"]
            for prime, data in sent.items():
                r = await c.get(b.url, headers={**h, "accept": "text/event-stream", "last-event-id": prime})
                assert r.status_code == 200 and events(r.content)[-1][1].encode() == data  # the same bytes
            total = sum(len(d) for d in sent.values())
            if kind == "local":
                kept = a.app.table.events.bytes_kept(sid)
            else:
                import redis as redis_py

                raw = redis_py.Redis.from_url(request.getfixturevalue("redis_server").url)
                kept = sum(len(v) for k in raw.scan_iter(f"{a.prefix}ev:{sid}:*") for _, f in raw.xrange(k) for v in f.values())
            assert kept < 0.6 * total, (kept, total)

    asyncio.run(go())


# ------------------------------------------------------------------- store outages


def test_a_store_outage_is_logged_once_not_per_request_and_the_503_names_no_store(caplog: pytest.LogCaptureFixture) -> None:
    import logging
    import time

    srv = RedisServer()
    srv.start()
    app = mcp_http_app(make_server(), store=open_store(srv.url, prefix=unique_prefix(), op_timeout=0.5), json_response=True)

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000", timeout=20) as c:
            w = Worker(app, "http://127.0.0.1:8000")
            h = await initialize(c, w)
            srv.stop()
            with caplog.at_level(logging.WARNING, logger="sturdyrpc"):
                t0 = time.monotonic()
                for i in range(60):
                    r = await c.post(w.url, json=ping(i), headers=h)
                    assert r.status_code == 503 and r.headers["retry-after"] == "1"
                    assert r.json() == {"jsonrpc": "2.0", "error": {"code": -32001, "message": "The session store is unavailable"}}
                    assert str(srv.port) not in r.text
                outage = [rec.getMessage() for rec in caplog.records if rec.name.startswith("sturdyrpc")]
                assert time.monotonic() - t0 < 5 and len(outage) <= 2, outage  # not one line per request
                assert any(srv.url in m for m in outage)  # the log names the store
            await app.aclose()

    try:
        asyncio.run(go())
    finally:
        srv.stop()
