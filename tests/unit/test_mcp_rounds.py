"""2026-07-28 rounds in process: what a re-run gets back, what a client cannot forge, and
``ctx.read_resource``; ``server.run`` refusing what it cannot serve."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from support.mcp import modern_meta

from sturdyrpc import Context
from sturdyrpc.mcp import MCPContext, MCPServer

pytestmark = pytest.mark.timeout(30)

CAPS = {"elicitation": {}}
ASK = {"type": "object", "properties": {"v": {"type": "string"}}}


def rounds_server(effects: list[str]) -> MCPServer:
    server = MCPServer("rounds")

    @server.tool
    async def two(ctx: MCPContext) -> str:
        effects.append("run")
        paid = await ctx.once("pay", lambda: effects.append("pay") or "paid")
        a = await ctx.elicit("first?", ASK)
        b = await ctx.elicit("second?", ASK)
        return f"{paid} {a['content']['v']} {b['content']['v']} rerun={ctx.rerun}"

    @server.resource("notes://{n}")
    def note(n: int) -> dict[str, int]:
        return {"n": n, "double": 2 * n}

    @server.resource("secret://x", scopes=["admin"])
    def secret() -> str:
        return "s"

    @server.tool
    async def reader(uri: str, ctx: Context) -> str:
        contents = await ctx.read_resource(uri)  # type: ignore[attr-defined]  # the MCPContext it is
        return str(contents[0]["text"])

    return server


async def call(server: MCPServer, params: dict[str, Any], id: int = 1) -> Any:
    async def ignore(b: bytes) -> None:
        pass

    msg = {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {**params, "_meta": modern_meta(caps=CAPS)}}
    return msgspec.json.decode(await server.handle_stateless(msgspec.json.encode(msg), ignore))


def test_each_round_brings_back_the_earlier_answers_and_once_results() -> None:
    effects: list[str] = []
    server = rounds_server(effects)

    async def main() -> None:
        base = {"name": "two", "arguments": {}}
        r1 = (await call(server, base))["result"]
        assert r1["resultType"] == "input_required" and list(r1["inputRequests"]) == ["elicitation-1"]
        r2 = (await call(server, {**base, "requestState": r1["requestState"],
                                  "inputResponses": {"elicitation-1": {"action": "accept", "content": {"v": "A"}}}}, 2))["result"]
        assert r2["resultType"] == "input_required" and list(r2["inputRequests"]) == ["elicitation-2"]
        # the client sends only this round's answer: the first comes back from requestState
        r3 = (await call(server, {**base, "requestState": r2["requestState"],
                                  "inputResponses": {"elicitation-2": {"action": "accept", "content": {"v": "B"}}}}, 3))["result"]
        assert r3["resultType"] == "complete"
        assert r3["content"][0]["text"] == "paid A B rerun=True"
        assert effects == ["run", "pay", "run", "run"]

    asyncio.run(main())


def test_a_client_cannot_skip_a_once_or_forge_the_carried_answers() -> None:
    effects: list[str] = []
    server = rounds_server(effects)

    async def main() -> None:
        base = {"name": "two", "arguments": {}}
        forged = {"once:pay": {"paid": "free"}, "elicitation-1": {"action": "accept", "content": {"v": "X"}}}
        r = (await call(server, {**base, "inputResponses": forged}))["result"]
        assert r["resultType"] == "input_required" and list(r["inputRequests"]) == ["elicitation-2"]
        assert effects == ["run", "pay"]  # the once ran: a response cannot stand for it
        r1 = (await call(server, base, 2))["result"]
        tampered = r1["requestState"][:-2] + ("AA" if not r1["requestState"].endswith("AA") else "BB")
        r = await call(server, {**base, "requestState": tampered, "inputResponses": {}}, 3)
        assert r["error"]["code"] == -32602 and "requestState" in r["error"]["message"]
        # another tool's state, or the same tool with other arguments, is refused too
        r = await call(server, {"name": "reader", "arguments": {"uri": "notes://1"}, "requestState": r1["requestState"]}, 4)
        assert r["error"]["code"] == -32602

    asyncio.run(main())


READS = [
    ("notes://21", '{"n":21,"double":42}', False),
    ("notes://x", "URI variable 'n' must be an integer, got 'x'", True),
    ("nothing://here", "Resource not found", True),
]


@pytest.mark.parametrize(("uri", "text", "error"), READS)
def test_ctx_read_resource_takes_the_read_path(uri: str, text: str, error: bool) -> None:
    async def main() -> None:
        async with rounds_server([]).test_client() as client:
            r = await client.call_tool("reader", {"uri": uri})
            assert r["isError"] is error
            if error:  # a protocol error raised inside the tool: the client sees it as the call's error
                return
            assert r["content"][0]["text"] == text

    if error:
        from sturdyrpc.errors import RPCError

        with pytest.raises(RPCError, match=text):
            asyncio.run(main())
    else:
        asyncio.run(main())


@pytest.mark.parametrize(("args", "kwargs", "exc", "says"), [
    (("sse",), {}, ValueError, "transport must be 'stdio' or 'http'"),
    (("stdio",), {"port": 80}, TypeError, "host= and port= are for transport='http'"),
])
def test_run_refuses_what_it_cannot_serve(args: tuple[Any, ...], kwargs: dict[str, Any], exc: type[Exception], says: str) -> None:
    with pytest.raises(exc, match=says):
        MCPServer("x").run(*args, **kwargs)
