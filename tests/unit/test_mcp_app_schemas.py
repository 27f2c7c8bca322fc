"""Issue 11 part B: rich schemas, pydantic params and returns, ``coerce_json_strings``, output
checks, pagination, icons and titles. Every message our server writes is validated against the
official schema of the negotiated version; pages are walked over the in-memory peer, stdio (our
client and ``sturdyrpc mcp``), a Streamable HTTP session and stateless 2026-07-28 HTTP."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import httpx
import jsonschema
import msgspec
import pytest
from pydantic import BaseModel, ConfigDict, Field
from servers.mcp_app_server import DARK_ICON, ICON, Color, Point, make_server
from support import SERVERS
from support.http import free_port
from support.mcp import VERSIONS, Wire, modern_meta, validate_server_message

from sturdyrpc.dispatch import Dispatcher
from sturdyrpc.mcp import MCPServer
from sturdyrpc.mcp.docstrings import parse_docstring
from sturdyrpc.mcp.pages import Pages

pytestmark = pytest.mark.timeout(120)

SERVER_SCRIPT = str(SERVERS / "mcp_app_server.py")
V = "2025-11-25"
#: What no text sent to a client may contain: pydantic's URLs and names, Python internals.
LEAKS = re.compile(r"pydantic|errors\.pydantic\.dev|Traceback|ValidationError|msgspec|sturdyrpc\.|mcp_app_server|Item|instance of|File \"")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def tool_of(listing: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in listing["result"]["tools"] if t["name"] == name)


async def all_tools(w: Wire, version: str = V) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = None
    for i in range(20):
        r = await w.call("tools/list", {"cursor": cursor} if cursor else {}, id=f"list-{i}")
        out += r["result"]["tools"]
        cursor = r["result"].get("nextCursor")
        if cursor is None:
            return out
    raise AssertionError("pages do not end")


def error_text(result: dict[str, Any]) -> str:
    assert result["isError"] is True
    return str(result["content"][0]["text"])


# ----------------------------------------------------------------------------- docstrings


def test_docstring_google_and_rest() -> None:
    desc, params = parse_docstring(
        "Search things.\n\nArgs:\n    query (str): What to\n        look for.\n    *args: More.\n    limit: How many.\n\nReturns:\n    Hits.\n\nRaises:\n    KeyError: never."
    )
    assert desc == "Search things.\n\nReturns:\n    Hits.\n\nRaises:\n    KeyError: never."
    assert params == {"query": "What to look for.", "args": "More.", "limit": "How many."}
    desc, params = parse_docstring(
        "Order.\n\n:param items: The items\n    to order.\n:type items: list\n:param int limit: At most this many.\n:returns: A receipt."
    )
    assert desc == "Order.\n\n:returns: A receipt."
    assert params == {"items": "The items to order.", "limit": "At most this many."}
    assert parse_docstring(None) == (None, {})
    assert parse_docstring("Plain.\n\nNo sections: here.") == ("Plain.\n\nNo sections: here.", {})


# ----------------------------------------------------------------------------- schemas


def test_input_schemas_carry_descriptions_constraints_and_types() -> None:
    async def main() -> None:
        async with Wire(make_server(page_size=None)) as w:
            await w.initialize(V)
            listing = await w.call("tools/list", {}, id=2)
            assert "nextCursor" not in listing["result"]
            search = tool_of(listing, "search")
            assert search["description"] == "Search the catalogue.\n\nReturns:\n    The names found."
            props = search["inputSchema"]["properties"]
            assert props["query"] == {"description": "What to look for", "type": "string", "minLength": 1}
            assert props["limit"] == {"description": "How many results to return.", "type": "integer", "minimum": 1, "maximum": 50, "default": 10}
            assert props["color"]["description"] == "Only items of this colour." and props["color"]["default"] == "red"
            assert search["inputSchema"]["$defs"]["Color"]["enum"] == ["blue", "red"]
            assert props["mode"] == {"description": "How to match: fast or exact.", "enum": ["fast", "exact"], "default": "fast"}
            assert props["near"]["anyOf"][1] == {"type": "null"} and props["near"]["default"] is None
            assert search["inputSchema"]["required"] == ["query"]
            assert search["outputSchema"]["properties"]["result"] == {"type": "array", "items": {"type": "string"}}

            order = tool_of(listing, "order")
            assert order["description"] == "Order items.\n\n:returns: The receipt."
            oprops = order["inputSchema"]["properties"]
            assert oprops["items"]["description"] == "The items to order." and oprops["items"]["items"] == {"$ref": "#/$defs/Item"}
            item = order["inputSchema"]["$defs"]["Item"]
            assert item["properties"]["name"]["description"] == "What the item is called" and item["properties"]["name"]["minLength"] == 1
            assert item["properties"]["qty"]["minimum"] == 1 and item["required"] == ["name"]
            assert oprops["note"]["description"] == "A note for the shop" and oprops["note"]["default"] == "none"
            assert oprops["tags"]["description"] == "Labels for the order."
            assert order["inputSchema"]["required"] == ["items"]  # a Field with a default is optional
            assert order["outputSchema"]["properties"]["total"]["type"] == "integer"
            assert set(order["outputSchema"]["required"]) == {"total", "names"}
            assert "ctx" not in tool_of(listing, "echo_item")["inputSchema"]["properties"]
            assert tool_of(listing, "text")["inputSchema"]["properties"]["value"] == {"description": "The text to echo", "type": "string"}
            for t in listing["result"]["tools"]:
                jsonschema.Draft202012Validator.check_schema(t["inputSchema"])
                if "outputSchema" in t:
                    jsonschema.Draft202012Validator.check_schema(t["outputSchema"])
                    assert t["outputSchema"]["type"] == "object"
            # the schemas say what validation does: a valid instance passes, an invalid one does not
            validator = jsonschema.Draft202012Validator(order["inputSchema"])
            assert validator.is_valid({"items": [{"name": "a", "qty": 2}]})
            assert not validator.is_valid({"items": [{"name": "", "qty": 2}]})
            w.validate(V)

    run(main())


def test_two_types_of_one_name_get_two_definitions() -> None:
    from servers.mcp_app_server import Item as PydanticItem

    from sturdyrpc.mcp.schema import input_schema

    class Item(msgspec.Struct):  # another "Item"
        label: str

    def f(x, y, z):  # type: ignore[no-untyped-def]
        return None

    s = input_schema(f, hints={"x": list[PydanticItem], "y": Item, "z": PydanticItem | None})
    refs = {s["properties"]["x"]["items"]["$ref"], s["properties"]["y"]["$ref"]}
    assert refs == {"#/$defs/Item", "#/$defs/Item2"}
    by_ref = {r: s["$defs"][r.rsplit("/", 1)[1]] for r in refs}
    assert "label" in by_ref[s["properties"]["y"]["$ref"]]["properties"]
    assert "qty" in by_ref[s["properties"]["x"]["items"]["$ref"]]["properties"]
    assert s["properties"]["z"]["anyOf"][0] == {"$ref": s["properties"]["x"]["items"]["$ref"]}
    jsonschema.Draft202012Validator.check_schema(s)
    v = jsonschema.Draft202012Validator(s)
    assert v.is_valid({"x": [{"name": "a"}], "y": {"label": "l"}, "z": None})
    assert not v.is_valid({"x": [{"label": "a"}], "y": {"label": "l"}, "z": None})


def test_prompt_arguments_described_from_the_docstring() -> None:
    async def main() -> None:
        async with Wire(make_server(page_size=None)) as w:
            await w.initialize(V)
            r = await w.call("prompts/list", {}, id=2)
            p = r["result"]["prompts"][0]
            assert p["description"] == "A prompt."
            assert p["arguments"] == [
                {"name": "topic", "description": "What to write about.", "required": True},
                {"name": "tone", "description": "How it should sound.", "required": False},
            ]
            w.validate(V)

    run(main())


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize("version", ["2025-06-18", V])
def test_constraint_and_pydantic_errors_read_like_ours(version: str) -> None:
    cases = [
        ("search", {"query": ""}, "Invalid params: parameter 'query' must be a string of length >= 1"),
        ("search", {"query": "a", "limit": 51}, "Invalid params: parameter 'limit' must be an integer <= 50"),
        ("search", {"query": 5}, "Invalid params: parameter 'query' must be a string, got an integer"),
        ("order", {"items": [{"name": "", "qty": 0}]}, "Invalid params: parameter 'items' is invalid: [0].name: String should have at least 1 character; [0].qty: Input should be greater than or equal to 1"),
        ("order", {"items": [{"qty": 2}]}, "Invalid params: parameter 'items' is invalid: [0].name: Field required"),
        ("echo_item", {"item": {"name": "a", "qty": "many"}}, "Invalid params: parameter 'item' is invalid: qty: Input should be a valid integer, unable to parse string as an integer"),
        ("order", {"items": [], "note": 5}, "Invalid params: parameter 'note' is invalid: Input should be a valid string"),
        ("echo_item", {"item": "x"}, "Invalid params: parameter 'item' is invalid: Input should be an object"),
        ("order", {"items": {"name": "a"}}, "Invalid params: parameter 'items' is invalid: Input should be an array"),
    ]

    async def main() -> None:
        async with Wire(make_server(page_size=None, coerce_json_strings=False)) as w:
            await w.initialize(version)
            for i, (name, args, text) in enumerate(cases):
                r = await w.call("tools/call", {"name": name, "arguments": args}, id=i)
                if version == V:  # SEP-1303: the model sees what to fix
                    got = error_text(r["result"])
                else:
                    assert r["error"]["code"] == -32602
                    got = r["error"]["message"]
                assert got == text
                assert not LEAKS.search(json.dumps(r)), r
            w.validate(version)

    run(main())


def test_pydantic_values_are_built_before_the_tool_runs_and_field_defaults_apply() -> None:
    async def main() -> None:
        async with Wire(make_server(page_size=None)) as w:
            await w.initialize(V)
            r = await w.call("tools/call", {"name": "order", "arguments": {"items": [{"name": "a", "qty": 2}, {"name": "b"}]}}, id=2)
            assert r["result"]["structuredContent"] == {"total": 3, "names": ["a", "b"]}  # qty's default; note's Field default
            assert json.loads(r["result"]["content"][0]["text"]) == {"total": 3, "names": ["a", "b"]}
            r = await w.call("tools/call", {"name": "echo_item", "arguments": {"item": {"name": "x"}}}, id=3)
            assert r["result"]["structuredContent"] == {"name": "x", "qty": 1}
            w.validate(V)

    run(main())


def _field_tool(need: int = Field(description="Required: a Field without a default"), xs: list[int] = Field(default_factory=list)) -> int:  # noqa: B008
    xs.append(need)
    return len(xs)


def test_field_without_default_is_required_and_factories_run_per_call() -> None:
    from sturdyrpc.errors import InvalidParams
    from sturdyrpc.mcp.schema import input_schema
    from sturdyrpc.params import compile_binder

    s = input_schema(_field_tool)
    assert s["required"] == ["need"] and s["properties"]["need"]["description"] == "Required: a Field without a default"
    assert "default" not in s["properties"]["xs"]
    b = compile_binder(_field_tool)
    with pytest.raises(InvalidParams, match="missing required parameter 'need'"):
        b.bind({})
    _, first = b.bind({"need": 1})
    _, second = b.bind({"need": 2})
    assert first == {"need": 1, "xs": []} and second["xs"] == [] and first["xs"] is not second["xs"]
    args, kwargs = b.bind([3])
    assert args == (3,) and kwargs == {"xs": []}
    assert _field_tool(*args, **kwargs) == 1


def _points(ps: list[Point], by_name: dict[str, Point] | None = None, color: Color | None = None) -> int:
    assert all(isinstance(p, Point) for p in [*ps, *(by_name or {}).values()])  # built, not dicts
    return sum(p.x for p in ps)


def test_msgspec_types_are_built_in_containers_and_errors_name_no_classes() -> None:
    from sturdyrpc.errors import InvalidParams
    from sturdyrpc.params import compile_binder

    b = compile_binder(_points)
    args, kwargs = b.bind({"ps": [{"x": 1, "y": 2}], "by_name": {"a": {"x": 3, "y": 4}}})
    assert _points(*args, **kwargs) == 1
    cases = [
        ({"ps": [{"x": 1, "y": 2}, {"x": 1}]}, "Invalid params: parameter 'ps' item [1] is missing the required field 'y'"),
        ({"ps": [{"x": "1", "y": 2}]}, "Invalid params: parameter 'ps' item [0] must be an integer, got a string (at $.x)"),
        ({"ps": [], "by_name": {"k": 5}}, "Invalid params: parameter 'by_name' member 'k' must be an object, got an integer"),
        ({"ps": [], "color": "green"}, "Invalid params: parameter 'color' must be one of 'red' or 'blue' or null, got a string"),
        ({"ps": "x"}, "Invalid params: parameter 'ps' must be an array, got a string"),
    ]
    for params, text in cases:
        with pytest.raises(InvalidParams) as info:
            b.bind(params)
        assert info.value.message == text
        assert "Point" not in json.dumps(info.value.to_dict()) and "Color" not in json.dumps(info.value.to_dict())


def test_core_dispatcher_checks_annotated_constraints_too() -> None:
    d = Dispatcher()

    @d.method()
    def pick(n: Annotated[int, msgspec.Meta(ge=0)]) -> int:
        return n

    reply = json.loads(d.handle_sync(b'{"jsonrpc":"2.0","id":1,"method":"pick","params":{"n":-1}}') or b"null")
    assert reply["error"] == {
        "code": -32602,
        "message": "Invalid params: parameter 'n' must be an integer >= 0",
        "data": {"param": "n", "expected": "an integer", "got": "an integer"},
    }


# ----------------------------------------------------------------------------- coerce_json_strings


def test_coerce_json_strings_decodes_objects_and_arrays_only_when_asked() -> None:
    calls = [
        ("order", {"items": '[{"name": "a", "qty": 3}]', "tags": '["x"]'}),
        ("echo_item", {"item": '{"name": "b"}'}),
        ("text", {"value": '{"not": "decoded"}'}),
    ]

    async def main() -> None:
        async with Wire(make_server(page_size=None, coerce_json_strings=True)) as w:
            await w.initialize(V)
            r = [await w.call("tools/call", {"name": n, "arguments": a}, id=i) for i, (n, a) in enumerate(calls)]
            assert r[0]["result"]["structuredContent"] == {"total": 3, "names": ["a", "x"]}
            assert r[1]["result"]["structuredContent"] == {"name": "b", "qty": 1}
            assert r[2]["result"]["structuredContent"] == {"result": '{"not": "decoded"}'}  # a str parameter keeps its string
            bad = await w.call("tools/call", {"name": "order", "arguments": {"items": "[1]"}}, id=9)
            assert error_text(bad["result"]).startswith("Invalid params: parameter 'items' is invalid: [0]: Input should be")
            bad = await w.call("tools/call", {"name": "order", "arguments": {"items": "not json"}}, id=10)
            assert error_text(bad["result"]) == "Invalid params: parameter 'items' is invalid: Input should be an array"
            w.validate(V)
        async with Wire(make_server(page_size=None, coerce_json_strings=False)) as w:  # the default: off
            await w.initialize(V)
            r = await w.call("tools/call", {"name": "order", "arguments": {"items": '[{"name": "a"}]'}}, id=2)
            assert error_text(r["result"]) == "Invalid params: parameter 'items' is invalid: Input should be an array"
            r = await w.call("tools/call", {"name": "search", "arguments": {"query": "q", "near": '{"x": 1, "y": 2}'}}, id=3)
            assert error_text(r["result"]).startswith("Invalid params: parameter 'near' must be")
            w.validate(V)
    assert MCPServer("x").coerce_json_strings is False

    run(main())


# ----------------------------------------------------------------------------- output checks


@pytest.mark.parametrize("version", ["2024-11-05", "2025-06-18", V, "2026-07-28"])
def test_a_return_value_its_type_refuses_is_an_incident(version: str, caplog: pytest.LogCaptureFixture) -> None:
    server = make_server(page_size=None)

    async def main() -> None:
        async with Wire(server) as w:
            if version == "2026-07-28":
                meta = modern_meta()
                await w.call("server/discover", {"_meta": meta}, id="d")
            else:
                meta = None
                await w.initialize(version)

            def params(name: str, args: dict[str, Any]) -> dict[str, Any]:
                p: dict[str, Any] = {"name": name, "arguments": args}
                if meta is not None:
                    p["_meta"] = meta
                return p

            with caplog.at_level(logging.ERROR, logger="sturdyrpc.mcp"):
                good = await w.call("tools/call", params("count", {"n": 12}), id=1)
                assert good["result"]["isError"] is False and good["result"]["content"][0]["text"] == "12"
                for i, (name, args) in enumerate([("count", {"n": 13}), ("lying_receipt", {}), ("raw_structured", {"ok": False})]):
                    r = await w.call("tools/call", params(name, args), id=10 + i)
                    text = error_text(r["result"])
                    m = re.fullmatch(r"The tool failed with an internal error \(incident ([0-9a-f]{8})\)\.", text)
                    assert m, text
                    assert any(m.group(1) in rec.getMessage() and "output type" in rec.getMessage() for rec in caplog.records)
                    assert "structuredContent" not in r["result"]
                ok = await w.call("tools/call", params("raw_structured", {"ok": True}), id=20)
                assert ok["result"]["isError"] is False
            w.validate(version)

    run(main())


def test_output_check_on_an_inline_tool() -> None:
    """``count`` is inline: its call is answered on the reader's turn, and checked all the same."""
    server = make_server(page_size=None)

    async def main() -> None:
        async with Wire(server) as w:
            await w.initialize(V)
            good = await w.call("tools/call", {"name": "count", "arguments": {"n": 7}}, id=5)
            assert good["result"]["structuredContent"] == {"result": 7}
            bad = await w.call("tools/call", {"name": "count", "arguments": {"n": 13}}, id=6)
            assert "incident" in error_text(bad["result"])
            validate_server_message(V, good, {(int, 5): "tools/call"})
            validate_server_message(V, bad, {(int, 6): "tools/call"})

    run(main())


