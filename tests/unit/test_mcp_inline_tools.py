"""Inline tools (sync, ``blocking=False``): answered on the reader's turn by an entry of their
own, with every rule and outcome of the general path: failures as ``isError`` results naming an
incident, ``RPCError`` as itself, ``input_required`` on 2026-07-28, the binding shortcut agreeing
with the binder, and the routed entry following the tool registered under a name now."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec
import pytest
from support.mcp import Wire, modern_meta

from sturdyrpc.errors import RPCError
from sturdyrpc.mcp import MCPServer, ToolError
from sturdyrpc.mcp.context import InputRequired


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def _server() -> MCPServer:
    server = MCPServer("t", "1")

    @server.tool(blocking=False)
    def echo(text: str) -> str:
        return text

    @server.tool(blocking=False)
    def flag(on: bool) -> str:
        return "yes" if on else "no"

    @server.tool(blocking=False)
    def count(n: int) -> int:
        return n

    @server.tool(blocking=False)
    def boom() -> str:
        raise RuntimeError("SECRET-inline")

    @server.tool(blocking=False)
    def refuse() -> str:
        raise ToolError("not today")

    @server.tool(blocking=False)
    def on_purpose() -> str:
        raise RPCError("teapot", code=-32042)

    @server.tool(blocking=False)
    def wrong() -> int:
        return "not an int"  # type: ignore[return-value]

    @server.tool(blocking=False)
    def ask() -> str:
        raise InputRequired({"k": {"method": "elicitation/create", "params": {"message": "?"}}})

    return server


def _result(r: dict[str, Any]) -> dict[str, Any]:
    assert "result" in r, r
    return r["result"]  # type: ignore[no-any-return]


def test_outcomes_and_binding(caplog: pytest.LogCaptureFixture) -> None:
    server = _server()
    assert all(server.tools[n].routed_inline for n in ("echo", "flag", "count", "boom"))

    async def main() -> None:
        async with Wire(server) as w:
            await w.initialize()
            call = w.call
            assert _result(await call("tools/call", {"name": "echo", "arguments": {"text": "hi"}}, id=1))["content"][0]["text"] == "hi"
            assert _result(await call("tools/call", {"name": "flag", "arguments": {"on": True}}, id=2))["content"][0]["text"] == "yes"
            r = _result(await call("tools/call", {"name": "count", "arguments": {"n": 7}}, id=3))
            assert r["structuredContent"] == {"result": 7} and r["content"][0]["text"] == "7"
            # values the shortcut does not take: the binder says what is wrong (a tool error on 2025-11-25)
            for i, args in enumerate(({"n": True}, {"n": "7"}, {"m": 7}, {}, {"n": 1, "m": 2}), start=10):
                r = _result(await call("tools/call", {"name": "count", "arguments": args}, id=i))
                assert r["isError"] is True, args
            with caplog.at_level(logging.ERROR, logger="sturdyrpc.mcp"):
                r = _result(await call("tools/call", {"name": "boom", "arguments": {}}, id=20))
            assert r["isError"] is True and "incident" in r["content"][0]["text"] and "SECRET" not in r["content"][0]["text"]
            assert "SECRET-inline" in caplog.text  # the traceback is logged
            r = _result(await call("tools/call", {"name": "refuse"}, id=21))
            assert r == {"content": [{"type": "text", "text": "not today"}], "isError": True}
            r = await call("tools/call", {"name": "on_purpose"}, id=22)
            assert r["error"]["code"] == -32042
            r = _result(await call("tools/call", {"name": "wrong"}, id=23))
            assert r["isError"] is True and "incident" in r["content"][0]["text"]
            r = _result(await call("tools/call", {"name": "ask"}, id=24))
            assert r["isError"] is True  # input_required is 2026-07-28's: an error before it
            r = await call("tools/call", {"name": "echo", "arguments": [1]}, id=25)
            assert r["error"]["code"] == -32602
            r = await call("tools/call", {"name": "echo", "arguments": {"text": "t"}, "task": {}}, id=26)
            assert "result" in r or "error" in r  # a task call takes the general entry, which decides

    run(main())


def test_input_required_on_2026_07_28() -> None:
    server = _server()

    async def main() -> None:
        async def related(b: bytes) -> None:
            pass

        msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask", "arguments": {}, "_meta": modern_meta()}}
        out = await server.handle_stateless(msgspec.json.encode(msg), related)
        res = msgspec.json.decode(out)["result"]
        assert res["resultType"] == "input_required" and res["inputRequests"] == {"k": {"method": "elicitation/create", "params": {"message": "?"}}}
        assert res["requestState"]

    run(main())


def test_routed_entry_follows_the_registered_tool() -> None:
    server = _server()

    async def main() -> None:
        async with Wire(server) as w:
            await w.initialize()
            assert _result(await w.call("tools/call", {"name": "echo", "arguments": {"text": "a"}}, id=1))["content"][0]["text"] == "a"
            server.remove_tool("echo")

            @server.tool(name="echo", blocking=False)
            def echo2(text: str) -> str:
                return text.upper()

            assert _result(await w.call("tools/call", {"name": "echo", "arguments": {"text": "a"}}, id=2))["content"][0]["text"] == "A"
            server.remove_tool("echo")
            r = await w.call("tools/call", {"name": "echo", "arguments": {"text": "a"}}, id=3)
            assert r["error"]["code"] == -32602  # unknown tool
            # a tool that now requires tasks is refused as a plain call (rule 28), not run inline
            server.tools["count"].set_task_support("required")
            assert not server.tools["count"].routed_inline
            r = await w.call("tools/call", {"name": "count", "arguments": {"n": 1}}, id=4)
            assert r["error"]["code"] == -32601
            server.tools["count"].task_support = "forbidden"
            assert server.tools["count"].routed_inline
            assert _result(await w.call("tools/call", {"name": "count", "arguments": {"n": 1}}, id=5))["content"][0]["text"] == "1"

    run(main())
