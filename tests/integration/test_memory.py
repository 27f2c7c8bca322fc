"""Memory that comes back: whatever a session or a request holds is freed when it ends.

Thousands of Streamable HTTP sessions are opened and closed (DELETE, and idle expiry), and
thousands of stateless requests are sent (handshake era with ``stateless=True``, and
2026-07-28), on the memory store and on a shared Redis store; afterwards no session, peer or
session state of sturdyrpc's is left alive and the memory traced is back to where it was (within
a small bound that does not grow with the number of sessions or requests).

The app is served in process (the ASGI app called with a fake receive/send: real app, real
server, real sessions, no sockets), so the objects it keeps are the only ones counted.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest
from support.loops import run_on
from support.redis import RedisServer, unique_prefix

from sturdyrpc.mcp import MCPServer
from sturdyrpc.mcp_http import mcp_http_app
from sturdyrpc.store import open_store

pytestmark = pytest.mark.timeout(300)

OLD, NEW = "2025-11-25", "2026-07-28"
HEADERS = [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
           (b"accept", b"application/json, text/event-stream")]
META = {"io.modelcontextprotocol/protocolVersion": NEW, "io.modelcontextprotocol/clientCapabilities": {}}
INIT = msgspec.json.encode({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": OLD, "capabilities": {}, "clientInfo": {"name": "memory-test", "version": "1"}}})
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
#: What may stay allocated after the loop however many rounds ran (interned strings, caches of a
#: fixed size, dict tables sized by the peak number of sessions alive at once).
SLACK = 256 * 1024


def make_server() -> MCPServer:
    server = MCPServer("memory", "1")

    @server.tool(blocking=False)
    def echo(text: str) -> str:
        return text

    @server.tool()
    async def later(text: str) -> str:
        await asyncio.sleep(0)
        return text

    return server


def scope(method: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
            "path": "/mcp", "raw_path": b"/mcp", "query_string": b"", "root_path": "", "headers": headers,
            "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000)}


async def request(app: Any, method: str, headers: list[tuple[bytes, bytes]], body: bytes = b"") -> tuple[int, dict[bytes, bytes], bytes]:
    out: list[dict[str, Any]] = []
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        while not (out and out[-1]["type"] == "http.response.body" and not out[-1].get("more_body", False)):
            await asyncio.sleep(0.001)
        return {"type": "http.disconnect"}

    async def send(m: dict[str, Any]) -> None:
        out.append(m)

    await app(scope(method, headers), receive, send)
    return out[0]["status"], dict(out[0].get("headers", [])), b"".join(m.get("body", b"") for m in out[1:])


def call(i: int, name: str, meta: dict[str, Any] | None = None) -> bytes:
    params: dict[str, Any] = {"name": name, "arguments": {"text": f"t{i}"}}
    if meta is not None:
        params["_meta"] = meta
    return msgspec.json.encode({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params})


async def session_round(app: Any, i: int, delete: bool = True) -> None:
    status, headers, _ = await request(app, "POST", HEADERS, INIT)
    assert status == 200
    h = HEADERS + [(b"mcp-session-id", headers[b"mcp-session-id"]), (b"mcp-protocol-version", OLD.encode())]
    assert (await request(app, "POST", h, INITIALIZED))[0] == 202
    for name in ("echo", "later"):
        status, _, body = await request(app, "POST", h, call(i, name))
        assert status == 200 and f"t{i}".encode() in body, body
    if delete:
        assert (await request(app, "DELETE", h))[0] == 200


async def stateless_round(app: Any, i: int) -> None:
    h = HEADERS + [(b"mcp-protocol-version", OLD.encode())]
    for name in ("echo", "later"):
        status, _, body = await request(app, "POST", h, call(i, name))
        assert status == 200 and f"t{i}".encode() in body, body


async def modern_round(app: Any, i: int) -> None:
    for name in ("echo", "later"):
        h = HEADERS + [(b"mcp-protocol-version", NEW.encode()), (b"mcp-method", b"tools/call"), (b"mcp-name", name.encode())]
        status, _, body = await request(app, "POST", h, call(i, name, META))
        assert status == 200 and f"t{i}".encode() in body, body


def ours() -> Counter[str]:
    """How many objects of each of sturdyrpc's classes are alive."""
    out: Counter[str] = Counter()
    for o in gc.get_objects():
        module = type(o).__module__
        if isinstance(module, str) and module.startswith("sturdyrpc"):  # (a C type's may be a descriptor)
            out[f"{module}.{type(o).__qualname__}"] += 1
    return out