# ----------------------------------------------------------------------------- icons and titles


@pytest.mark.parametrize("version", VERSIONS)
def test_icons_and_titles_only_where_the_version_has_them(version: str) -> None:
    async def main() -> None:
        async with Wire(make_server(page_size=None)) as w:
            if version == "2026-07-28":
                meta: dict[str, Any] = {"_meta": modern_meta()}
                await w.call("server/discover", meta, id="d")
            else:
                meta = {}
                await w.initialize(version)
            tools = (await w.call("tools/list", meta, id=1))["result"]["tools"]
            resources = (await w.call("resources/list", meta, id=2))["result"]["resources"]
            templates = (await w.call("resources/templates/list", meta, id=3))["result"]["resourceTemplates"]
            prompts = (await w.call("prompts/list", meta, id=4))["result"]["prompts"]
            search = next(t for t in tools if t["name"] == "search")
            has_title = version >= "2025-06-18"
            has_icons = version >= "2025-11-25"
            assert ("title" in search) is has_title
            for listed in (search, resources[0], templates[0], prompts[0]):
                assert ("title" in listed) is has_title
                assert ("icons" in listed) is has_icons
            if has_icons:
                assert search["icons"] == [ICON, DARK_ICON] and resources[0]["icons"] == [ICON]
            if has_title:
                assert search["title"] == "Search the catalogue" and prompts[0]["title"] == "Prompt 0"
            w.validate(version)

    run(main())


