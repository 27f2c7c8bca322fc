"""The server app model in process: middleware on the plain dispatcher and on MCPServer, the
built-in middleware, lifespan, ctx fields, per-tool timeouts and the test client (issue 11).

Transports (stdio subprocesses, uvicorn, `sturdyrpc run`/`dev`) are in test_app_model_transports.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from servers.app_model_server import make_rpc, make_server
from support import ROOT

from sturdyrpc import ApplicationError, Context, Dispatcher, RPCError
from sturdyrpc.mcp import MCPContext, MCPServer
from sturdyrpc.mcp.lifespan import LifespanError
from sturdyrpc.middleware import RateLimit, ResponseSizeLimit, Timing


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def call(d: Dispatcher, method: str, params: Any = None, id: Any = 1) -> Any:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": id}
    if params is not None:
        msg["params"] = params
    out = d.handle_sync(msgspec.json.encode(msg))
    return None if out is None else msgspec.json.decode(out)


# ---------------------------------------------------------------- plain dispatcher


def test_chain_runs_in_order_around_inline_handlers_and_can_change_the_result() -> None:
    rpc = Dispatcher()
    order: list[str] = []

    @rpc.middleware
    async def outer(ctx: Context, call_next: Any) -> Any:
        order.append("outer in")
        result = await call_next(ctx)
        order.append("outer out")
        return result * 10

    @rpc.middleware
    async def inner(ctx: Context, call_next: Any) -> Any:
        order.append(f"inner {ctx.method} {ctx.id} {ctx.params}")
        return await call_next(ctx)

    @rpc.method(blocking=False)
    def add(a: int, b: int) -> int:
        order.append("handler")
        return a + b

    assert call(rpc, "add", [1, 2], id=7) == {"jsonrpc": "2.0", "result": 30, "id": 7}
    assert order == ["outer in", "inner add 7 [1, 2]", "handler", "outer out"]


def test_a_sync_middleware_is_refused_at_registration() -> None:
    rpc = Dispatcher()
    with pytest.raises(TypeError, match="async"):
        rpc.middleware(lambda ctx, call_next: call_next(ctx))  # type: ignore[arg-type,return-value]
    assert rpc.middleware_chain == ()


def test_short_circuit_and_exceptions_are_answered_like_a_handlers() -> None:
    rpc = make_rpc()
    blocked = call(rpc, "blocked")
    assert blocked["error"] == {"code": 4003, "message": "Blocked by policy"}
    boom = call(rpc, "boom", id=2)
    assert boom["error"]["code"] == -32603
    assert set(boom["error"]["data"]) == {"incident"}  # nothing of the exception's text
    assert "secret" not in msgspec.json.encode(boom).decode()
    # a notification passes through the chain too (and is never answered)
    before = call(rpc, "seen_count")["result"]
    assert rpc.handle_sync(b'{"jsonrpc":"2.0","method":"add","params":[1,2]}') is None
    assert call(rpc, "seen_count")["result"] == before + 2


def test_an_empty_chain_keeps_the_inline_plan() -> None:
    from sturdyrpc.dispatch import INLINE, NOW, TASK

    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def add(a: int, b: int) -> int:
        return a + b

    @rpc.method
    async def later(a: int) -> int:
        return a

    # planned at registration: an inline handler runs on the reader's turn, an async one as a task
    assert rpc.get("add").plan is INLINE  # type: ignore[union-attr]
    assert rpc.get("later").plan is TASK  # type: ignore[union-attr]

    @rpc.middleware
    async def nothing(ctx: Context, call_next: Any) -> Any:
        return await call_next(ctx)

    # planned again when the chain changes: started on the reader's turn through the chain
    assert rpc.get("add").plan is NOW  # type: ignore[union-attr]
    assert rpc.get("later").plan is TASK  # type: ignore[union-attr]
    rpc.eager_chain = False
    assert rpc.get("add").plan is TASK  # type: ignore[union-attr]


def test_runner_runs_the_chain_for_inline_handlers_and_batch_elements() -> None:
    from sturdyrpc.runner import Runner

    rpc = make_rpc()
    sent: list[Any] = []

    async def main() -> None:
        runner = Runner(rpc, lambda b: sent.append(msgspec.json.decode(b)))
        runner.feed(b'{"jsonrpc":"2.0","method":"add","params":[1,2],"id":1}')
        runner.feed(b'[{"jsonrpc":"2.0","method":"add","params":[3,4],"id":2},{"jsonrpc":"2.0","method":"blocked","id":3}]')
        await runner.drain(5)
        runner.feed(b'{"jsonrpc":"2.0","method":"seen_count","id":4}')
        await runner.drain(5)

    run(main())
    assert sent[0] == {"jsonrpc": "2.0", "result": 3, "id": 1}
    assert sorted(sent[1], key=lambda r: r["id"]) == [
        {"jsonrpc": "2.0", "result": 7, "id": 2},
        {"jsonrpc": "2.0", "error": {"code": 4003, "message": "Blocked by policy"}, "id": 3},
    ]
    assert sent[2]["result"] == 4  # every element, and seen_count itself, went through the chain


# ---------------------------------------------------------------- MCP through the test client


def test_test_client_runs_middleware_lifespan_and_ctx_fields() -> None:
    server = make_server()

    async def main() -> None:
        assert server.lifespan_state is None
        async with server.test_client() as client:
            assert server.lifespan_state == {"db": "pool-1"}
            tools = {t["name"] for t in await client.list_tools()}
            assert {"echo", "whoami", "slow"} <= tools
            first = (await client.call_tool("whoami", {}))["structuredContent"]
            second = (await client.call_tool("whoami", {}))["structuredContent"]
            assert first["lifespan"] == {"db": "pool-1"} and first["principal"] is None and first["x_app"] is None
            assert first["session_id"] and first["session_id"] == second["session_id"] == second["mw"]["session_id"]
            assert (first["calls"], second["calls"]) == (1, 2)  # ctx.state lives as long as the session
            assert second["mw"]["method"] == "tools/call" and second["mw"]["lifespan"] == {"db": "pool-1"}
            # an inline tool takes the chain too
            n = len(server.seen)  # type: ignore[attr-defined]
            assert (await client.call_tool("echo", {"text": "hi"}))["content"][0]["text"] == "hi"
            assert len(server.seen) == n + 1  # type: ignore[attr-defined]
        assert server.lifespan_state is None

    run(main())


@pytest.mark.parametrize("protocol", ["2025-03-26", "2025-11-25", "2026-07-28"])
def test_middleware_errors_on_tools_call(protocol: str) -> None:
    server = make_server()

    async def main() -> None:
        async with server.test_client(protocol) as client:
            with pytest.raises(RPCError) as err:
                await client.call_tool("forbidden", {})
            assert (err.value.code, err.value.message) == (4003, "Forbidden by policy")
            exploded = await client.call_tool("explode", {})
            assert exploded["isError"] is True
            text = exploded["content"][0]["text"]
            assert "incident" in text and "secret" not in text
            canned = await client.call_tool("canned", {})
            assert canned["content"][0]["text"] == "from the middleware"

    run(main())


def test_state_is_per_session_and_the_lifespan_runs_once_for_nested_clients() -> None:
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def lifespan(server: MCPServer) -> AsyncIterator[int]:
        events.append("startup")
        yield 1
        events.append("shutdown")

    server = MCPServer("s", lifespan=lifespan)

    @server.tool()
    async def bump(ctx: MCPContext) -> int:
        ctx.state["n"] = ctx.state.get("n", 0) + 1
        return int(ctx.state["n"])

    async def main() -> None:
        async with server.test_client() as a, server.test_client() as b:
            assert (await a.call_tool("bump", {}))["structuredContent"] == {"result": 1}
            assert (await a.call_tool("bump", {}))["structuredContent"] == {"result": 2}
            assert (await b.call_tool("bump", {}))["structuredContent"] == {"result": 1}
            assert events == ["startup"]
        assert events == ["startup", "shutdown"]

    run(main())


def test_a_failing_lifespan_startup_serves_nothing() -> None:
    @contextlib.asynccontextmanager
    async def lifespan(server: MCPServer) -> AsyncIterator[None]:
        raise OSError("no database")
        yield

    server = MCPServer("s", lifespan=lifespan)

    async def main() -> None:
        with pytest.raises(LifespanError, match="no database"):
            async with server.test_client():
                pytest.fail("served although the startup failed")
        assert server.lifespan_state is None

    run(main())


def test_lifespan_may_be_a_plain_async_generator() -> None:
    async def lifespan(server: MCPServer) -> AsyncIterator[str]:
        yield "value"

    server = MCPServer("s", lifespan=lifespan)

    @server.tool()
    async def get(ctx: MCPContext) -> str:
        return str(ctx.lifespan)

    async def main() -> None:
        async with server.test_client() as client:
            assert (await client.call_tool("get", {}))["structuredContent"] == {"result": "value"}

    run(main())


@pytest.mark.parametrize("protocol", ["2025-06-18", "2026-07-28"])
def test_tool_timeout_is_a_tool_error_naming_the_limit(protocol: str) -> None:
    server = make_server()

    async def main() -> None:
        async with server.test_client(protocol) as client:
            late = await client.call_tool("slow", {"seconds": 30})
            assert late["isError"] is True
            assert "0.3 s" in late["content"][0]["text"] and "timed out" in late["content"][0]["text"]
            ok = await client.call_tool("slow", {"seconds": 0})
            assert ok["isError"] is False and ok["content"][0]["text"] == "done"

    run(main())


def test_timeout_of_a_blocking_sync_tool_and_refused_for_an_inline_one() -> None:
    import threading

    server = MCPServer("s")
    release = threading.Event()

    @server.tool(timeout=0.2)
    def stuck() -> str:
        release.wait(30)
        return "late"

    with pytest.raises(ValueError, match="timeout"):
        server.tool(timeout=1.0, blocking=False)(lambda: "x")

    async def main() -> None:
        async with server.test_client() as client:
            out = await client.call_tool("stuck", {})
            assert out["isError"] is True and "0.2 s" in out["content"][0]["text"]
        release.set()

    run(main())


# ---------------------------------------------------------------- built-in middleware


def test_rate_limit_is_per_principal_with_retry_information() -> None:
    clock = [100.0]
    limit = RateLimit(1.0, burst=2, clock=lambda: clock[0])
    assert [limit.take("alice"), limit.take("alice")] == [0.0, 0.0]
    assert limit.take("alice") == pytest.approx(1.0)
    assert limit.take("bob") == 0.0  # another principal has its own bucket
    clock[0] += 1.0
    assert limit.take("alice") == 0.0


def test_rate_limit_on_a_server() -> None:
    server = MCPServer("s")
    clock = [0.0]
    server.middleware(RateLimit(0.5, burst=2, clock=lambda: clock[0]))

    @server.tool()
    async def ping2() -> str:
        return "pong"

    async def main() -> None:
        async with server.test_client("2025-11-25") as client:  # the handshake is exempt
            assert not (await client.call_tool("ping2", {}))["isError"]
            assert not (await client.call_tool("ping2", {}))["isError"]  # the burst's second token
            with pytest.raises(RPCError) as err:
                await client.call_tool("ping2", {})
            assert err.value.code == -32000
            assert err.value.message == "Rate limit exceeded"
            assert err.value.data["retryAfter"] == pytest.approx(2.0)
            clock[0] += 2.0
            assert not (await client.call_tool("ping2", {}))["isError"]

    run(main())


def test_response_size_limit() -> None:
    rpc = Dispatcher()
    rpc.middleware(ResponseSizeLimit(100))

    @rpc.method(blocking=False)
    def blob(n: int) -> str:
        return "x" * n

    assert call(rpc, "blob", [10])["result"] == "x" * 10
    err = call(rpc, "blob", [500])["error"]
    assert err["code"] == -32000 and err["data"] == {"limit": "max_response_bytes", "max": 100, "size": 502}

    server = MCPServer("s")
    server.middleware(ResponseSizeLimit(2000))

    @server.tool(blocking=False)
    def text(n: int) -> str:
        return "y" * n

    async def main() -> None:
        async with server.test_client() as client:
            assert (await client.call_tool("text", {"n": 10}))["content"][0]["text"] == "y" * 10
            with pytest.raises(RPCError) as err:
                await client.call_tool("text", {"n": 5000})
            assert err.value.code == -32000 and err.value.data["max"] == 2000

    run(main())


def test_timing_logs_method_outcome_and_duration(caplog: pytest.LogCaptureFixture) -> None:
    rpc = make_rpc()
    timing = Timing()
    rpc.middleware(timing)
    with caplog.at_level(logging.INFO, logger="sturdyrpc.timing"):
        call(rpc, "add", [1, 2], id=5)
        call(rpc, "boom", id=6)
    lines = [r.getMessage() for r in caplog.records if r.name == "sturdyrpc.timing"]
    assert lines[0].startswith("add id=5 ok in ") and lines[0].endswith(" ms")
    # boom's middleware raised before Timing (added later, so inside it) ran: only add was timed
    assert timing.stats["add"][:2] == [1, 0]


# ---------------------------------------------------------------- the fixture docs/how-to/app-model.md shows
# (anyio's pytest plugin, installed with the test extra, runs async tests and fixtures)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def client() -> AsyncIterator[Any]:
    async with make_server().test_client() as client:
        yield client


@pytest.mark.anyio
async def test_readme_fixture(client: Any) -> None:
    result = await client.call_tool("echo", {"text": "x"})
    assert not result["isError"] and result["content"][0]["text"] == "x"


def test_application_error_in_a_plain_handler_is_untouched_by_an_empty_chain() -> None:
    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def fail() -> None:
        raise ApplicationError(7, "nope")

    assert call(rpc, "fail")["error"] == {"code": 7, "message": "nope"}


def test_the_app_model_page_example_runs_as_documented() -> None:
    import re
    import types

    readme = (ROOT / "docs" / "how-to" / "app-model.md").read_text()
    block = re.search(r"<!-- app-model-example[^>]*-->\n```python\n(.*?)```", readme, re.S)
    assert block is not None
    code = block.group(1)
    assert len(code.strip().splitlines()) < 40
    shop = types.ModuleType("shop")
    exec(compile(code, "docs/how-to/app-model.md", "exec"), shop.__dict__)
    server = shop.server

    async def main() -> None:
        async with server.test_client() as client:
            tools = {t["name"]: t for t in await client.list_tools()}
            assert "ctx" not in tools["search"]["inputSchema"]["properties"]
            props = tools["search"]["inputSchema"]["properties"]
            assert props["query"]["description"] == "What to look for"
            assert props["query"]["minLength"] == 1
            assert props["limit"]["description"] == "How many results to return."
            assert tools["search"]["description"] == "Search the catalogue."
            result = await client.call_tool("search", {"query": "app"})
            assert result["structuredContent"] == {"result": ["apple"]}
            again = await client.call_tool("search", {"query": "e", "limit": 1})
            assert again["structuredContent"] == {"result": ["apple"]}
        assert server.lifespan_state is None

    run(main())


def test_middleware_over_tcp_plain_and_mcp() -> None:
    from sturdyrpc.client import connect_tcp
    from sturdyrpc.peer import Peer
    from sturdyrpc.transports.streams import StreamTransport

    rpc = make_rpc()
    server = make_server()

    async def main() -> None:
        async def plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            async with Peer(StreamTransport(reader, writer), rpc) as peer:
                await peer.wait_closed()

        async def mcp(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await server.serve(StreamTransport(reader, writer))

        plain_srv = await asyncio.start_server(plain, "127.0.0.1", 0)
        mcp_srv = await asyncio.start_server(mcp, "127.0.0.1", 0)
        try:
            async with connect_tcp("127.0.0.1", plain_srv.sockets[0].getsockname()[1]) as conn:
                assert await conn.peer.request("add", [1, 2]) == 3
                with pytest.raises(RPCError) as err:
                    await conn.peer.request("blocked")
                assert err.value.code == 4003
                assert (await conn.peer.request("last_seen", {"back": 0}))["method"] == "last_seen"
            reader, writer = await asyncio.open_connection("127.0.0.1", mcp_srv.sockets[0].getsockname()[1])
            init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
            for msg in ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
                        {"jsonrpc": "2.0", "method": "notifications/initialized"},
                        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "forbidden", "arguments": {}}},
                        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "t"}}}):
                writer.write(msgspec.json.encode(msg) + b"\n")
            replies = {}
            while len(replies) < 3:
                line = await asyncio.wait_for(reader.readline(), 10)
                r = msgspec.json.decode(line)
                replies[r["id"]] = r
            assert replies[2]["error"]["code"] == 4003
            assert replies[3]["result"]["content"][0]["text"] == "t"
            assert len(server.seen) == 4  # type: ignore[attr-defined]
            writer.close()
        finally:
            plain_srv.close()
            mcp_srv.close()

    run(main())
