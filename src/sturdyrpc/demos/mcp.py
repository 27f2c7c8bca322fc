"""The MCP demo server (``sturdyrpc demo --mcp``).

Tools ``echo``, ``add``, ``fail`` (an exception inside a tool: the client sees only a generic
error and an incident id), ``slow`` (progress and cancellation; may run as an MCP task) and
``report`` (a long job that must run as a task: ``task_support="required"``), plus the fixtures the
official MCP conformance suite's server scenarios call (``test_*`` tools, ``test://``
resources, prompts, completion, logging, sampling, elicitation), and ``update_watched`` /
``toggle_extra_tool``, which make the notifications a ``subscriptions/listen`` stream (or, in
the handshake era, a subscription) carries.
"""

from __future__ import annotations

import asyncio
import base64
import struct
from typing import Any

from .._version import __version__
from ..mcp import (
    MCPContext,
    MCPServer,
    ToolError,
    ToolResult,
    audio_content,
    embedded_resource,
    image_content,
    text_content,
)

__all__ = ["make_mcp_demo", "RED_PIXEL_PNG"]

#: A 1x1 red PNG, base64.
RED_PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="


def _tiny_wav() -> str:
    samples = b"\x00\x00" * 8
    header = b"RIFF" + struct.pack("<I", 36 + len(samples)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 8000, 16000, 2, 16)
    return base64.b64encode(header + b"data" + struct.pack("<I", len(samples)) + samples).decode()


def make_mcp_demo() -> MCPServer:
    """Build the demo server."""
    server = MCPServer("sturdyrpc-demo", __version__, title="sturdyrpc MCP demo", instructions="A demo server: echo, add, fail, slow.")
    # The order of registration is the order of the lists clients see.
    _demo_tools(server)
    _content_fixtures(server)
    _client_request_fixtures(server)
    _schema_fixture(server)
    _resources(server)
    _watched(server)
    _prompts(server)
    _completion(server)
    return server