@pytest.mark.parametrize(
    "icons",
    ["https://example.com/a.png", [{"mimeType": "image/png"}], [{"src": "x", "size": "1x1"}], [{"src": "x", "theme": "blue"}], [{"src": "x", "sizes": "48x48"}]],
)
def test_bad_icons_are_refused_at_registration(icons: Any) -> None:
    server = MCPServer("x")
    with pytest.raises((TypeError, ValueError)):

        @server.tool(icons=icons)
        def t() -> None:
            return None

    assert "t" not in server.tools


class Shape(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    side_length: int = Field(alias="sideLength")


def test_sdk_icon_objects_and_pydantic_aliases_go_out_by_their_wire_names() -> None:
    from mcp.types import Icon

    server = MCPServer("alias")

    @server.tool(icons=[Icon(src="https://example.com/i.png", mimeType="image/png")])
    def grow(shape: Shape) -> Shape:
        return Shape(side_length=shape.side_length + 1)

    async def main() -> None:
        async with Wire(server) as w:
            await w.initialize(V)
            t = tool_of(await w.call("tools/list", {}, id=1), "grow")
            assert t["icons"] == [{"src": "https://example.com/i.png", "mimeType": "image/png"}]
            assert t["outputSchema"]["required"] == ["sideLength"]
            r = await w.call("tools/call", {"name": "grow", "arguments": {"shape": {"sideLength": 2}}}, id=2)
            assert r["result"]["structuredContent"] == {"sideLength": 3}
            jsonschema.validate(r["result"]["structuredContent"], t["outputSchema"])
            w.validate(V)

    run(main())


# ----------------------------------------------------------------------------- pagination


def test_pages_walk_every_list_and_refuse_bad_cursors() -> None:
    async def main() -> None:
        server = make_server(page_size=2)
        async with Wire(server) as w:
            await w.initialize(V)
            for method, key, n in [("tools/list", "tools", 7), ("resources/list", "resources", 3), ("resources/templates/list", "resourceTemplates", 3), ("prompts/list", "prompts", 3)]:
                seen: list[str] = []
                cursor = None
                for i in range(10):
                    r = await w.call(method, {"cursor": cursor} if cursor else {}, id=f"{method}-{i}")
                    page = r["result"][key]
                    assert 1 <= len(page) <= 2
                    seen += [x.get("name") or x.get("uri") for x in page]
                    cursor = r["result"].get("nextCursor")
                    if cursor is None:
                        break
                    assert isinstance(cursor, str)
                assert len(seen) == n == len(set(seen)), (method, seen)
            first = (await w.call("tools/list", {}, id="t1"))["result"]["nextCursor"]
            for i, bad in enumerate(["bogus", "", 5, first + "x", first.upper(), Pages.cursor("prompts", 1), "cDE6dG9vbHM6LTE", "cDE6dG9vbHM6MDE"]):
                r = await w.call("tools/list", {"cursor": bad}, id=f"bad-{i}")
                assert r["error"]["code"] == -32602 and r["error"]["message"] == "Invalid params: invalid cursor", bad
            for i, method in enumerate(["resources/list", "resources/templates/list", "prompts/list"]):
                r = await w.call(method, {"cursor": first}, id=f"other-{i}")  # a tools cursor names another list
                assert r["error"]["code"] == -32602
            w.validate(V)

    run(main())


def test_pages_and_validation_inside_a_2025_03_26_batch() -> None:
    async def main() -> None:
        async with Wire(make_server(page_size=2)) as w:
            await w.initialize("2025-03-26")
            first = (await w.call("prompts/list", {}, id=1))["result"]
            batch = [
                {"jsonrpc": "2.0", "id": 2, "method": "prompts/list", "params": {"cursor": first["nextCursor"]}},
                {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"cursor": first["nextCursor"]}},
                {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "search", "arguments": {"query": ""}}},
                {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "order", "arguments": {"items": [{"name": "b"}]}}},
            ]
            await w.send(batch)
            w.sent.extend(batch)
            reply = {m["id"]: m for m in await w.recv()}
            assert [p["name"] for p in reply[2]["result"]["prompts"]] == ["prompt_2"] and "nextCursor" not in reply[2]["result"]
            assert reply[3]["error"]["code"] == -32602  # a prompts cursor is no tools cursor
            assert reply[4]["error"] == {"code": -32602, "message": "Invalid params: parameter 'query' must be a string of length >= 1",
                                         "data": {"param": "query", "expected": "a string", "got": "a string"}}  # fmt: skip
            assert reply[5]["result"]["content"][0]["text"] == '{"total":1,"names":["b"]}'
            assert "structuredContent" not in reply[5]["result"]  # 2025-03-26 has none
            w.validate("2025-03-26")

    run(main())


