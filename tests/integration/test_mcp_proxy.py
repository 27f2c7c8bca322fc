"""``create_proxy``: a server fronting a running one, against real peers: a FastMCP server (PyPI
``fastmcp``) on stdio, ``sturdyrpc demo --mcp --http`` by URL, an ``MCPServer`` in process; the
official Python SDK client through a proxy served by ``sturdyrpc run``; a proxy mounted."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from support import SERVERS
from support.http import demo_http_cmd, free_port, server_process
from support.mcp import recorded_cmd, validate_recording
from support.sdk import Client, StdioServerParameters, need_python_sdk
from support.thirdparty import fastmcp_python

from sturdyrpc.errors import RPCError
from sturdyrpc.mcp import HANDSHAKE_VERSIONS, SUPPORTED_VERSIONS, MCPContext, MCPServer, ToolError, create_proxy

pytestmark = pytest.mark.timeout(90)

ERAS = ["2025-11-25", "2026-07-28"]


def fastmcp_cmd() -> list[str]:
    return [fastmcp_python(), str(SERVERS / "fastmcp_upstream_server.py")]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_python_sdk_client_through_a_proxy_of_fastmcp(mode: str, tmp_path: Path) -> None:
    """The official client, on stdio, to ``sturdyrpc run`` serving a proxy of a FastMCP server;
    every message the proxy writes is checked against the official schema."""
    need_python_sdk()
    env = {**os.environ, "PROXY_TARGET": json.dumps(fastmcp_cmd())}
    log = tmp_path / "wire"
    cmd = recorded_cmd(log, [sys.executable, "-m", "sturdyrpc", "run", f"{SERVERS / 'mcp_proxy_server.py'}:proxy"])
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=env)

    async def main() -> None:
        async with Client(params, mode=mode, read_timeout_seconds=30) as c:
            assert c.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
            assert c.server_info is not None and c.server_info.name == "test-proxy"
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert set(tools) == {"echo", "add", "slow", "fail"}
            assert tools["add"].output_schema is not None and tools["add"].output_schema["properties"]["result"]["type"] == "integer"
            assert tools["add"].annotations is not None and tools["add"].annotations.read_only_hint is True
            r = await c.call_tool("add", {"a": 2, "b": 40})
            assert not r.is_error and r.content[0].text == "42" and r.structured_content == {"result": 42}
            r = await c.call_tool("fail", {"reason": "on purpose"})
            assert r.is_error and r.content[0].text == "failed on purpose: on purpose"
            seen: list[float] = []

            async def on_progress(p: float, total: float | None, message: str | None) -> None:
                seen.append(p)

            r = await c.call_tool("slow", {"steps": 3}, progress_callback=on_progress)
            assert r.content[0].text == "done after 3 steps" and seen == [1, 2, 3]
            assert [str(x.uri) for x in (await c.list_resources()).resources] == ["data://config"]
            assert [x.uri_template for x in (await c.list_resource_templates()).resource_templates] == ["users://{user_id}/profile"]
            read = await c.read_resource("users://7/profile")
            assert json.loads(read.contents[0].text) == {"id": 7, "name": "user 7"}
            got = await c.get_prompt("review", {"code": "x = 1"})
            assert got.messages[0].content.text == "Please review: x = 1"

    asyncio.run(main())
    assert validate_recording(log, "2026-07-28" if mode == "auto" else "2025-11-25") >= 10


@pytest.mark.parametrize("version", ERAS)
def test_sturdyrpc_run_serves_a_proxy_on_http(version: str) -> None:
    """``sturdyrpc run module:proxy --http``: a proxy of a FastMCP server, called by URL."""
    from sturdyrpc.mcp_http.connect import connect_http

    port = free_port()
    cmd = [sys.executable, "-m", "sturdyrpc", "run", f"{SERVERS / 'mcp_proxy_server.py'}:proxy", "--http", f"127.0.0.1:{port}"]
    with server_process(cmd, port, env={"PROXY_TARGET": json.dumps(fastmcp_cmd())}):

        async def main() -> None:
            async with connect_http(f"http://127.0.0.1:{port}/mcp", version) as c:
                assert c.server_info["name"] == "test-proxy"
                progress: list[float] = []
                r = await c.call_tool("slow", {"steps": 2}, on_progress=lambda p, t, m: progress.append(p))
                assert r["structuredContent"] == {"result": "done after 2 steps"} and progress == [1, 2]
                r = await c.call_tool("fail", {"reason": "over http"})
                assert r["isError"] is True and r["content"][0]["text"] == "failed on purpose: over http"

        asyncio.run(main())


def _upstream(versions: tuple[str, ...]) -> tuple[MCPServer, dict[str, Any]]:
    """An ``MCPServer`` to proxy (speaking ``versions``), and what its tools saw."""
    up = MCPServer("upstream", "2.0", instructions="behind a proxy", supported_versions=versions)
    seen: dict[str, Any] = {"cancelled": asyncio.Event()}

    @up.tool
    def add(a: int, b: int) -> int:
        return a + b

    @up.tool
    async def steps(n: int, ctx: MCPContext) -> str:
        await ctx.log("warning", f"{n} steps")
        for i in range(n):
            await ctx.report_progress(i + 1, n)
        return "stepped"

    @up.tool
    async def ask(ctx: MCPContext) -> str:
        answer = await ctx.elicit("name?", {"type": "object", "properties": {"name": {"type": "string"}}})
        return f"hello {answer['content']['name']}"

    @up.tool
    async def think(ctx: MCPContext) -> str:
        sampled = await ctx.sample([{"role": "user", "content": {"type": "text", "text": "2+2?"}}], 10)
        roots = await ctx.list_roots()
        return f"{sampled['content']['text']} in {roots['roots'][0]['uri']}"

    @up.tool
    async def hang(ctx: MCPContext) -> str:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen["cancelled"].set()
            raise
        return "never"

    @up.tool
    def refuse(why: str) -> str:
        raise ToolError(why)

    @up.resource("notes://{topic}/text")
    def note(topic: str) -> str:
        return f"notes on {topic}"

    @up.prompt
    def greet(who: str) -> str:
        return f"greet {who}"

    @up.completion
    def complete(ref: dict[str, Any], argument: dict[str, Any], context: Any) -> list[str]:
        return [w for w in ("alice", "albert", "bob") if w.startswith(argument["value"])]

    return up, seen


@pytest.mark.parametrize("upstream", [HANDSHAKE_VERSIONS, SUPPORTED_VERSIONS], ids=["handshake-upstream", "modern-upstream"])
@pytest.mark.parametrize("version", ERAS)
def test_proxy_of_an_mcp_server_in_process(version: str, upstream: tuple[str, ...]) -> None:
    """Every era of caller through a proxy of each era of upstream (list changes come as
    notifications from a handshake-era upstream, on a listen stream from a 2026-07-28 one)."""
    up, seen = _upstream(upstream)
    proxy = create_proxy(up)
    logs: list[Any] = []

    async def main() -> None:
        answers = {"elicitation": lambda p: {"action": "accept", "content": {"name": "ada"}}, "roots": lambda: [{"uri": "file:///work"}],
                   "sampling": lambda p: {"role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m"}}
        async with proxy.test_client(version, on_log=logs.append, **answers) as c:
            assert c.server_info["name"] == "upstream" and c.instructions == "behind a proxy"
            assert proxy.lifespan_state.client.modern is (upstream is SUPPORTED_VERSIONS)  # the proxy's lifespan value: its Upstream
            await c.set_log_level("info")
            r = await c.call_tool("add", {"a": 1, "b": 2})
            assert r["structuredContent"] == {"result": 3} and r["isError"] is False
            progress: list[float] = []
            r = await c.call_tool("steps", {"n": 2}, on_progress=lambda p, t, m: progress.append(p))
            assert r["content"][0]["text"] == "stepped" and progress == [1, 2]
            assert [m["data"] for m in logs] == ["2 steps"]
            r = await c.call_tool("refuse", {"why": "no way"})
            assert r["isError"] is True and r["content"][0]["text"] == "no way"
            if version == "2025-11-25":  # the upstream's elicitation reaches the proxy's caller
                r = await c.call_tool("ask", {})
                assert r["content"][0]["text"] == "hello ada"
                r = await c.call_tool("think", {})
                assert r["content"][0]["text"] == "4 in file:///work"
            else:  # not forwarded to a 2026-07-28 caller: refused, and the upstream's error comes back
                with pytest.raises(RPCError, match="cannot forward elicitation/create"):
                    await c.call_tool("ask", {})
            read = await c.read_resource("notes://mcp/text")
            assert read["contents"] == [{"uri": "notes://mcp/text", "mimeType": "text/plain", "text": "notes on mcp"}]
            got = await c.get_prompt("greet", {"who": "you"})
            assert got["messages"][0]["content"]["text"] == "greet you"
            done = await c.complete({"type": "ref/prompt", "name": "greet"}, {"name": "who", "value": "al"})
            assert done["completion"]["values"] == ["alice", "albert"]
            # cancelling the proxied call cancels the upstream one
            task = asyncio.ensure_future(c.call_tool("hang", {}))
            await asyncio.sleep(0.2)
            task.cancel()
            await asyncio.wait_for(seen["cancelled"].wait(), 10)
            # the upstream's lists change: the proxy's follow (and tell its client)
            up.tool(lambda: "new", name="late")
            for _ in range(100):
                if "late" in {t["name"] for t in await c.list_tools()}:
                    break
                await asyncio.sleep(0.05)
            assert "late" in {t["name"] for t in await c.list_tools()}
            assert (await c.call_tool("late", {}))["content"][0]["text"] == "new"

    asyncio.run(main())


def test_proxy_of_the_demo_by_url() -> None:
    port = free_port()
    with server_process(demo_http_cmd(port, mcp=True), port):
        proxy = create_proxy(f"http://127.0.0.1:{port}/mcp")

        async def main() -> None:
            async with proxy.test_client("2025-11-25") as c:
                assert c.server_info["name"] == "sturdyrpc-demo"
                assert {"echo", "add", "slow", "fail"} <= {t["name"] for t in await c.list_tools()}
                r = await c.call_tool("add", {"a": 2, "b": 3})
                assert r["structuredContent"] == {"result": 5}
                progress: list[float] = []
                r = await c.call_tool("slow", {"seconds": 0.05, "steps": 2}, on_progress=lambda p, t, m: progress.append(p))
                assert r["isError"] is False and progress == [1, 2]
                r = await c.call_tool("fail", {})
                assert r["isError"] is True

        asyncio.run(main())


@pytest.mark.parametrize("version", ERAS)
def test_proxy_of_fastmcp_mounted_under_a_namespace(version: str) -> None:
    parent = MCPServer("parent")

    @parent.tool
    def own() -> str:
        return "mine"

    parent.mount(create_proxy(fastmcp_cmd()), "up")

    async def main() -> None:
        async with parent.test_client(version) as c:
            assert {t["name"] for t in await c.list_tools()} == {"own", "up_echo", "up_add", "up_slow", "up_fail"}
            r = await c.call_tool("up_add", {"a": 20, "b": 22})
            assert r["structuredContent"] == {"result": 42}
            r = await c.call_tool("up_fail", {"reason": "mounted"})
            assert r["isError"] is True and r["content"][0]["text"] == "failed on purpose: mounted"
            read = await c.read_resource("data://up/config")
            assert read["contents"][0]["uri"] == "data://up/config" and json.loads(read["contents"][0]["text"]) == {"mode": "test"}
            read = await c.read_resource("users://up/5/profile")
            assert read["contents"][0]["uri"] == "users://up/5/profile" and json.loads(read["contents"][0]["text"])["id"] == 5
            got = await c.get_prompt("up_review", {"code": "y"})
            assert got["messages"][0]["content"]["text"] == "Please review: y"

    asyncio.run(main())


def test_the_proxys_own_records_win_over_the_upstreams() -> None:
    up, _ = _upstream(SUPPORTED_VERSIONS)
    proxy = create_proxy(up, name="front")

    @proxy.tool
    def add(a: int, b: int) -> int:
        return a * b

    async def main() -> None:
        async with proxy.test_client() as c:
            assert (await c.call_tool("add", {"a": 3, "b": 4}))["structuredContent"] == {"result": 12}
            assert (await c.call_tool("steps", {"n": 1}))["content"][0]["text"] == "stepped"
            up.tool(lambda: "again", name="late")  # a refresh keeps the proxy's own
            for _ in range(100):
                if "late" in {t["name"] for t in await c.list_tools()}:
                    break
                await asyncio.sleep(0.05)
            assert (await c.call_tool("add", {"a": 3, "b": 4}))["structuredContent"] == {"result": 12}
        assert set(proxy.tools) == {"add"}  # the upstream's records leave with the lifespan

    asyncio.run(main())


@pytest.mark.parametrize(("target", "error"), [
    ("server.py", ValueError),
    ([], TypeError),
    ([1, 2], TypeError),
])
def test_create_proxy_refuses_what_is_not_a_target(target: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="create_proxy"):
        create_proxy(target)


@pytest.mark.parametrize("version", ERAS)
def test_a_proxy_of_fastmcp_hides_by_the_upstream_s_tags(version: str) -> None:
    """FastMCP lists each component's tags in ``_meta.fastmcp.tags``: the proxy's ``disable``
    names them, and the hidden tool is neither listed nor callable through the proxy."""
    proxy = create_proxy(fastmcp_cmd(), name="tagged-proxy")
    proxy.disable(tags={"danger"})

    async def main() -> None:
        async with proxy.test_client(version) as c:
            assert {t["name"] for t in await c.list_tools()} == {"echo", "add", "slow"}
            with pytest.raises(RPCError, match="Unknown tool"):
                await c.call_tool("fail", {"reason": "x"})
            proxy.enable(tags={"danger"})
            assert "fail" in {t["name"] for t in await c.list_tools()}

    asyncio.run(main())