def _demo_tools(server: MCPServer) -> None:
    """The demo's own tools: echo, add, fail, slow, report (a task) and approve (elicitation)."""

    @server.tool(annotations={"readOnlyHint": True}, blocking=False)
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool(annotations={"readOnlyHint": True}, blocking=False)
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    async def fail() -> str:
        """Always fails with an internal error (its details never reach the client)."""
        raise RuntimeError("SECRET-TOKEN-42 /etc/shadow")

    @server.tool(task_support="optional")
    async def slow(seconds: float, steps: int = 1, ctx: MCPContext | None = None) -> str:
        """Sleep for ``seconds``, reporting progress ``steps`` times when asked."""
        if seconds < 0 or steps < 0:
            raise ToolError("seconds and steps must not be negative")
        n = max(steps, 1)
        for i in range(1, n + 1):
            await asyncio.sleep(seconds / n)
            if ctx is not None and steps > 0:
                await ctx.report_progress(i, steps, f"step {i} of {steps}")
        return f"slept {seconds} seconds"

    @server.tool(task_support="required")
    async def report(topic: str = "sales", seconds: float = 0.5, ctx: MCPContext | None = None) -> str:
        """Write a report on ``topic``, taking ``seconds``: a long job, called as a task (2025-11-25
        ``params.task``; a client declaring the 2026-07-28 tasks extension gets a task)."""
        if not 0 <= seconds <= 3600:
            raise ToolError("seconds must be between 0 and 3600")
        for i in range(1, 5):
            await asyncio.sleep(seconds / 4)
            if ctx is not None:
                await ctx.report_progress(i, 4, f"section {i} of 4")
        return f"Report on {topic}: 4 sections written in {seconds:g} s."

    @server.tool(task_support="optional")
    async def approve(action: str = "deploy", ctx: MCPContext | None = None) -> str:
        """Ask the user to approve ``action`` (elicitation); as a task it waits in
        ``input_required`` until the client answers."""
        if ctx is None:
            raise ToolError("approve needs its context")
        answer = await ctx.elicit(f"Approve {action}?", {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
        content = answer.get("content") if type(answer) is dict else None
        ok = answer.get("action") == "accept" and type(content) is dict and content.get("ok") is True
        return f"{action}: {'approved' if ok else 'not approved'}"


def _content_fixtures(server: MCPServer) -> None:
    """Conformance fixtures: tools returning each kind of content, logging, an error and progress."""

    @server.tool()
    async def test_simple_text() -> ToolResult:
        """Returns simple text content."""
        return ToolResult([text_content("This is a simple text response for testing.")])

    @server.tool()
    async def test_image_content() -> ToolResult:
        """Returns image content."""
        return ToolResult([image_content(RED_PIXEL_PNG, "image/png")])

    @server.tool()
    async def test_audio_content() -> ToolResult:
        """Returns audio content."""
        return ToolResult([audio_content(_tiny_wav(), "audio/wav")])

    @server.tool()
    async def test_embedded_resource() -> ToolResult:
        """Returns an embedded resource."""
        return ToolResult([embedded_resource("test://embedded-resource", "This is an embedded resource content.", mime_type="text/plain")])

    @server.tool()
    async def test_multiple_content_types() -> ToolResult:
        """Returns text, image and resource content."""
        return ToolResult(
            [
                text_content("Multiple content types test:"),
                image_content(RED_PIXEL_PNG, "image/png"),
                embedded_resource("test://mixed-content-resource", '{"test":"data","value":123}', mime_type="application/json"),
            ]
        )

    @server.tool()
    async def test_tool_with_logging(ctx: MCPContext) -> str:
        """Sends three log messages while it runs."""
        await ctx.info("Tool execution started")
        await asyncio.sleep(0.05)
        await ctx.info("Tool processing data")
        await asyncio.sleep(0.05)
        await ctx.info("Tool execution completed")
        return "Tool with logging executed successfully"

    @server.tool()
    async def test_error_handling() -> str:
        """Always returns an error result."""
        raise ToolError("This tool intentionally returns an error for testing")

    @server.tool()
    async def test_tool_with_progress(ctx: MCPContext) -> str:
        """Reports progress 0, 50 and 100 of 100."""
        await ctx.report_progress(0, 100)
        await asyncio.sleep(0.05)
        await ctx.report_progress(50, 100)
        await asyncio.sleep(0.05)
        await ctx.report_progress(100, 100)
        return "Tool with progress executed successfully"


def _client_request_fixtures(server: MCPServer) -> None:
    """Conformance fixtures: tools that ask the client (sampling, elicitation)."""

    @server.tool()
    async def test_sampling(prompt: str, ctx: MCPContext) -> str:
        """Asks the client's LLM to answer ``prompt``."""
        result = await ctx.sample([{"role": "user", "content": {"type": "text", "text": prompt}}], 100)
        content = result.get("content")
        if isinstance(content, list):
            content = content[0] if content else {}
        text = content.get("text", "") if isinstance(content, dict) else ""
        return f"LLM response: {text}"

    @server.tool()
    async def test_elicitation(message: str, ctx: MCPContext) -> str:
        """Asks the user for a username and an email address."""
        result = await ctx.elicit(
            message,
            {
                "type": "object",
                "properties": {
                    "username": {"type": "string", "description": "User's response"},
                    "email": {"type": "string", "description": "User's email address"},
                },
                "required": ["username", "email"],
            },
        )
        return f"User response: action={result.get('action')}, content={result.get('content')}"

    @server.tool()
    async def test_elicitation_sep1034_defaults(ctx: MCPContext) -> str:
        """Elicitation with a default for every primitive type (SEP-1034)."""
        result = await ctx.elicit("Please review and update the form fields with defaults", _defaults_schema())
        return f"Elicitation completed: action={result.get('action')}, content={result.get('content')}"

    @server.tool()
    async def test_elicitation_sep1330_enums(ctx: MCPContext) -> str:
        """Elicitation with all five enum schema variants (SEP-1330)."""
        result = await ctx.elicit("Please select options from the enum fields", _enum_variants_schema())
        return f"Elicitation completed: action={result.get('action')}, content={result.get('content')}"


def _defaults_schema() -> dict[str, Any]:
    """The SEP-1034 elicitation form: a default for every primitive type."""
    return {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {"type": "string", "description": "User status", "enum": ["active", "inactive", "pending"], "default": "active"},
            "verified": {"type": "boolean", "description": "Verification status", "default": True},
        },
        "required": [],
    }


def _enum_variants_schema() -> dict[str, Any]:
    """The SEP-1330 elicitation form: the five enum schema variants."""
    return {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "description": "Untitled single-select", "enum": ["option1", "option2", "option3"]},
            "titledSingle": {
                "type": "string",
                "description": "Titled single-select",
                "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"},
                ],
            },
            "legacyEnum": {
                "type": "string",
                "description": "Legacy titled enum",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {
                "type": "array",
                "description": "Untitled multi-select",
                "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
            },
            "titledMulti": {
                "type": "array",
                "description": "Titled multi-select",
                "items": {
                    "anyOf": [
                        {"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"},
                    ]
                },
            },
        },
        "required": [],
    }