def test_cursor_stays_good_while_the_list_changes() -> None:
    async def main() -> None:
        server = make_server(page_size=2)
        async with Wire(server) as w:
            await w.initialize(V)
            r = await w.call("tools/list", {}, id=1)
            names = [t["name"] for t in r["result"]["tools"]]
            cursor = r["result"]["nextCursor"]
            assert names == ["search", "order"]
            server.remove_tool("order")  # the page's last tool goes away
            server.remove_tool("count")  # and one the walk has not reached yet

            @server.tool()
            def added() -> str:
                return "new"

            while cursor is not None:
                r = await w.call("tools/list", {"cursor": cursor}, id=f"p-{cursor}")
                names += [t["name"] for t in r["result"]["tools"]]
                cursor = r["result"].get("nextCursor")
            assert names == ["search", "order", "echo_item", "lying_receipt", "raw_structured", "text", "added"]
            w.validate(V)

    run(main())


def test_stdio_client_and_cli_follow_the_pages() -> None:
    from sturdyrpc.mcp.client import connect

    async def main() -> None:
        async with connect([sys.executable, SERVER_SCRIPT, "2"], timeout=20) as client:
            tools = await client.list_tools()
            assert [t["name"] for t in tools] == ["search", "order", "echo_item", "count", "lying_receipt", "raw_structured", "text"]
            assert len(await client.list_resources()) == 3
            assert len(await client.list_resource_templates()) == 3
            assert [p["name"] for p in await client.list_prompts()] == ["prompt_0", "prompt_1", "prompt_2"]
            r = await client.call_tool("order", {"items": [{"name": "z"}]})
            assert r["structuredContent"] == {"total": 1, "names": ["z"]}
            r = await client.call_tool("search", {"query": ""})
            assert r["isError"] and r["content"][0]["text"] == "Invalid params: parameter 'query' must be a string of length >= 1"

    run(main())
    env_cmd = [sys.executable, "-m", "sturdyrpc", "mcp"]
    out = subprocess.run([*env_cmd, "tools", "--", sys.executable, SERVER_SCRIPT, "1"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert re.findall(r"^(\w+)\(", out.stdout, re.M) == ["search", "order", "echo_item", "count", "lying_receipt", "raw_structured", "text"]
    assert "    Search the catalogue." in out.stdout
    out = subprocess.run([*env_cmd, "prompts", "--", sys.executable, SERVER_SCRIPT, "1"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[::2] == ["prompt_0(topic, tone?)", "prompt_1(topic, tone?)", "prompt_2(topic, tone?)"]
    out = subprocess.run([*env_cmd, "resources", "--", sys.executable, SERVER_SCRIPT, "1"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert [line.split()[0] for line in out.stdout.splitlines() if not line.startswith(" ")] == [
        "test://static/0", "test://static/1", "test://static/2", "test://tpl0/{id}", "test://tpl1/{id}", "test://tpl2/{id}"]  # fmt: skip


def test_stdio_wire_validates_against_the_schema(tmp_path: Path) -> None:
    """The raw stdio wire of a paged walk, pydantic calls and errors, checked message by message."""
    from support.mcp import recorded_cmd, validate_recording

    from sturdyrpc.mcp.client import connect

    log = tmp_path / "wire"

    async def main() -> None:
        async with connect(recorded_cmd(log, [sys.executable, SERVER_SCRIPT, "2"]), V, timeout=20) as client:
            assert len(await client.list_tools()) == 7
            await client.list_resources()
            await client.list_resource_templates()
            await client.list_prompts()
            await client.call_tool("order", {"items": '[{"name": "z"}]'})
            await client.call_tool("order", {"items": [{"name": ""}]})
            await client.call_tool("count", {"n": 13})
            await client.call_tool("echo_item", {"item": {"name": "e"}})

    run(main())
    assert validate_recording(log, V) >= 14


def _uvicorn_app(server: MCPServer) -> Any:
    import uvicorn

    from sturdyrpc.mcp_http import mcp_http_app

    port = free_port()
    http = uvicorn.Server(uvicorn.Config(mcp_http_app(server), host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    return http, f"http://127.0.0.1:{port}/mcp"


def test_http_session_and_stateless_pages_and_validation() -> None:
    from sturdyrpc.mcp_http.connect import connect_http

    server = make_server(page_size=2)
    http, url = _uvicorn_app(server)

    async def main() -> None:
        task = asyncio.create_task(http.serve())
        try:
            while not http.started:
                await asyncio.sleep(0.02)
            # a handshake-era session, with our HTTP client following the cursors
            async with connect_http(url, V, timeout=10) as client:
                assert len(await client.list_tools()) == 7
                assert [p["name"] for p in await client.list_prompts()] == ["prompt_0", "prompt_1", "prompt_2"]
                r = await client.call_tool("order", {"items": [{"name": ""}]})
                assert error_text(r).startswith("Invalid params: parameter 'items' is invalid: [0].name:")
                r = await client.call_tool("order", {"items": '[{"name": "h"}]'})
                assert r["structuredContent"] == {"total": 1, "names": ["h"]}
            # stateless 2026-07-28: raw POSTs, each reply validated
            headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28"}
            async with httpx.AsyncClient(timeout=10) as c:

                async def post(id_: int, method: str, params: dict[str, Any], name: str | None = None) -> Any:
                    h = {**headers, "mcp-method": method}
                    if name is not None:
                        h["mcp-name"] = name
                    resp = await c.post(url, json={"jsonrpc": "2.0", "id": id_, "method": method, "params": {**params, "_meta": modern_meta()}}, headers=h)
                    body = resp.json()
                    validate_server_message("2026-07-28", body, {(int, id_): method})
                    return resp.status_code, body

                names: list[str] = []
                cursor = None
                for i in range(10):
                    status, body = await post(i, "resources/templates/list", {"cursor": cursor} if cursor else {})
                    assert status == 200
                    names += [t["name"] for t in body["result"]["resourceTemplates"]]
                    assert body["result"]["resourceTemplates"][0]["icons"] == [ICON]
                    cursor = body["result"].get("nextCursor")
                    if cursor is None:
                        break
                assert names == ["tpl-0", "tpl-1", "tpl-2"]
                status, body = await post(20, "tools/list", {"cursor": "nope"})
                assert status == 400 and body["error"]["code"] == -32602
                status, body = await post(21, "tools/call", {"name": "search", "arguments": {"query": "", "limit": 0}}, "search")
                assert status == 200 and error_text(body["result"]) == "Invalid params: parameter 'query' must be a string of length >= 1"
                status, body = await post(22, "tools/call", {"name": "count", "arguments": {"n": 13}}, "count")
                assert "incident" in error_text(body["result"])
        finally:
            http.should_exit = True
            await asyncio.wait_for(task, 10)

    run(main())


def test_client_refuses_a_cursor_that_does_not_move() -> None:
    from sturdyrpc.mcp.client import MCPClient, PaginationError
    from sturdyrpc.mcp.profile import MCPProfile
    from sturdyrpc.peer import Peer
    from sturdyrpc.transports.memory import memory_pair

    server = MCPServer("loop")

    @server.tool()
    def only() -> str:
        return "x"

    stuck = Pages.cursor("tools", 0)

    class Stuck(Pages):
        def page(self, kind: str, records: Any, params: dict[str, Any]) -> Any:
            return list(records), stuck  # a broken server: always "more"

    server.pages = Stuck(1)

    async def main() -> None:
        a, b = memory_pair()
        peer = server.create_peer(b)
        profile = MCPProfile(role="client")
        client = MCPClient(None, profile, client_info={"name": "t", "version": "1"})
        cpeer = Peer(a, client.dispatcher(), profile=profile, default_timeout=5)
        client.peer = cpeer
        async with peer, cpeer:
            await client.negotiate(V)
            with pytest.raises(PaginationError):
                await client.list_tools()

    run(main())


# ----------------------------------------------------------------------------- without pydantic


def test_core_works_without_pydantic_and_does_not_import_it() -> None:
    code = r"""
import sys
sys.modules["pydantic"] = None  # as if not installed: importing it fails
import asyncio, json
from typing import Annotated
import msgspec
from sturdyrpc.mcp import MCPServer
from sturdyrpc.params import compile_binder
server = MCPServer("np", page_size=1, coerce_json_strings=True)

@server.tool(icons=[{"src": "https://e.com/i.png"}])
def f(q: Annotated[str, msgspec.Meta(min_length=2, description="Q")], xs: list[int] | None = None) -> int:
    '''Do f.

    Args:
        xs: Numbers.
    '''
    return len(q) + len(xs or [])

t = server.tools["f"]
assert t.input_schema["properties"]["q"]["description"] == "Q"
assert t.input_schema["properties"]["xs"]["description"] == "Numbers."
assert t.bind({"q": "ab", "xs": "[1, 2]"})[1] == {"q": "ab", "xs": [1, 2]}
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    code = "import sys; from sturdyrpc.demos.mcp import make_mcp_demo; make_mcp_demo(); print('pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_page_size_must_be_positive() -> None:
    for bad in (0, -1, 1.5, "2"):
        with pytest.raises(ValueError):
            MCPServer("x", page_size=bad)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
