"""What a FastMCP user writes first works, or fails at once saying how: bare decorators, the
``Context`` annotation, typed URI variables and prompt arguments, JSON resource contents,
RFC 6570 operators."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

import pytest
from support.mcp import Wire, validate_def
from support.sdk import need_python_sdk

from sturdyrpc import Context, RPCError
from sturdyrpc.mcp import MCPContext, MCPServer

pytestmark = pytest.mark.timeout(30)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def habits_server() -> MCPServer:
    server = MCPServer("habits")

    @server.tool
    def bare(x: int) -> int:
        return x + 1

    @server.tool(name="named")
    def with_options(x: int, ctx: Context) -> str:
        return f"{x} {type(ctx).__name__} {ctx.method}"

    def direct(x: str, ctx: MCPContext | None = None) -> str:
        return x.upper()

    server.tool(direct, name="direct_named")

    @server.prompt
    def ask(topic: str, ctx: Context) -> str:
        return f"about {topic} ({ctx.method})"

    @server.prompt("counted")
    def counted(n: int, ratio: float = 1.0, loud: bool = False) -> str:
        return json.dumps([n, ratio, loud])

    @server.resource("users://{user_id}/profile")
    def profile(user_id: int, ctx: Context) -> dict[str, Any]:
        return {"id": user_id, "kind": type(user_id).__name__, "method": ctx.method}

    @server.resource("items://list")
    def items() -> list[int]:
        return [1, 2, 3]

    @server.resource("files://{path*}")
    def files(path: str) -> str:
        return f"file {path}"

    @server.resource("search://{kind}{?q,limit}")
    def search(kind: str, q: str = "", limit: int = 10) -> dict[str, Any]:
        return {"kind": kind, "q": q, "limit": limit}

    @server.resource("more://all?sort=asc{&page}")
    def more(page: int = 1) -> str:
        return f"page {page}"

    @server.resource("wide://{+rest}")
    def wide(rest: str) -> str:
        return f"wide {rest}"

    @server.resource("page://doc{#section}")
    def section(section: str) -> str:
        return f"section {section}"

    @server.resource("mode://{mode}")
    def by_mode(mode: Literal["fast", "slow"]) -> str:
        return mode

    return server


def test_bare_and_direct_decorators_register_and_return_the_function() -> None:
    server = habits_server()
    assert set(server.tools) == {"bare", "named", "direct_named"}
    assert set(server.prompts) == {"ask", "counted"}
    assert server.tools["bare"].fn(1) == 2  # the function itself, not a decorator, is what the name holds
    for t in server.tools.values():
        assert "ctx" not in t.input_schema["properties"], t.name
    assert [a["name"] for a in server.prompts["ask"].arguments] == ["topic"]


@pytest.mark.parametrize(("use", "says"), [
    (lambda s: s.tool(name=lambda x: x), "name must be a string"),
    (lambda s: s.tool(42), "expected a function or a name"),
    (lambda s: s.tool("a", name="b"), "given twice"),
    (lambda s: s.tool()(42), "decorates a function"),
    (lambda s: s.tool()(int), "decorates a function"),
    (lambda s: s.prompt(name=3), "name must be a string"),
    (lambda s: s.prompt()("text"), "decorates a function"),
    (lambda s: s.resource(lambda: "x"), "needs the resource's URI"),
    (lambda s: s.resource("a://b")(None), "decorates a function"),
])
def test_a_decorator_used_wrongly_says_how(use: Any, says: str) -> None:
    server = MCPServer("wrong")
    with pytest.raises(TypeError, match=says) as info:
        use(server)
    assert "@server." in str(info.value)
    assert not server.tools and not server.prompts and not server.resources


@pytest.mark.parametrize(("uri", "says"), [
    ("x://{.ext}", "is not supported"),
    ("x://{/seg}", "is not supported"),
    ("x://{;p}", "is not supported"),
    ("x://{a,b}", "is not supported"),
    ("x://{a:3}", "is not supported"),
    ("x://{?q}/tail", "must come last"),
    ("x://{a}{?a}", "appears twice"),
    ("x://{nope}", "has no parameter 'nope'"),
])
def test_templates_that_cannot_match_are_refused_at_registration(uri: str, says: str) -> None:
    server = MCPServer("t")
    with pytest.raises(ValueError, match=says):
        server.resource(uri)(lambda a="", b=0: "")  # noqa: ARG005
    assert not server.templates


def test_fixed_template_check_names_required_parameter() -> None:
    server = MCPServer("t")
    with pytest.raises(ValueError, match=r"required parameter\(s\) 'b' are not path variables"):
        server.resource("x://fixed/{a}")(lambda a, b: "")


READS = [
    ("users://42/profile", {"id": 42, "kind": "int", "method": "resources/read"}),
    ("items://list", [1, 2, 3]),
    ("search://books", {"kind": "books", "q": "", "limit": 10}),
    ("search://books?q=dune&limit=3", {"kind": "books", "q": "dune", "limit": 3}),
    ("search://books?limit=3&q=a%20b", {"kind": "books", "q": "a b", "limit": 3}),
    ("search://books?other=1", {"kind": "books", "q": "", "limit": 10}),
]


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_json_resources_are_one_schema_valid_text_content(version: str) -> None:
    async def main() -> None:
        async with Wire(habits_server()) as w:
            await w.initialize(version)
            for i, (uri, want) in enumerate(READS):
                r = await w.call("resources/read", {"uri": uri}, id=10 + i)
                contents = r["result"]["contents"]
                assert len(contents) == 1, uri
                assert contents[0]["mimeType"] == "application/json" and contents[0]["uri"] == uri
                assert json.loads(contents[0]["text"]) == want, uri
                validate_def(version, "ReadResourceResult", r["result"])
            w.validate(version)

    run(main())


TEXT_READS: list[tuple[str, str | None]] = [
    ("files://a/b/c.txt", "file a/b/c.txt"),
    ("files://one", "file one"),
    ("more://all?sort=asc", "page 1"),
    ("more://all?sort=asc&page=4", "page 4"),
    ("mode://fast", "fast"),
    ("wide://a/b?c", "wide a/b?c"),
    ("files://my%20notes/a.txt", "file my notes/a.txt"),  # percent-decoded
    ("page://doc#intro", "section intro"),
    ("users://a%20b/x", None),
]


def test_wide_and_continued_templates_match() -> None:
    async def main() -> None:
        async with habits_server().test_client() as client:
            for uri, want in TEXT_READS:
                if want is None:  # matches no template: not found
                    with pytest.raises(RPCError, match="Resource not found"):
                        await client.read_resource(uri)
                    continue
                r = await client.read_resource(uri)
                assert r["contents"] == [{"uri": uri, "mimeType": "text/plain", "text": want}], uri

    run(main())


BAD = [
    ("resources/read", {"uri": "users://abc/profile"}, "URI variable 'user_id' must be an integer, got 'abc'"),
    ("resources/read", {"uri": "search://b?limit=many"}, "URI variable 'limit' must be an integer, got 'many'"),
    ("resources/read", {"uri": "mode://medium"}, "URI variable 'mode'"),
    ("prompts/get", {"name": "counted", "arguments": {"n": "x"}}, "prompt argument 'n' must be an integer, got 'x'"),
    ("prompts/get", {"name": "counted", "arguments": {"n": "1", "ratio": "fast"}}, "prompt argument 'ratio'"),
]


@pytest.mark.parametrize(("method", "params", "says"), BAD)
def test_values_that_do_not_convert_name_the_variable(method: str, params: dict[str, Any], says: str) -> None:
    async def main() -> None:
        async with Wire(habits_server()) as w:
            await w.initialize("2025-11-25")
            r = await w.call(method, params, id=2)
            assert r["error"]["code"] == -32602
            assert says in r["error"]["message"]

    run(main())


PROMPTS = [
    ({"n": "5"}, [5, 1.0, False]),
    ({"n": "5", "ratio": "2.5", "loud": "true"}, [5, 2.5, True]),
    ({"n": "-3", "ratio": "2", "loud": "False"}, [-3, 2, False]),
]


@pytest.mark.parametrize(("arguments", "want"), PROMPTS)
def test_prompt_arguments_arrive_typed(arguments: dict[str, str], want: list[Any]) -> None:
    async def main() -> None:
        async with habits_server().test_client() as client:
            r = await client.get_prompt("counted", arguments)
            assert json.loads(r["messages"][0]["content"]["text"]) == want
            r = await client.get_prompt("ask", {"topic": "tea"})
            assert r["messages"][0]["content"]["text"] == "about tea (prompts/get)"

    run(main())


def test_context_and_mcpcontext_are_one_thing_on_tools() -> None:
    async def main() -> None:
        async with habits_server().test_client() as client:
            r = await client.call_tool("named", {"x": 3})
            assert r["content"][0]["text"] == "3 MCPContext tools/call"
            r = await client.call_tool("direct_named", {"x": "a"})
            assert r["content"][0]["text"] == "A"
            r = await client.call_tool("bare", {"x": 1})
            assert r["structuredContent"] == {"result": 2}

    run(main())


def failing_server(mask: bool | None) -> MCPServer:
    server = MCPServer("errors") if mask is None else MCPServer("errors", mask_errors=mask)

    @server.tool
    async def weather(city: str) -> str:
        raise ValueError(f"unknown city {city!r}")

    @server.tool(blocking=False)
    def inline(city: str) -> str:
        raise LookupError(f"no {city} here")

    @server.tool
    def quiet() -> str:
        raise RuntimeError()

    return server


ERRORS = [
    (None, "weather", {"city": "Atlantis"}, None),
    (True, "weather", {"city": "Atlantis"}, None),
    (False, "weather", {"city": "Atlantis"}, "unknown city 'Atlantis'"),
    (False, "inline", {"city": "Atlantis"}, "no Atlantis here"),
    (False, "quiet", {}, None),  # nothing to say: the generic text
]


@pytest.mark.parametrize(("mask", "tool", "arguments", "shown"), ERRORS)
def test_mask_errors_false_sends_the_message_alone(mask: bool | None, tool: str, arguments: dict[str, Any], shown: str | None,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with failing_server(mask).test_client() as client:
            r = await client.call_tool(tool, arguments)
        assert r["isError"] is True
        text = r["content"][0]["text"]
        if shown is None:
            assert text.startswith("The tool failed with an internal error (incident ")
        else:
            assert text == shown
        for leak in ("ValueError", "LookupError", "RuntimeError", "Traceback", ".py"):
            assert leak not in json.dumps(r)
        assert any(rec.exc_info for rec in caplog.records if rec.name == "sturdyrpc.mcp")  # logged either way

    with caplog.at_level("ERROR", logger="sturdyrpc.mcp"):
        run(main())


def test_completion_bare_and_a_model_resource_and_the_log_order_hint() -> None:
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        population: int

    server = MCPServer("more")

    @server.completion
    def complete(ref: dict[str, Any], argument: dict[str, Any], context: dict[str, Any] | None) -> list[str]:
        return ["oslo", "osaka"]

    @server.resource("cities://{name}")
    def city(name: str) -> City:
        return City(name=name, population=700_000)

    @server.prompt
    def visit(name: str) -> str:
        return name

    @server.tool
    async def chatty(ctx: Context) -> str:
        await ctx.log("hello", "info")  # type: ignore[attr-defined]  # FastMCP's order
        return "never"

    assert server.completer is complete

    async def main() -> None:
        async with server.test_client() as client:
            r = await client.read_resource("cities://oslo")
            assert r["contents"] == [{"uri": "cities://oslo", "mimeType": "application/json", "text": '{"name":"oslo","population":700000}'}]
            c = await client.complete({"type": "ref/prompt", "name": "visit"}, {"name": "name", "value": "os"})
            assert c["completion"]["values"] == ["oslo", "osaka"]

    run(main())
    server.mask_errors = False

    async def logs() -> None:
        async with server.test_client() as client:
            r = await client.call_tool("chatty", {})
            assert r["isError"] is True
            assert r["content"][0]["text"] == "unknown log level 'hello' (the level comes first: ctx.log('info', 'hello'))"

    run(logs())


def test_prompt_message_helpers_make_schema_valid_results() -> None:
    """FastMCP's ``Message`` / ``PromptResult`` (and the older ``UserMessage`` /
    ``AssistantMessage``) as prompt returns, each checked by the official SDK's models."""
    need_python_sdk()
    from mcp_types import GetPromptResult

    from sturdyrpc.mcp import AssistantMessage, Message, PromptResult, UserMessage, image_content

    server = MCPServer("prompts")

    @server.prompt
    def chat(topic: str) -> list[Message]:
        """Talk about a topic."""
        return [UserMessage(f"Tell me about {topic}"), AssistantMessage({"topic": topic, "known": True}),
                Message(image_content(b"\x89PNG", "image/png"))]

    @server.prompt
    def whole() -> PromptResult:
        return PromptResult([Message("hi"), Message("hello", role="assistant")], description="own", meta={"k": 1})

    @server.prompt
    def one() -> Message:
        return AssistantMessage("just me")

    async def main() -> None:
        async with server.test_client() as c:
            got = await c.get_prompt("chat", {"topic": "owls"})
            r = GetPromptResult.model_validate(got)
            assert [m.role for m in r.messages] == ["user", "assistant", "user"]
            assert got["messages"][1]["content"] == {"type": "text", "text": '{"topic":"owls","known":true}'}
            assert got["messages"][2]["content"]["type"] == "image" and got["description"] == "Talk about a topic."
            got = await c.get_prompt("whole")
            GetPromptResult.model_validate(got)
            assert got["description"] == "own" and got["_meta"]["k"] == 1 and got["messages"][1]["role"] == "assistant"
            got = await c.get_prompt("one")
            assert got["messages"] == [{"role": "assistant", "content": {"type": "text", "text": "just me"}}]

    asyncio.run(main())
    with pytest.raises(ValueError, match="'user' or 'assistant'"):
        Message("x", role="system")
    with pytest.raises(TypeError, match="list of Message"):
        PromptResult(["plain"])  # type: ignore[list-item]