def _schema_fixture(server: MCPServer) -> None:
    """Conformance fixture: a tool whose input schema uses JSON Schema 2020-12 features."""

    @server.tool(
        name="json_schema_2020_12_tool",
        description="Tool with JSON Schema 2020-12 features",
        input_schema={
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}},
            },
            "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
            "additionalProperties": False,
        },
    )
    async def json_schema_tool(name: str | None = None, address: dict[str, Any] | None = None) -> ToolResult:
        return ToolResult([text_content(f"name={name}, address={address}")])


def _resources(server: MCPServer) -> None:
    """Static resources and a template."""

    @server.resource("test://static-text", name="static-text", description="A static text resource", mime_type="text/plain")
    def static_text() -> str:
        return "This is the content of the static text resource."

    @server.resource("test://static-binary", name="static-binary", description="A static binary resource (a PNG)", mime_type="image/png")
    def static_binary() -> bytes:
        return base64.b64decode(RED_PIXEL_PNG)

    @server.resource("test://template/{id}/data", name="template-data", description="Data for an id", mime_type="application/json")
    def template_data(id: str) -> str:
        return f'{{"id":"{id}","templateTest":true,"data":"Data for ID: {id}"}}'


def _watched(server: MCPServer) -> None:
    """Something to watch: a resource whose text a tool sets (resources/updated) and a tool that adds
    or removes another (tools/list_changed)."""

    watched_text = ["Watched resource content"]

    @server.resource("test://watched-resource", name="watched-resource", description="A resource to subscribe to", mime_type="text/plain")
    def watched() -> str:
        return watched_text[0]

    @server.tool()
    async def update_watched(text: str) -> str:
        """Set the text of test://watched-resource; its subscribers get notifications/resources/updated."""
        watched_text[0] = text
        await server.resource_updated("test://watched-resource")
        return "updated"

    @server.tool()
    async def toggle_extra_tool() -> str:
        """Add the tool `extra_tool`, or remove it if present: the tool list changes (notifications/tools/list_changed)."""
        if server.remove_tool("extra_tool"):
            return "removed"

        @server.tool(name="extra_tool")
        async def extra_tool() -> str:
            """A tool that comes and goes (see toggle_extra_tool)."""
            return "extra"

        return "added"


def _prompts(server: MCPServer) -> None:
    """Conformance fixtures: prompts."""

    @server.prompt(description="A simple prompt without arguments")
    def test_simple_prompt() -> str:
        return "This is a simple prompt for testing."

    @server.prompt(description="A prompt with arguments", arguments={"arg1": "First test argument", "arg2": "Second test argument"})
    def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
        return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"

    @server.prompt(description="A prompt with an embedded resource", arguments={"resourceUri": "URI of the resource to embed"})
    def test_prompt_with_embedded_resource(resourceUri: str) -> list[dict[str, Any]]:
        return [
            {"role": "user", "content": embedded_resource(resourceUri, "Embedded resource content for testing.", mime_type="text/plain")},
            {"role": "user", "content": text_content("Please process the embedded resource above.")},
        ]

    @server.prompt(description="A prompt with an image")
    def test_prompt_with_image() -> list[dict[str, Any]]:
        return [
            {"role": "user", "content": image_content(RED_PIXEL_PNG, "image/png")},
            {"role": "user", "content": text_content("Please analyze the image above.")},
        ]


def _completion(server: MCPServer) -> None:
    """Completion of prompt and template arguments."""

    @server.completion()
    def complete(ref: dict[str, Any], argument: dict[str, Any], context: Any) -> list[str]:
        words = ["paris", "park", "party", "test", "testing", "tester"]
        prefix = str(argument.get("value", ""))
        return [w for w in words if w.startswith(prefix)]
