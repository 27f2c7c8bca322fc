"""Tags, ``include_tags``/``exclude_tags`` and ``server.enable``/``server.disable`` (FastMCP's
visibility rules): a hidden component is neither listed nor callable, and calling it is the
error of an unknown one, in memory (the stdio path), over Streamable HTTP in both eras, through
a mount and through a proxy; a change at run time tells open sessions their lists changed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from support.http import serve_in_loop

from sturdyrpc.errors import RPCError
from sturdyrpc.mcp import MCPClient, MCPServer, create_proxy
from sturdyrpc.mcp_http import mcp_http_app
from sturdyrpc.mcp_http.connect import connect_http

pytestmark = pytest.mark.timeout(60)

ERAS = ["2025-11-25", "2026-07-28"]


def make_server(**options: Any) -> MCPServer:
    server = MCPServer("tagged", **options)

    @server.tool(tags={"public"})
    def ping() -> str:
        return "pong"

    @server.tool(tags={"admin"})
    def wipe() -> str:
        return "wiped"

    @server.tool
    def plain() -> str:
        return "plain"

    @server.resource("data://secret", tags={"admin"})
    def secret() -> str:
        return "s3cret"

    @server.resource("users://{uid}/profile", tags={"public"})
    def profile(uid: int) -> dict[str, int]:
        return {"id": uid}

    @server.prompt(tags={"admin"})
    def audit() -> str:
        return "audit everything"

    return server


async def listed(c: MCPClient) -> dict[str, set[str]]:
    return {
        "tools": {t["name"] for t in await c.list_tools()},
        "resources": {r["uri"] for r in await c.list_resources()},
        "templates": {t["uriTemplate"] for t in await c.list_resource_templates()},
        "prompts": {p["name"] for p in await c.list_prompts()},
    }


async def error_of(call: Awaitable[Any], name: str = "") -> tuple[int, str]:
    """The error ``call`` fails with, the ``name`` it asked for written as ``<name>``."""
    with pytest.raises(RPCError) as info:
        await call
    return info.value.code, info.value.message.replace(name, "<name>") if name else info.value.message


async def same_error_as_unknown(c: MCPClient, tool: str, uri: str, prompt: str) -> None:
    """Calling, reading and getting a hidden component fails exactly as an unknown one does."""
    assert await error_of(c.call_tool(tool, {}), tool) == await error_of(c.call_tool("no_such_tool", {}), "no_such_tool")
    assert await error_of(c.read_resource(uri), uri) == await error_of(c.read_resource("data://no-such"), "data://no-such")
    assert await error_of(c.get_prompt(prompt), prompt) == await error_of(c.get_prompt("no_such_prompt"), "no_such_prompt")


def test_registration_checks_tags_and_rules() -> None:
    server = MCPServer("x")
    with pytest.raises(TypeError, match="collection of strings"):
        server.tool(lambda: 1, name="t", tags="admin")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="collection of strings"):
        server.disable(names="t")
    with pytest.raises(ValueError, match="unknown component kind"):
        server.disable(components={"tools"})


@pytest.mark.parametrize("era", ERAS)
def test_include_and_exclude_tags_in_memory(era: str) -> None:
    async def main() -> None:
        server = make_server(include_tags={"public", "admin"}, exclude_tags={"admin"})
        async with server.test_client(era) as c:
            assert await listed(c) == {"tools": {"ping"}, "resources": set(), "templates": {"users://{uid}/profile"},
                                       "prompts": set()}
            await same_error_as_unknown(c, "wipe", "data://secret", "audit")
            assert (await c.call_tool("ping", {}))["content"][0]["text"] == "pong"
            assert "plain" not in server.tools  # untagged: outside the allowlist
        # a rule holds for what is registered after it
        late = server.tool(lambda: "late", name="late", tags={"admin", "public"})
        assert late is not None and "late" not in server.tools
        assert server.remove_tool("late") and not server.remove_tool("late")  # a hidden one is removed too
        server.enable(names={"late"})
        assert "late" not in server.tools

    asyncio.run(main())


async def watch(c: MCPClient, era: str, seen: list[str]) -> Any:
    """Collect list-changed notifications: the session's own (handshake era), or a listen stream."""
    if era == "2026-07-28":
        return await c.listen({"toolsListChanged": True, "resourcesListChanged": True, "promptsListChanged": True},
                              lambda m, p: seen.append(m))
    return None


async def until(seen: list[str], wanted: set[str]) -> None:
    for _ in range(500):
        if wanted <= set(seen):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"only {seen} arrived, not {wanted}")


