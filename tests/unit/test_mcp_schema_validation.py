"""Every message our MCP server writes validates against the official JSON Schema of the
negotiated version; the official 2026-07-28 example messages parse, validate and round-trip."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from pydantic import BaseModel
from support.mcp import SCHEMAS, VERSIONS, Wire, has_def, modern_meta, validate_def, validate_server_message

from sturdyrpc import codec
from sturdyrpc.demos.mcp import make_mcp_demo
from sturdyrpc.messages import classify, to_wire

pytestmark = pytest.mark.timeout(60)

EXAMPLES = sorted((SCHEMAS / "2026-07-28" / "examples").glob("*/*.json"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_official_example(path: Path) -> None:
    raw = path.read_bytes()
    value = codec.decode(raw)
    assert value == json.loads(raw)
    validate_def("2026-07-28", path.parent.name, value)
    # round trip through our codec: same value, and our encoding validates too
    again = codec.decode(codec.encode(value))
    assert again == value
    validate_def("2026-07-28", path.parent.name, again)
    if isinstance(value, dict) and value.get("jsonrpc") == "2.0":
        msg = classify(value)
        wire = to_wire(msg)
        if "error" in value and "id" not in value:
            return
        assert msgspec.json.decode(codec.encode(wire)) == value


def test_examples_were_found() -> None:
    assert len(EXAMPLES) > 50


# ----------------------------------------------------------------------------- our server's messages

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("tools/list", {}),
    ("tools/call", {"name": "echo", "arguments": {"text": "hi"}}),
    ("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}),
    ("tools/call", {"name": "fail", "arguments": {}}),
    ("tools/call", {"name": "slow", "arguments": {"seconds": 0.01, "steps": 2}, "_meta": {"progressToken": "p1"}}),
    ("tools/call", {"name": "nope", "arguments": {}}),
    ("tools/call", {"name": "add", "arguments": {"a": "x", "b": 2}}),
    ("tools/call", {"name": "test_simple_text"}),
    ("tools/call", {"name": "test_image_content"}),
    ("tools/call", {"name": "test_embedded_resource"}),
    ("tools/call", {"name": "test_multiple_content_types"}),
    ("tools/call", {"name": "test_error_handling"}),
    ("tools/call", {"name": "test_tool_with_progress", "_meta": {"progressToken": 7}}),
    ("tools/call", {"name": "test_tool_with_logging"}),
    ("resources/list", {}),
    ("resources/templates/list", {}),
    ("resources/read", {"uri": "test://static-text"}),
    ("resources/read", {"uri": "test://static-binary"}),
    ("resources/read", {"uri": "test://template/1/data"}),
    ("resources/read", {"uri": "test://missing"}),
    ("prompts/list", {}),
    ("prompts/get", {"name": "test_simple_prompt"}),
    ("prompts/get", {"name": "test_prompt_with_arguments", "arguments": {"arg1": "a", "arg2": "b"}}),
    ("prompts/get", {"name": "test_prompt_with_embedded_resource", "arguments": {"resourceUri": "test://example-resource"}}),
    ("prompts/get", {"name": "test_prompt_with_image"}),
    ("completion/complete", {"ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"}, "argument": {"name": "arg1", "value": "p"}}),
    ("nonexistent/method", {}),
]


@pytest.mark.parametrize("version", VERSIONS[:4])
def test_handshake_session_messages_validate(version: str) -> None:
    async def main() -> None:
        async with Wire(make_mcp_demo()) as w:
            await w.send({"jsonrpc": "2.0", "id": "early", "method": "tools/list"})  # before initialize: refused
            await w.recv()
            await w.call("ping", id="p0")
            await w.initialize(version)
            await w.call("logging/setLevel", {"level": "debug"}, id="lv")
            for i, (method, params) in enumerate(CALLS):
                if version == "2024-11-05" and params.get("name") in ("test_multiple_content_types",):
                    continue
                await w.call(method, params, id=i + 10)
            await w.call("ping", id="p1")
            await w.call("resources/subscribe", {"uri": "test://watched-resource"}, id="s")
            if version == "2025-03-26":
                await w.send([{"jsonrpc": "2.0", "id": 900, "method": "ping"}, {"jsonrpc": "2.0", "id": 901, "method": "tools/list"}])
                assert isinstance(await w.recv(), list)
            else:
                await w.send([{"jsonrpc": "2.0", "id": 900, "method": "ping"}])
                assert (await w.recv())["error"]["code"] == -32600
            if version == "2025-11-25":  # unreadable ids can be answered validly from 2025-11-25 on
                await w.send(b"{not json")
                await w.send({"jsonrpc": "2.0", "id": None, "method": "ping"})
                await w.recv()
                await w.recv()
            await asyncio.sleep(0.05)
            methods = {(type(m["id"]), m["id"]): m["method"] for m in w.sent if isinstance(m, dict) and "id" in m and "method" in m}
            for m in w.received:
                if version != "2025-11-25" and isinstance(m, dict) and "error" in m and m.get("id") is None:
                    continue  # id null: JSON-RPC's rule; the older MCP schemas cannot express it (see docs/MCP.md)
                validate_server_message(version, m, methods)
            assert len(w.received) >= len(CALLS)

    asyncio.run(main())


def test_modern_session_messages_validate() -> None:
    async def main() -> None:
        async with Wire(make_mcp_demo()) as w:
            await w.call("server/discover", {"_meta": modern_meta()}, id="d")
            for i, (method, params) in enumerate(CALLS):
                meta = {**modern_meta(**{"io.modelcontextprotocol/logLevel": "debug"}), **params.get("_meta", {})}
                await w.call(method, {**params, "_meta": meta}, id=i + 10)
            await w.call("tools/call", {"name": "test_sampling", "arguments": {"prompt": "x"}, "_meta": modern_meta(caps={"sampling": {}})}, id="s")
            await w.call("tools/list", {}, id="nometa")
            await w.call("tools/list", {"_meta": modern_meta("2099-01-01")}, id="badv")
            await w.call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}, id="late-init")
            await w.send(b"{not json")
            await w.recv()
            w.validate("2026-07-28")
            results = [m["result"] for m in w.received if "result" in m]
            assert all("resultType" in r for r in results)
            assert any(r["resultType"] == "input_required" for r in results)

    asyncio.run(main())


def test_stateless_messages_validate() -> None:
    server = make_mcp_demo()

    async def main() -> None:
        sent: list[Any] = []
        got: list[Any] = []

        async def related(b: bytes) -> None:
            got.append(msgspec.json.decode(b))

        for i, (method, params) in enumerate(CALLS):
            meta = {**modern_meta(**{"io.modelcontextprotocol/logLevel": "info"}), **params.get("_meta", {})}
            msg = {"jsonrpc": "2.0", "id": i, "method": method, "params": {**params, "_meta": meta}}
            sent.append(msg)
            out = await server.handle_stateless(msgspec.json.encode(msg), related)
            assert out is not None
            got.append(msgspec.json.decode(out))
        methods = {(type(m["id"]), m["id"]): m["method"] for m in sent}
        for m in got:
            validate_server_message("2026-07-28", m, methods)

    asyncio.run(main())


def test_schema_helpers_know_the_versions() -> None:
    for v in VERSIONS:
        assert has_def(v, "CallToolResult")


class Address(BaseModel):
    street: str
    city: str


class Person(BaseModel):
    name: str
    home: Address
    work: Address | None = None


class Node(BaseModel):
    value: int
    children: list[Node] = []


def test_inline_refs_writes_out_nested_models_and_keeps_recursive_ones() -> None:
    """``MCPServer(inline_refs=True)``: pydantic's nested models come without ``$ref`` (a
    recursive model keeps its own), and the schemas still accept and refuse what they did."""
    import jsonschema

    from sturdyrpc.mcp import MCPServer

    def register(server: MCPServer) -> None:
        @server.tool
        def hire(person: Person) -> Person:
            return person

        @server.tool
        def tree(root: Node) -> int:
            return root.value

    plain, inlined = MCPServer("p"), MCPServer("i", inline_refs=True)
    register(plain)
    register(inlined)
    assert "$defs" in json.dumps(plain.tools["hire"].input_schema)
    hire = inlined.tools["hire"]
    assert "$ref" not in json.dumps(hire.input_schema) and "$ref" not in json.dumps(hire.output_schema)
    assert hire.input_schema["properties"]["person"]["properties"]["home"]["properties"]["city"] == {"title": "City", "type": "string"}
    tree = inlined.tools["tree"].input_schema
    assert set(tree["$defs"]) == {"Node"} and tree["properties"]["root"]["$ref"] == "#/$defs/Node"
    good = {"person": {"name": "a", "home": {"street": "s", "city": "c"}}}
    bad = {"person": {"name": "a", "home": {"street": "s"}}}
    for schema in (plain.tools["hire"].input_schema, hire.input_schema):
        jsonschema.validate(good, schema)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    jsonschema.validate({"root": {"value": 1, "children": [{"value": 2}]}}, tree)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"root": {"value": 1, "children": [{"value": "x"}]}}, tree)
