"""MCP handlers run through the one executor: bounded daemon pool, one error policy, every path."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any

import msgspec
from support.mcp import Wire, modern_meta

from sturdyrpc.limits import Limits
from sturdyrpc.mcp import MCPContext, MCPServer


def _stateless(method: str, params: dict[str, Any], id_: Any = 1) -> bytes:
    return msgspec.json.encode({"jsonrpc": "2.0", "id": id_, "method": method, "params": {**params, "_meta": modern_meta()}})


async def _nothing_related(data: bytes) -> None:
    return None


def test_more_blocking_tools_than_max_threads_never_run_more_than_max_threads_at_once() -> None:
    server = MCPServer("pool", "1", limits=Limits(max_threads=2))
    lock = threading.Lock()
    running = 0
    most = 0
    daemons: list[bool] = []

    @server.tool()
    def work(n: int) -> int:  # sync: blocking by default, so it runs on the pool
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            daemons.append(threading.current_thread().daemon)
        time.sleep(0.05)
        with lock:
            running -= 1
        return n

    async def main() -> None:
        async with Wire(server) as w:
            await w.initialize("2025-11-25")
            for i in range(7):
                await w.send({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "work", "arguments": {"n": i}}})
            replies = [await w.recv(5.0) for _ in range(7)]
        assert sorted(r["result"]["structuredContent"]["result"] for r in replies) == list(range(7))

    asyncio.run(main())
    assert most == 2
    # daemon threads: a tool stuck in a slow call does not hold the process open after SIGTERM
    assert daemons and all(daemons)


def _failing_server() -> MCPServer:
    server = MCPServer("failing", "1")

    @server.tool()
    async def exits() -> str:
        sys.exit(3)

    @server.tool()
    def interrupts() -> str:
        raise KeyboardInterrupt

    @server.resource("test://exits")
    async def exiting_resource() -> str:
        sys.exit(4)

    @server.prompt()
    def interrupting_prompt() -> str:
        raise KeyboardInterrupt

    @server.tool(blocking=False)
    def echo(text: str) -> str:
        return text

    return server


def test_sys_exit_and_keyboard_interrupt_in_stateless_requests_are_answered_and_the_server_keeps_serving() -> None:
    server = _failing_server()

    async def main() -> None:
        for name in ("exits", "interrupts"):
            r = msgspec.json.decode(await server.handle_stateless(_stateless("tools/call", {"name": name, "arguments": {}}), _nothing_related))
            assert r["result"]["isError"] is True, r
            assert "incident" in r["result"]["content"][0]["text"] and "Traceback" not in r["result"]["content"][0]["text"]
        r = msgspec.json.decode(await server.handle_stateless(_stateless("resources/read", {"uri": "test://exits"}), _nothing_related))
        assert r["error"]["code"] == -32603 and set(r["error"]["data"]) == {"incident"}, r
        r = msgspec.json.decode(await server.handle_stateless(_stateless("prompts/get", {"name": "interrupting_prompt"}), _nothing_related))
        assert r["error"]["code"] == -32603 and set(r["error"]["data"]) == {"incident"}, r
        r = msgspec.json.decode(await server.handle_stateless(_stateless("tools/call", {"name": "echo", "arguments": {"text": "still here"}}), _nothing_related))
        assert r["result"]["content"][0]["text"] == "still here"

    asyncio.run(main())


def test_sys_exit_in_a_resource_on_a_session_is_answered_and_the_session_keeps_serving() -> None:
    server = _failing_server()

    async def main() -> None:
        async with Wire(server) as w:
            await w.initialize("2025-11-25")
            r = await w.call("resources/read", {"uri": "test://exits"}, id=1)
            assert r["error"]["code"] == -32603, r
            r = await w.call("tools/call", {"name": "exits", "arguments": {}}, id=2)
            assert r["result"]["isError"] is True
            r = await w.call("tools/call", {"name": "echo", "arguments": {"text": "ok"}}, id=3)
            assert r["result"]["content"][0]["text"] == "ok"

    asyncio.run(main())


def test_every_notification_with_params_that_are_not_a_structure_gets_minus_32600_and_arrays_are_dropped() -> None:
    """One rule for all notifications: cancel and progress used to be dropped silently where
    every other method got -32600."""
    from sturdyrpc.demos.mcp import make_mcp_demo

    methods = ["notifications/cancelled", "notifications/progress", "notifications/initialized", "notifications/roots/list_changed", "x/y"]

    async def main() -> None:
        async with Wire(make_mcp_demo()) as w:
            await w.initialize("2025-11-25")
            for method in methods:
                for params in (5, "x", None):
                    await w.send({"jsonrpc": "2.0", "method": method, "params": params})
                    r = await w.recv(2.0)
                    assert r == {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}}, (method, params, r)
                for params in ([1], {"unrelated": 1}):
                    await w.send({"jsonrpc": "2.0", "method": method, "params": params})
                await w.nothing(0.05)
            r = await w.call("tools/call", {"name": "echo", "arguments": {"text": "ok"}}, id="after")
            assert r["result"]["content"][0]["text"] == "ok"

    asyncio.run(main())


def test_every_message_to_a_peer_is_decoded_once(monkeypatch: Any) -> None:
    """A frame is read once (sturdyrpc.envelope.read, typed in C for the usual shapes) and never
    decoded again on its way to the handler, whatever the method, plan or tool kind."""
    from sturdyrpc import codec, envelope
    from sturdyrpc.peer import incoming as peer  # where the peer reads its frames

    server = _failing_server()

    @server.tool()
    async def later(text: str) -> str:
        return text

    reads: list[bytes] = []
    decodes: list[bytes] = []
    real_read, real_bounded, real_decode = envelope.read, codec.decode_bounded, codec.decode

    def counting_read(data: bytes, limits: Any) -> Any:
        reads.append(data)
        return real_read(data, limits)

    def counting_bounded(data: bytes, max_depth: int) -> Any:
        decodes.append(data)
        return real_bounded(data, max_depth)

    def counting_decode(data: Any, max_depth: int = 256) -> Any:
        decodes.append(bytes(data))
        return real_decode(data, max_depth)

    async def main() -> None:
        async with Wire(server) as w:
            await w.initialize("2025-11-25")
            await w.call("ping", id="settled")  # notifications/initialized has been read
            monkeypatch.setattr(peer, "read", counting_read)
            monkeypatch.setattr(codec, "decode_bounded", counting_bounded)
            monkeypatch.setattr(codec, "decode", counting_decode)
            for i, msg in enumerate(
                [
                    {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
                    {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "later", "arguments": {"text": "x"}}},
                    {"jsonrpc": "2.0", "id": 3, "method": "ping"},
                    {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "y"}}},
                ]
            ):
                frame = msgspec.json.encode(msg)
                reads.clear()
                decodes.clear()
                await w.send(frame)
                r = await w.recv()
                assert r["id"] == i + 1 and "result" in r, r
                assert reads == [frame] and decodes == [], (reads, decodes)

    asyncio.run(main())


def test_a_context_parameter_before_the_arguments_gets_the_context_not_an_argument() -> None:
    server = MCPServer("ctx-first", "1")

    @server.tool()
    async def first(ctx: MCPContext, text: str) -> str:
        assert isinstance(ctx, MCPContext)
        return text

    @server.tool()
    def first_sync(ctx: MCPContext, a: int, b: int) -> int:
        assert isinstance(ctx, MCPContext)
        return a - b

    async def main() -> None:
        async with Wire(server) as w:
            await w.initialize("2025-11-25")
            r = await w.call("tools/call", {"name": "first", "arguments": {"text": "x"}}, id=1)
            assert r["result"]["structuredContent"] == {"result": "x"}, r
            r = await w.call("tools/call", {"name": "first_sync", "arguments": {"b": 1, "a": 5}}, id=2)
            assert r["result"]["structuredContent"] == {"result": 4}, r

    asyncio.run(main())
