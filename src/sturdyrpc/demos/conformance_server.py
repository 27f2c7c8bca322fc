"""The conformance fixture server (``sturdyrpc demo --conformance``, ``--http HOST:PORT`` for
Streamable HTTP at ``/mcp``): the MCP demo plus every tool, resource and prompt the newest
official MCP conformance suite's server scenarios call by name.

The suite names its fixtures and what each must do (its scenario descriptions); they are written
here with the public :class:`~sturdyrpc.mcp.MCPServer` API only, as a user would write them. The
protocol rules the scenarios check are the library's, not this module's:

- 2026-07-28 multi round-trip requests (SEP-2322): ``test_input_required_result_*`` tools and
  the ``test_input_required_result_prompt`` prompt ask with the keys the suite expects;
- the tasks extension (SEP-2663): ``greet`` (never a task), ``slow_compute``, ``failing_job``,
  ``protocol_error_job``, ``confirm_delete``, ``multi_input`` and ``test_tool_with_task``;
- stateless serving (SEP-2575): ``test_missing_capability``, ``test_streaming_elicitation``,
  ``test_logging_tool``, ``test_trigger_tool_change`` and ``test_trigger_prompt_change``;
- custom request headers (SEP-2243): ``test_custom_headers``, whose parameters carry
  ``x-mcp-header`` annotations.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..errors import RPCError
from ..mcp import MCPContext, MCPServer, ToolError, text_content
from .mcp import make_mcp_demo

__all__ = ["make_conformance_server", "make_conformance_app"]

_NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def make_conformance_server() -> MCPServer:
    """The MCP demo with the newest conformance suite's fixtures added."""
    server = make_mcp_demo()
    server.name = "sturdyrpc-conformance"
    _input_required_fixtures(server)
    _task_fixtures(server)
    _stateless_fixtures(server)
    _custom_header_fixture(server)
    return server


def make_conformance_app(**options: Any) -> Any:
    """The fixture server over Streamable HTTP at ``/mcp`` (options: see
    :func:`sturdyrpc.demos.mcp_http.make_demo_app`)."""
    from .mcp_http import make_demo_app

    return make_demo_app(server=make_conformance_server(), **options)


def _content_of(answer: Any) -> dict[str, Any]:
    """The ``content`` of an elicitation answer (empty unless the user accepted)."""
    content = answer.get("content") if type(answer) is dict and answer.get("action") == "accept" else None
    return content if type(content) is dict else {}


def _sampled_text(answer: Any) -> str:
    content = answer.get("content") if type(answer) is dict else None
    if isinstance(content, list):
        content = content[0] if content else {}
    return str(content.get("text", "")) if isinstance(content, dict) else ""


