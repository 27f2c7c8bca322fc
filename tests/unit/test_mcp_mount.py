"""``server.mount``: names, live changes (with ``list_changed``), precedence, nesting, what is
refused, and the parent's middleware around a mounted tool."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sturdyrpc.mcp import MCPServer

pytestmark = pytest.mark.timeout(30)


def child_server(name: str = "child") -> MCPServer:
    child = MCPServer(name)

    @child.tool
    def add(a: int, b: int) -> int:
        return a + b

    @child.resource("file:///etc/motd")
    def motd() -> str:
        return "hello"

    @child.resource("docs://{path*}")
    def doc(path: str) -> str:
        return f"doc {path}"

    @child.prompt
    def hi(n: int) -> str:
        return "hi " * n

    return child


NAMES = [
    ("math", {"math_add"}, {"file://math//etc/motd"}, {"docs://math/{path*}"}, {"math_hi"}),
    (None, {"add"}, {"file:///etc/motd"}, {"docs://{path*}"}, {"hi"}),
]


@pytest.mark.parametrize(("ns", "tools", "resources", "templates", "prompts"), NAMES)
def test_mounted_names_are_fastmcps(ns: str | None, tools: set[str], resources: set[str], templates: set[str], prompts: set[str]) -> None:
    parent = MCPServer("parent")
    parent.mount(child_server(), ns)
    assert set(parent.tools) == tools and set(parent.resources) == resources
    assert set(parent.templates) == templates and set(parent.prompts) == prompts

    async def main() -> None:
        async with parent.test_client() as client:
            r = await client.call_tool(next(iter(tools)), {"a": 2, "b": 3})
            assert r["structuredContent"] == {"result": 5}
            uri = "docs://math/a/b.md" if ns else "docs://a/b.md"
            assert (await client.read_resource(uri))["contents"][0]["text"] == "doc a/b.md"
            r = await client.get_prompt(next(iter(prompts)), {"n": "2"})
            assert r["messages"][0]["content"]["text"] == "hi hi "

    asyncio.run(main())


def test_changes_to_the_child_show_at_once_with_list_changed() -> None:
    parent, child = MCPServer("parent"), child_server()
    parent.mount(child, "c")
    seen: list[str] = []

    async def main() -> None:
        async with parent.test_client("2025-11-25", on_notification=lambda method, params: seen.append(method)) as client:
            @child.tool
            def mul(a: int, b: int) -> int:
                return a * b

            r = await client.call_tool("c_mul", {"a": 4, "b": 5})
            assert r["structuredContent"] == {"result": 20}
            assert child.remove_tool("add")
            assert {t["name"] for t in await client.list_tools()} == {"c_mul"}
            await asyncio.sleep(0.1)

    asyncio.run(main())
    assert seen.count("notifications/tools/list_changed") >= 2
    assert "c_add" not in parent.tools


def test_the_parents_own_names_win_and_nesting_works() -> None:
    parent, child, grandchild = MCPServer("parent"), child_server(), child_server("grand")

    @parent.tool
    def c_add(a: int, b: int) -> int:  # the parent's own, under a name a mount would take
        return 0

    child.mount(grandchild, "g")
    parent.mount(child, "c")
    assert parent.tools["c_add"].fn is c_add
    assert "c_g_add" in parent.tools and "c_g_hi" in parent.prompts
    assert "docs://c/g/{path*}" in parent.templates

    @grandchild.tool
    def late() -> str:
        return "late"

    assert "c_g_late" in parent.tools  # through two mounts, at once


@pytest.mark.parametrize("namespace", ["", "a/b", "x{y}", "a b", "s:x"])
def test_bad_namespaces_are_refused(namespace: str) -> None:
    with pytest.raises(ValueError, match="namespace"):
        MCPServer("p").mount(child_server(), namespace)


def test_a_server_cannot_be_mounted_in_itself() -> None:
    a, b = MCPServer("a"), MCPServer("b")
    a.mount(b, "b")
    with pytest.raises(ValueError, match="mounted in itself"):
        b.mount(a, "a")
    with pytest.raises(ValueError, match="mounted in itself"):
        a.mount(a, "a")


def test_a_resource_without_scheme_cannot_take_a_namespace() -> None:
    child = MCPServer("c")
    child.resource("plain-name")(lambda: "x")
    with pytest.raises(ValueError, match="no scheme://"):
        MCPServer("p").mount(child, "n")


def test_the_parents_middleware_runs_around_mounted_tools() -> None:
    parent = MCPServer("parent")
    parent.mount(child_server(), "m")
    calls: list[Any] = []

    @parent.middleware
    async def record(ctx: Any, call_next: Any) -> Any:
        if ctx.method == "tools/call":
            calls.append(ctx.params["name"])
        return await call_next(ctx)

    async def main() -> None:
        async with parent.test_client() as client:
            await client.call_tool("m_add", {"a": 1, "b": 1})

    asyncio.run(main())
    assert calls == ["m_add"]


@pytest.mark.parametrize("protocol", ["2025-11-25", "2026-07-28"])
def test_a_mounted_tool_runs_as_a_task_and_keeps_its_scopes(protocol: str) -> None:
    child = MCPServer("child")

    @child.tool(task_support="optional", scopes=["reports"])
    async def report(n: int) -> str:
        await asyncio.sleep(0.01)
        return f"report {n}"

    parent = MCPServer("parent")
    parent.mount(child, "r")
    assert parent.required_scopes("tools/call", {"name": "r_report"}) == frozenset({"reports"})

    async def main() -> None:
        async with parent.test_client(protocol) as client:
            handle = await client.call_tool_as_task("r_report", {"n": 3})
            result = await handle.result()
            assert result["content"][0]["text"] == "report 3"

    asyncio.run(main())