async def run_time_rules(server: MCPServer, connect: Callable[[list[str]], Any], era: str) -> None:
    """Disable by tag, then enable one name back, then an allowlist: the lists follow at once
    and the open session hears of every change."""
    seen: list[str] = []
    async with connect(seen) as c:
        stream = await watch(c, era, seen)
        assert (await listed(c))["tools"] == {"ping", "wipe", "plain"}
        server.disable(tags={"admin"})
        await until(seen, {"notifications/tools/list_changed", "notifications/resources/list_changed",
                           "notifications/prompts/list_changed"})
        assert await listed(c) == {"tools": {"ping", "plain"}, "resources": set(), "templates": {"users://{uid}/profile"},
                                   "prompts": set()}
        await same_error_as_unknown(c, "wipe", "data://secret", "audit")
        seen.clear()
        server.enable(names={"wipe"})  # the later rule wins, for that name only
        await until(seen, {"notifications/tools/list_changed"})
        assert (await c.call_tool("wipe", {}))["content"][0]["text"] == "wiped"
        assert (await listed(c))["prompts"] == set()
        seen.clear()
        server.enable(components={"template"}, only=True)  # the template was shown already: only tools change
        await until(seen, {"notifications/tools/list_changed"})
        assert await listed(c) == {"tools": set(), "resources": set(), "templates": {"users://{uid}/profile"}, "prompts": set()}
        assert (await error_of(c.call_tool("ping", {})))[0] == (await error_of(c.call_tool("no_such_tool", {})))[0]
        assert (await c.read_resource("users://7/profile"))["contents"][0]["text"] == '{"id":7}'
        assert "notifications/resources/list_changed" not in seen
        if stream is not None:
            await stream.close()


@pytest.mark.parametrize("era", ERAS)
def test_enable_and_disable_at_run_time_in_memory(era: str) -> None:
    server = make_server()
    asyncio.run(run_time_rules(server, lambda seen: server.test_client(era, on_notification=lambda m, p: seen.append(m)), era))


@pytest.mark.parametrize("era", ERAS)
def test_enable_and_disable_at_run_time_over_http(era: str) -> None:
    async def main() -> None:
        server = make_server()
        app = mcp_http_app(server)
        async with serve_in_loop(app) as url:
            try:
                await run_time_rules(server, lambda seen: connect_http(f"{url}/mcp", era, on_notification=lambda m, p: seen.append(m)), era)
            finally:
                await app.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("era", ERAS)
def test_a_mount_shows_what_the_child_shows_and_the_parent_rules_apply(era: str) -> None:
    async def main() -> None:
        child = make_server()
        parent = MCPServer("parent")
        parent.mount(child, "kid")
        seen: list[str] = []
        async with parent.test_client(era, on_notification=lambda m, p: seen.append(m)) as c:
            stream = await watch(c, era, seen)
            assert (await listed(c))["tools"] == {"kid_ping", "kid_wipe", "kid_plain"}
            child.disable(tags={"admin"})  # the child's rule: gone from the parent too
            await until(seen, {"notifications/tools/list_changed"})
            assert await listed(c) == {"tools": {"kid_ping", "kid_plain"}, "resources": set(),
                                       "templates": {"users://kid/{uid}/profile"}, "prompts": set()}
            await same_error_as_unknown(c, "kid_wipe", "data://kid/secret", "kid_audit")
            parent.disable(names={"kid_plain"})  # the parent's rule, on the mounted name
            assert (await listed(c))["tools"] == {"kid_ping"}
            child.enable(tags={"admin"})
            assert (await listed(c))["tools"] == {"kid_ping", "kid_wipe"}
            assert (await c.call_tool("kid_wipe", {}))["content"][0]["text"] == "wiped"
            if stream is not None:
                await stream.close()

    asyncio.run(main())


@pytest.mark.parametrize("era", ERAS)
def test_a_proxy_applies_its_own_rules_and_the_upstream_s(era: str) -> None:
    async def main() -> None:
        upstream = make_server()
        proxy = create_proxy(upstream, name="front")
        async with proxy.test_client(era) as c:
            assert (await listed(c))["tools"] == {"ping", "wipe", "plain"}
            proxy.disable(names={"plain"})
            assert (await listed(c))["tools"] == {"ping", "wipe"}
            assert await error_of(c.call_tool("plain", {}), "plain") == await error_of(c.call_tool("no_such_tool", {}), "no_such_tool")
            upstream.disable(tags={"admin"})  # the upstream tells the proxy, which lists again
            for _ in range(500):
                if (await listed(c))["tools"] == {"ping"}:
                    break
                await asyncio.sleep(0.01)
            assert await listed(c) == {"tools": {"ping"}, "resources": set(), "templates": {"users://{uid}/profile"}, "prompts": set()}

    asyncio.run(main())