def _input_required_fixtures(server: MCPServer) -> None:
    """SEP-2322: requests that need input from the client before they can finish."""

    @server.tool()
    async def test_input_required_result_elicitation(ctx: MCPContext) -> str:
        """Asks for the user's name (elicitation), then greets them."""
        answer = await ctx.elicit("What is your name?", _NAME_SCHEMA, key="user_name")
        return f"Hello, {_content_of(answer).get('name', 'stranger')}!"

    @server.tool()
    async def test_input_required_result_sampling(ctx: MCPContext) -> str:
        """Asks the client's LLM for the capital of France."""
        answer = await ctx.sample([{"role": "user", "content": {"type": "text", "text": "What is the capital of France?"}}], 100,
                                  key="capital_question")
        return f"The model answered: {_sampled_text(answer)}"

    @server.tool()
    async def test_input_required_result_list_roots(ctx: MCPContext) -> str:
        """Asks for the client's roots and names them."""
        answer = await ctx.list_roots(key="client_roots")
        roots = answer.get("roots") if type(answer) is dict else None
        uris = [str(r.get("uri")) for r in roots if type(r) is dict] if type(roots) is list else []
        return f"Client roots: {', '.join(uris) or '(none)'}"

    @server.tool()
    async def test_input_required_result_request_state(ctx: MCPContext) -> str:
        """Asks for a confirmation; the retry's requestState is checked by the server."""
        answer = await ctx.elicit("Please confirm", {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
                                  key="confirm")
        # the server refuses a retry whose requestState does not verify before this tool runs again
        state = "state-ok" if "requestState" in ctx.params else "no state"
        return f"Confirmed: {_content_of(answer).get('ok')} ({state})"

    @server.tool()
    async def test_input_required_result_multiple_inputs(ctx: MCPContext) -> str:
        """Asks for a name, a sampled greeting and the roots, all in one round."""
        got = await ctx.ask_all({
            "user_name": ("elicitation/create", {"message": "What is your name?", "requestedSchema": _NAME_SCHEMA}),
            "greeting": ("sampling/createMessage", {
                "messages": [{"role": "user", "content": {"type": "text", "text": "Generate a greeting"}}], "maxTokens": 50}),
            "client_roots": ("roots/list", {}),
        })
        return f"{_sampled_text(got['greeting'])} {_content_of(got['user_name']).get('name', 'stranger')}"

    @server.tool()
    async def test_input_required_result_multi_round(ctx: MCPContext) -> str:
        """Two rounds: a name, then a favourite colour."""
        first = await ctx.elicit("Step 1: What is your name?", _NAME_SCHEMA, key="step1")
        second = await ctx.elicit("Step 2: What is your favorite color?",
                                  {"type": "object", "properties": {"color": {"type": "string"}}, "required": ["color"]}, key="step2")
        return f"{_content_of(first).get('name')} likes {_content_of(second).get('color')}"

    @server.tool()
    async def test_input_required_result_tampered_state(ctx: MCPContext) -> str:
        """Asks for a name; a retry with a tampered requestState is refused by the server."""
        answer = await ctx.elicit("What is your name?", _NAME_SCHEMA, key="user_name")
        return f"Hello, {_content_of(answer).get('name', 'stranger')}!"

    @server.tool()
    async def test_input_required_result_capabilities(ctx: MCPContext) -> str:
        """Asks only for what the client declared: elicitation if it can, else sampling, else nothing."""
        caps = ctx.client_capabilities
        if "elicitation" in caps:
            answer = await ctx.elicit("What is your name?", _NAME_SCHEMA, key="user_name")
            return f"Hello, {_content_of(answer).get('name', 'stranger')}!"
        if "sampling" in caps:
            sampled = await ctx.sample([{"role": "user", "content": {"type": "text", "text": "Say hello"}}], 50, key="hello")
            return _sampled_text(sampled)
        return "The client declared no capability to ask with."

    @server.prompt(description="A prompt that asks the user for its context first")
    async def test_input_required_result_prompt(ctx: MCPContext) -> list[dict[str, Any]]:
        answer = await ctx.elicit("What context should the prompt use?",
                                  {"type": "object", "properties": {"context": {"type": "string"}}, "required": ["context"]},
                                  key="user_context")
        return [{"role": "user", "content": text_content(f"Answer within this context: {_content_of(answer).get('context')}")}]


def _task_fixtures(server: MCPServer) -> None:
    """SEP-2663: tools that run as tasks (the server decides, for a client with the extension)."""

    @server.tool()
    async def greet(name: str) -> str:
        """Greets ``name`` at once (never a task)."""
        return f"Hello, {name}!"

    @server.tool(task_support="optional")
    async def slow_compute(seconds: float = 1.0, label: str = "") -> str:
        """Sleeps ``seconds``, then answers; cancelled while it sleeps, it ends cancelled."""
        if not 0 <= seconds <= 600:
            raise ToolError("seconds must be between 0 and 600")
        await asyncio.sleep(seconds)
        return f"computed {label or 'result'} in {seconds:g} s"

    @server.tool(task_support="required")
    async def failing_job() -> str:
        """Fails with a tool error after about a second."""
        await asyncio.sleep(1.0)
        raise ToolError("failing_job failed, as it always does")

    @server.tool(task_support="optional")
    async def protocol_error_job() -> str:
        """Ends in a protocol error (not a tool error)."""
        await asyncio.sleep(0.2)
        raise RPCError("protocol_error_job: internal failure", {"job": "protocol_error_job"})

    @server.tool(task_support="optional")
    async def confirm_delete(filename: str = "example.txt", ctx: MCPContext | None = None) -> str:
        """Asks the user to confirm deleting ``filename``."""
        if ctx is None:
            raise ToolError("confirm_delete needs its context")
        answer = await ctx.elicit(f"Delete {filename}?", {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]})
        return f"{filename}: {'deleted' if _content_of(answer).get('confirm') else 'kept'}"

    @server.tool(task_support="optional")
    async def multi_input(ctx: MCPContext) -> str:
        """Asks two questions at once (two inputs outstanding together)."""
        got = await ctx.ask_all({
            "first": ("elicitation/create", {"message": "First value?", "requestedSchema": {
                "type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}}),
            "second": ("elicitation/create", {"message": "Second value?", "requestedSchema": {
                "type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}}),
        })
        return f"first={_content_of(got['first']).get('value')}, second={_content_of(got['second']).get('value')}"

    @server.tool(task_support="required")
    async def test_tool_with_task(ctx: MCPContext) -> str:
        """Asks for the user's name, then runs as a task whose result names them."""
        answer = await ctx.elicit("What is your name?", _NAME_SCHEMA, key="user_name", before_task=True)
        await asyncio.sleep(0.2)
        return f"Task done for {_content_of(answer).get('name', 'stranger')}"


def _stateless_fixtures(server: MCPServer) -> None:
    """SEP-2575: capability checks, request streams, logging and list changes."""

    @server.tool()
    async def test_missing_capability(ctx: MCPContext) -> str:
        """Needs the client's sampling capability (refused with -32021 without it)."""
        answer = await ctx.sample([{"role": "user", "content": {"type": "text", "text": "Say hello"}}], 20)
        return _sampled_text(answer)

    @server.tool()
    async def test_streaming_elicitation(ctx: MCPContext) -> str:
        """Reports progress, then asks the user a question."""
        await ctx.report_progress(1, 2, "about to ask")
        answer = await ctx.elicit("Continue?", {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
        return f"continue={_content_of(answer).get('ok')}"

    @server.tool()
    async def test_logging_tool(ctx: MCPContext) -> str:
        """Logs three messages (sent only at the level the request asked for)."""
        for step in ("started", "working", "done"):
            await ctx.info(f"test_logging_tool {step}")
        return "logged"

    @server.tool()
    async def test_trigger_tool_change() -> str:
        """Adds the tool ``dynamic_tool``, or removes it: the tool list changes."""
        if server.remove_tool("dynamic_tool"):
            return "removed dynamic_tool"

        @server.tool(name="dynamic_tool")
        async def dynamic_tool() -> str:
            """A tool that comes and goes (see test_trigger_tool_change)."""
            return "dynamic"

        return "added dynamic_tool"

    @server.tool()
    async def test_trigger_prompt_change() -> str:
        """Adds the prompt ``dynamic_prompt``, or removes it: the prompt list changes."""
        if server.remove_prompt("dynamic_prompt"):
            return "removed dynamic_prompt"

        @server.prompt(name="dynamic_prompt", description="A prompt that comes and goes")
        def dynamic_prompt() -> str:
            return "A dynamic prompt."

        return "added dynamic_prompt"


def _custom_header_fixture(server: MCPServer) -> None:
    """SEP-2243: parameters mirrored into ``Mcp-Param-*`` request headers."""

    @server.tool(
        name="test_custom_headers",
        description="Runs a query in a region; region, priority and verbose travel as Mcp-Param headers too",
        input_schema={
            "type": "object",
            "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "priority": {"type": "integer", "x-mcp-header": "Priority"},
                "verbose": {"type": "boolean", "x-mcp-header": "Verbose"},
                "query": {"type": "string"},
            },
            "required": ["region", "query"],
        },
    )
    async def test_custom_headers(region: str, query: str, priority: int | None = None, verbose: bool | None = None) -> str:
        return f"region={region} priority={priority} verbose={verbose} query={query}"