async def settle(app: Any, seconds: float = 2.2) -> None:
    """Let the sessions' and requests' own tasks finish, and the timers they cancelled fall due
    (a cancelled timer keeps its context until then: the peer's 2 s close deadline is the longest)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        await asyncio.sleep(0.05)
    gc.collect()


async def measure(app: Any, round_: Callable[[Any, int], Awaitable[None]], n: int) -> tuple[int, Counter[str]]:
    for i in range(30):  # warm up: caches, templates, lazily made objects
        await round_(app, i)
    await settle(app)
    before = ours()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    try:
        for i in range(n):
            await round_(app, i)
            if i % 50 == 0:
                await asyncio.sleep(0)
        await settle(app)
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    after = ours()
    return grown, Counter({k: after[k] - before[k] for k in after if after[k] > before[k]})


CASES: dict[str, tuple[dict[str, Any], Callable[[Any, int], Awaitable[None]]]] = {
    "sessions-deleted": ({}, session_round),
    "sessions-stateless-http": ({"stateless": True}, stateless_round),
    "requests-2026-07-28": ({}, modern_round),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_memory_comes_back_on_the_memory_store(case: str) -> None:
    options, round_ = CASES[case]

    async def main() -> tuple[int, Counter[str]]:
        app = mcp_http_app(make_server(), path="/mcp", **options)
        try:
            return await measure(app, round_, 1500)
        finally:
            await app.aclose()

    grown, extra = asyncio.run(main())
    assert not extra, f"objects left alive after {case}: {dict(extra)}"
    assert grown < SLACK, f"{case}: {grown} bytes still allocated"


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_memory_comes_back_when_idle_sessions_expire(store: str, request: pytest.FixtureRequest) -> None:
    """Abandoned sessions (no DELETE) end by the idle timer: on the memory store the session, on a
    shared store this worker's replica (the record expires in the store by its TTL)."""
    idle = 0.05 if store == "memory" else 0.5  # a round trip to Redis per request: a round takes longer

    async def round_(app: Any, i: int) -> None:
        await session_round(app, i, delete=False)

    async def main() -> tuple[int, Counter[str]]:
        options: dict[str, Any] = {}
        if store == "redis":
            redis: RedisServer = request.getfixturevalue("redis_server")
            options["store"] = open_store(redis.url, prefix=unique_prefix())
        app = mcp_http_app(make_server(), path="/mcp", session_idle_timeout=idle, **options)
        try:
            for i in range(30):
                await round_(app, i)
            await asyncio.sleep(idle * 6)  # the sweeper ends what the warm-up left
            return await _expiring(app, round_)
        finally:
            await app.aclose()

    async def _expiring(app: Any, round_: Callable[[Any, int], Awaitable[None]]) -> tuple[int, Counter[str]]:
        await settle(app)
        before = ours()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        try:
            for i in range(600 if store == "memory" else 300):
                await round_(app, i)
            await asyncio.sleep(idle * 10)  # every session idle longer than the timeout: swept
            await settle(app)
            grown = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
        after = ours()
        return grown, Counter({k: after[k] - before[k] for k in after if after[k] > before[k]})

    grown, extra = asyncio.run(main())
    assert not extra, f"objects left alive after idle expiry on {store}: {dict(extra)}"
    assert grown < SLACK, f"{store}: {grown} bytes still allocated"


@pytest.mark.parametrize("case", ["sessions-deleted", "requests-2026-07-28"])
def test_memory_comes_back_on_a_shared_redis_store(case: str, redis_server: RedisServer) -> None:
    options, round_ = CASES[case]

    async def main() -> tuple[int, Counter[str]]:
        app = mcp_http_app(make_server(), path="/mcp", store=open_store(redis_server.url, prefix=unique_prefix()), **options)
        try:
            return await measure(app, round_, 400)
        finally:
            await app.aclose()

    grown, extra = asyncio.run(main())
    assert not extra, f"objects left alive after {case} on redis: {dict(extra)}"
    assert grown < SLACK, f"{case} on redis: {grown} bytes still allocated"


@pytest.fixture(params=["memory", "redis"])
def store_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The app's store: its own (memory), or a shared Redis store."""
    if request.param == "memory":
        return {}
    redis: RedisServer = request.getfixturevalue("redis_server")
    return {"store": open_store(redis.url, prefix=unique_prefix())}


def test_an_idle_session_keeps_no_task_waiting(store_options: dict[str, Any], loop_name: str) -> None:
    """An idle session holds no task: its peer's input ends through a callback of the session's
    closed flag (no reader waits for it), its writer task is made only when a message must wait
    (every reply here is taken at once), and the session ends when its peer closes through a
    callback of the peer's closed flag. DELETE ends each, and nothing is left behind. The same
    on a shared store (each session a replica of its record), on each event loop."""

    async def main() -> tuple[float, Counter[str]]:
        app = mcp_http_app(make_server(), path="/mcp", **store_options)
        try:
            # The table's own tasks (the sweeper; on a shared store its listener, its heartbeat
            # and the store's reader) start with its first session: they are the worker's.
            assert (await request(app, "POST", HEADERS, INIT))[0] == 200
            await asyncio.sleep(0.05)
            before = set(asyncio.all_tasks())
            ids = []
            for _ in range(20):
                status, headers, _ = await request(app, "POST", HEADERS, INIT)
                assert status == 200
                h = HEADERS + [(b"mcp-session-id", headers[b"mcp-session-id"]), (b"mcp-protocol-version", OLD.encode())]
                assert (await request(app, "POST", h, INITIALIZED))[0] == 202
                ids.append(h)
            await asyncio.sleep(0.05)
            new = [t for t in asyncio.all_tasks() if t not in before]
            kinds = Counter(t.get_coro().__qualname__ for t in new)  # type: ignore[union-attr]
            # ended by DELETE: the callback fires and no task is left behind
            for h in ids:
                assert (await request(app, "DELETE", h))[0] == 200
            await asyncio.sleep(0.05)
            assert not [t for t in asyncio.all_tasks() if t not in before and not t.done()]
            return len(new) / len(ids), kinds
        finally:
            await app.aclose()

    per_session, kinds = run_on(loop_name, main())
    assert per_session == 0, kinds
