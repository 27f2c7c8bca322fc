"""MCPServer in-process: tools, resources, prompts, logging, progress, cancellation, stateless mode."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import msgspec
import pytest
from support.mcp import Wire, modern_meta

from sturdyrpc.demos.mcp import make_mcp_demo
from sturdyrpc.mcp import MCPContext, MCPServer, ToolError, ToolResult

pytestmark = pytest.mark.timeout(30)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_tools_list_and_schemas() -> None:
    async def main() -> None:
        async with Wire(make_mcp_demo()) as w:
            await w.initialize("2025-11-25")
            r = await w.call("tools/list", id=2)
            tools = {t["name"]: t for t in r["result"]["tools"]}
            add = tools["add"]
            assert add["description"] == "Add two integers."
            assert add["inputSchema"]["properties"] == {"a": {"type": "integer"}, "b": {"type": "integer"}}
            assert add["inputSchema"]["required"] == ["a", "b"] and add["inputSchema"]["additionalProperties"] is False
            assert add["outputSchema"] == {"type": "object", "properties": {"result": {"type": "integer"}}, "required": ["result"]}
            assert "ctx" not in tools["slow"]["inputSchema"]["properties"]
            j = tools["json_schema_2020_12_tool"]["inputSchema"]
            assert j["$schema"].endswith("2020-12/schema") and "$defs" in j and j["additionalProperties"] is False
            w.validate("2025-11-25")

    run(main())


def test_tool_calls_and_errors(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with Wire(make_mcp_demo()) as w:
            await w.initialize("2025-11-25")
            r = await w.call("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, id=2)
            assert r["result"] == {"content": [{"type": "text", "text": "3"}], "structuredContent": {"result": 3}, "isError": False}
            r = await w.call("tools/call", {"name": "echo", "arguments": {"text": "x"}}, id=3)
            assert r["result"]["content"][0]["text"] == "x"
            with caplog.at_level(logging.ERROR, logger="sturdyrpc.mcp"):
                r = await w.call("tools/call", {"name": "fail", "arguments": {}}, id=4)
            res = r["result"]
            assert res["isError"] is True
            text = json.dumps(res)
            for secret in ("SECRET-TOKEN-42", "/etc/shadow", "RuntimeError", "Traceback", ".py"):
                assert secret not in text
            incident = res["content"][0]["text"].split("incident ")[1].rstrip(").")
            assert any(incident in rec.getMessage() and rec.exc_info for rec in caplog.records)
            r = await w.call("tools/call", {"name": "test_error_handling"}, id=5)
            assert r["result"]["isError"] and r["result"]["content"][0]["text"] == "This tool intentionally returns an error for testing"
            r = await w.call("tools/call", {"name": "nope", "arguments": {}}, id=6)
            assert r["error"]["code"] == -32602
            # SEP-1303: bad arguments are a tool error with the reason, and the tool does not run
            r = await w.call("tools/call", {"name": "add", "arguments": {"a": 1}}, id=7)
            assert r["result"]["isError"] and "'b'" in r["result"]["content"][0]["text"]
            r = await w.call("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2, "c": 3}}, id=8)
            assert r["result"]["isError"]
            r = await w.call("tools/call", {"name": "add", "arguments": [1, 2]}, id=9)
            assert r["error"]["code"] == -32602
            w.validate("2025-11-25")

    run(main())


@pytest.mark.parametrize("version", ["2024-11-05", "2025-03-26", "2025-06-18"])
def test_older_versions(version: str) -> None:
    async def main() -> None:
        async with Wire(make_mcp_demo()) as w:
            r = await w.initialize(version)
            assert r["result"]["protocolVersion"] == version
            r = await w.call("tools/call", {"name": "add", "arguments": {"a": "x", "b": 2}}, id=2)
            assert r["error"]["code"] == -32602  # before 2025-11-25: a protocol error
            r = await w.call("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, id=3)
            assert ("structuredContent" in r["result"]) == (version == "2025-06-18")
            r = await w.call("tools/list", id=4)
            assert all(("outputSchema" in t) <= (version == "2025-06-18") for t in r["result"]["tools"])
            r = await w.call("resources/read", {"uri": "test://missing"}, id=5)
            assert r["error"]["code"] == -32002
            w.validate(version)

    run(main())


def test_progress_only_when_asked_and_increasing() -> None:
    async def main() -> None:
        async with Wire(make_mcp_demo()) as w:
            await w.initialize()
            await w.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "slow", "arguments": {"seconds": 0.05, "steps": 3}}})
            r = await w.recv()
            assert r["id"] == 2 and "result" in r  # no token: no progress
            await w.send(
                {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "slow", "arguments": {"seconds": 0.05, "steps": 3}, "_meta": {"progressToken": "tok"}}}
            )
            got = [await w.recv() for _ in range(4)]
            progress = [m["params"] for m in got[:3]]
            assert [p["progress"] for p in progress] == [1, 2, 3] and all(p["progressToken"] == "tok" for p in progress)
            assert got[3]["id"] == 3
            await w.nothing(0.1)
            w.validate("2025-11-25")

    run(main())


def test_cancellation_no_reply_and_initialize_not_cancellable() -> None:
    async def main() -> None:
        async with Wire(make_mcp_demo()) as w:
            await w.send({"jsonrpc": "2.0", "id": "i", "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}})
            await w.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "i"}})
            r = await w.recv()
            assert r["id"] == "i" and "result" in r
            await w.send({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "slow", "arguments": {"seconds": 10}}})
            await asyncio.sleep(0.1)
            await w.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5, "reason": "user"}})
            await w.nothing(0.3)
            r = await w.call("ping", id=6)
            assert r["result"] == {}
            await w.nothing(0.2)

    run(main())


def test_logging_set_level_and_messages() -> None:
    async def main() -> None:
        async with Wire(make_mcp_demo()) as w:
            await w.initialize()
            r = await w.call("logging/setLevel", {"level": "verbose"}, id=2)
            assert r["error"]["code"] == -32602
            await w.send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "test_tool_with_logging"}})
            r = await w.recv()
            assert r["id"] == 3  # no level set: no log messages
            assert (await w.call("logging/setLevel", {"level": "info"}, id=4))["result"] == {}
            await w.send({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "test_tool_with_logging"}})
            msgs = [await w.recv() for _ in range(4)]
            assert [m["params"]["data"] for m in msgs[:3]] == ["Tool execution started", "Tool processing data", "Tool execution completed"]
            assert all(m["method"] == "notifications/message" and m["params"]["level"] == "info" for m in msgs[:3])
            assert (await w.call("logging/setLevel", {"level": "error"}, id=6))["result"] == {}
            await w.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "test_tool_with_logging"}})
            assert (await w.recv())["id"] == 7
            w.validate("2025-11-25")

    run(main())


def test_resources_prompts_completion_subscriptions() -> None:
    async def main() -> None:
        server = make_mcp_demo()
        async with Wire(server) as w:
            await w.initialize()
            r = await w.call("resources/list", id=2)
            res = {x["uri"]: x for x in r["result"]["resources"]}
            assert all(x["description"] for x in res.values()) and "test://static-text" in res
            r = await w.call("resources/templates/list", id=3)
            assert r["result"]["resourceTemplates"][0]["uriTemplate"] == "test://template/{id}/data"
            r = await w.call("resources/read", {"uri": "test://static-binary"}, id=4)
            assert r["result"]["contents"][0]["mimeType"] == "image/png" and "blob" in r["result"]["contents"][0]
            r = await w.call("resources/read", {"uri": "test://template/7/data"}, id=5)
            assert json.loads(r["result"]["contents"][0]["text"])["id"] == "7"
            r = await w.call("prompts/get", {"name": "test_prompt_with_arguments", "arguments": {"arg1": "a"}}, id=6)
            assert r["error"]["code"] == -32602
            r = await w.call("prompts/get", {"name": "nope"}, id=7)
            assert r["error"]["code"] == -32602
            r = await w.call("prompts/get", {"name": "test_prompt_with_image"}, id=8)
            assert r["result"]["messages"][0]["content"]["type"] == "image"
            r = await w.call("prompts/list", id=9)
            assert {p["name"] for p in r["result"]["prompts"]} >= {"test_simple_prompt", "test_prompt_with_arguments"}
            r = await w.call("completion/complete", {"ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"}, "argument": {"name": "arg1", "value": "par"}}, id=10)
            assert r["result"]["completion"]["values"] == ["paris", "park", "party"]
            r = await w.call("tools/list", {"cursor": "bogus"}, id=11)
            assert r["error"]["code"] == -32602
            assert (await w.call("resources/subscribe", {"uri": "test://watched-resource"}, id=12))["result"] == {}
            await server.resource_updated("test://watched-resource")
            m = await w.recv()
            assert m == {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "test://watched-resource"}}
            assert (await w.call("resources/unsubscribe", {"uri": "test://watched-resource"}, id=13))["result"] == {}
            await server.resource_updated("test://watched-resource")

            @server.tool()
            async def late(x: int) -> int:
                return x

            m = await w.recv()
            assert m["method"] == "notifications/tools/list_changed"
            w.validate("2025-11-25")

    run(main())


def test_server_to_client_requests_over_the_peer() -> None:
    async def main() -> None:
        async with Wire(make_mcp_demo()) as w:
            await w.initialize("2025-11-25", {"sampling": {}})
            await w.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "test_sampling", "arguments": {"prompt": "hi"}}})
            req = await w.recv()
            assert req["method"] == "sampling/createMessage" and req["params"]["maxTokens"] == 100
            await w.send({"jsonrpc": "2.0", "id": req["id"], "result": {"role": "assistant", "content": {"type": "text", "text": "yo"}, "model": "m"}})
            r = await w.recv()
            assert r["result"]["content"][0]["text"] == "LLM response: yo"
            # elicitation was not declared: an error result, nothing asked
            r = await w.call("tools/call", {"name": "test_elicitation", "arguments": {"message": "m"}}, id=3)
            assert r["result"]["isError"]
            w.validate("2025-11-25")

    run(main())


def test_user_tool_features() -> None:
    server = MCPServer("t", "1")

    @server.tool()
    def blocking_sum(xs: list[int]) -> int:
        return sum(xs)

    @server.tool()
    async def oops(ctx: MCPContext) -> str:
        raise ToolError("shown as is")

    @server.tool()
    async def bad_progress(ctx: MCPContext) -> str:
        await ctx.report_progress(2)
        try:
            await ctx.report_progress(1)
        except ValueError:
            return "refused"
        return "sent"

    async def main() -> None:
        async with Wire(server) as w:
            await w.initialize()
            r = await w.call("tools/call", {"name": "blocking_sum", "arguments": {"xs": [1, 2, 3]}}, id=2)
            assert r["result"]["structuredContent"] == {"result": 6}
            r = await w.call("tools/call", {"name": "blocking_sum", "arguments": {"xs": [1, "2"]}}, id=3)
            assert r["result"]["isError"]
            r = await w.call("tools/call", {"name": "oops"}, id=4)
            assert r["result"]["content"][0]["text"] == "shown as is"
            r = await w.call("tools/call", {"name": "bad_progress", "_meta": {"progressToken": 1}}, id=5)
            assert r["result"]["content"][0]["text"] == "refused"

    run(main())


# ----------------------------------------------------------------------------- stateless 2026-07-28


def test_stateless_entry() -> None:
    server = make_mcp_demo()

    async def main() -> None:
        related: list[Any] = []

        async def send_related(b: bytes) -> None:
            related.append(msgspec.json.decode(b))

        async def call(msg: Any) -> Any:
            out = await server.handle_stateless(msgspec.json.encode(msg), send_related)
            return msgspec.json.decode(out) if out is not None else None

        r = await call({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": modern_meta()}})
        assert r["result"]["supportedVersions"][0] == "2026-07-28" and r["result"]["resultType"] == "complete"
        assert r["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "sturdyrpc-demo"
        r = await call({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "slow", "arguments": {"seconds": 0.03, "steps": 2}, "_meta": modern_meta(progressToken="p")}})
        assert r["result"]["resultType"] == "complete"
        assert [m["params"]["progress"] for m in related] == [1, 2]
        related.clear()
        r = await call({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "test_tool_with_logging", "_meta": modern_meta()}})
        assert related == []  # no logLevel in _meta: no notifications/message
        r = await call({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "test_tool_with_logging", "_meta": modern_meta(**{"io.modelcontextprotocol/logLevel": "info"})}})
        assert len(related) == 3
        r = await call({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {}})
        assert r["error"]["code"] == -32602
        r = await call({"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": {"_meta": modern_meta("2099-01-01")}})
        assert r["error"]["code"] == -32022 and r["error"]["data"]["requested"] == "2099-01-01"
        r = await call({"jsonrpc": "2.0", "id": 7, "method": "resources/read", "params": {"uri": "test://x", "_meta": modern_meta()}})
        assert r["error"]["code"] == -32602  # not -32002 in 2026-07-28
        r = await call({"jsonrpc": "2.0", "id": 8, "method": "ping", "params": {"_meta": modern_meta()}})
        assert r["error"]["code"] == -32601
        assert await call({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}) is None
        out = await server.handle_stateless(b"[1]", send_related)
        assert out is not None and msgspec.json.decode(out)["error"]["code"] == -32600 and b'"id"' not in out
        out = await server.handle_stateless(b"{", send_related)
        assert out is not None and msgspec.json.decode(out)["error"]["code"] == -32700 and b'"id"' not in out
        # cancelling the task: nothing returned, nothing more sent
        related.clear()
        t = asyncio.ensure_future(call({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "slow", "arguments": {"seconds": 5, "steps": 50}, "_meta": modern_meta(progressToken=1)}}))
        await asyncio.sleep(0.25)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        n = len(related)
        await asyncio.sleep(0.2)
        assert len(related) == n

    run(main())


def test_stateless_multi_round_trip() -> None:
    server = make_mcp_demo()

    async def main() -> None:
        async def send_related(b: bytes) -> None:
            pass

        async def call(msg: Any) -> Any:
            out = await server.handle_stateless(msgspec.json.encode(msg), send_related)
            return msgspec.json.decode(out)

        caps = {"elicitation": {}}
        params = {"name": "test_elicitation", "arguments": {"message": "who?"}}
        r = await call({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {**params, "_meta": modern_meta(caps=caps)}})
        res = r["result"]
        assert res["resultType"] == "input_required"
        (key, ask), = res["inputRequests"].items()
        assert ask["method"] == "elicitation/create" and ask["params"]["message"] == "who?"
        answer = {key: {"action": "accept", "content": {"username": "u", "email": "e"}}}
        r = await call({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {**params, "inputResponses": answer, "requestState": res["requestState"], "_meta": modern_meta(caps=caps)}})
        assert r["result"]["resultType"] == "complete" and "action=accept" in r["result"]["content"][0]["text"]
        r = await call({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {**params, "inputResponses": answer, "requestState": "forged", "_meta": modern_meta(caps=caps)}})
        assert r["error"]["code"] == -32602
        r = await call({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {**params, "_meta": modern_meta()}})
        assert r["error"]["code"] == -32021 and r["error"]["data"]["requiredCapabilities"] == {"elicitation": {}}

    run(main())


NAME_FORM = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def _rounds_server() -> MCPServer:
    server = MCPServer("rounds", "1.0")

    @server.tool()
    async def two_rounds(ctx: MCPContext) -> str:
        first = await ctx.elicit("name?", NAME_FORM, key="step1")
        second = await ctx.elicit("colour?", NAME_FORM, key="step2")
        return f"{first['content']['name']} likes {second['content']['name']}"

    @server.tool()
    async def all_at_once(ctx: MCPContext) -> str:
        got = await ctx.ask_all({"who": ("elicitation/create", {"message": "who?", "requestedSchema": NAME_FORM}),
                                 "roots": ("roots/list", {})})
        return f"{got['who']['content']['name']} with {len(got['roots']['roots'])} roots"

    return server


def _accept(name: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"name": name}}


#: (tool, rounds): each round the answers sent, then the keys asked for (None: the result's text).
ROUNDS: list[tuple[str, list[tuple[dict[str, Any], Any]]]] = [
    # each retry carries only its round's answer; the requestState carries the earlier ones
    ("two_rounds", [({}, ["step1"]), ({"step1": _accept("Ada")}, ["step2"]), ({"step2": _accept("blue")}, "Ada likes blue")]),
    # all the questions in one round; a partial answer asks again for what is missing only
    ("all_at_once", [({}, ["roots", "who"]), ({"roots": {"roots": [{"uri": "file:///x"}]}}, ["who"]),
                     ({"who": _accept("Bo")}, "Bo with 1 roots")]),
    ("all_at_once", [({}, ["roots", "who"]), ({"roots": {"roots": []}, "who": _accept("Cy")}, "Cy with 0 roots")]),
]


@pytest.mark.parametrize(("tool", "rounds"), ROUNDS)
def test_multi_round_requests_keep_earlier_answers(tool: str, rounds: list[tuple[dict[str, Any], Any]]) -> None:
    server = _rounds_server()
    caps = {"elicitation": {}, "roots": {}}

    async def main() -> None:
        async def send_related(b: bytes) -> None:
            pass

        state: str | None = None
        for i, (answers, expect) in enumerate(rounds):
            params: dict[str, Any] = {"name": tool, "arguments": {}, "_meta": modern_meta(caps=caps)}
            if answers:
                params["inputResponses"] = answers
            if state is not None:
                params["requestState"] = state
            out = await server.handle_stateless(msgspec.json.encode({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params}), send_related)
            res = msgspec.json.decode(out)["result"]
            if isinstance(expect, list):
                assert res["resultType"] == "input_required" and sorted(res["inputRequests"]) == expect, res
                state = res["requestState"]
            else:
                assert res["resultType"] == "complete" and res["content"][0]["text"] == expect, res

    run(main())


def test_input_responses_that_are_not_objects_are_refused() -> None:
    server = _rounds_server()

    async def main() -> None:
        async def send_related(b: bytes) -> None:
            pass

        for bad in ({"step1": 12345}, ["step1"], "x"):
            params = {"name": "two_rounds", "arguments": {}, "inputResponses": bad, "_meta": modern_meta(caps={"elicitation": {}})}
            out = await server.handle_stateless(msgspec.json.encode({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}), send_related)
            assert msgspec.json.decode(out)["error"]["code"] == -32602, bad

    run(main())


@pytest.mark.parametrize(("prop", "problem"), [
    ({"type": "string", "x-mcp-header": ""}, "non-empty"),
    ({"type": "string", "x-mcp-header": "Has Space"}, "non-empty header name"),
    ({"type": "string", "x-mcp-header": "a:b"}, "non-empty header name"),
    ({"type": "string", "x-mcp-header": "Région"}, "non-empty header name"),
    ({"type": "string", "x-mcp-header": 7}, "non-empty header name"),
    ({"type": "number", "x-mcp-header": "Score"}, "only string, integer and boolean"),
    ({"type": "object", "x-mcp-header": "Data"}, "only string, integer and boolean"),
    ({"type": "array", "items": {"type": "string"}, "x-mcp-header": "Items"}, "only string, integer and boolean"),
])
def test_tools_with_invalid_param_headers_are_refused(prop: dict[str, Any], problem: str) -> None:
    server = MCPServer("headers", "1.0")
    with pytest.raises(ValueError, match=problem):
        server.tool(name="bad", input_schema={"type": "object", "properties": {"p": prop}})(lambda p=None: "x")
    with pytest.raises(ValueError, match="names two parameters"):
        server.tool(name="twice", input_schema={"type": "object", "properties": {
            "a": {"type": "string", "x-mcp-header": "Same"}, "b": {"type": "string", "x-mcp-header": "same"}}})(lambda a=None, b=None: "x")
    server.tool(name="good", input_schema={"type": "object", "properties": {
        "a": {"type": "string", "x-mcp-header": "Region"}, "n": {"type": "integer", "x-mcp-header": "N"}}})(lambda a=None, n=None: "x")
    assert server.tools["good"].header_params == {"mcp-param-region": ("a", "string"), "mcp-param-n": ("n", "integer")}


def test_inline_tools_keep_the_rules() -> None:
    """echo/add run inline (no task); the rules still apply to them."""

    async def main() -> None:
        server = make_mcp_demo()
        assert server.tools["echo"].inline and not server.tools["slow"].inline
        async with Wire(server) as w:
            r = await w.call("tools/call", {"name": "echo", "arguments": {"text": "x"}}, id=1)
            assert r["error"]["code"] == -32600  # before initialize
            await w.initialize()
            await w.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "slow", "arguments": {"seconds": 0.3}}})
            await asyncio.sleep(0.05)
            r = await w.call("tools/call", {"name": "echo", "arguments": {"text": "dup"}}, id=7)
            assert r["error"]["code"] == -32600  # id 7 is still in flight
            r = await w.recv()
            assert r["id"] == 7 and r["result"]["content"][0]["text"] == "slept 0.3 seconds"
            r = await w.call("tools/call", {"name": "echo", "arguments": {"text": 5}}, id=8)
            assert r["result"]["isError"]
            r = await w.call("tools/call", {"name": "echo", "arguments": {"text": "ok"}}, id=None)
            assert r["error"]["code"] == -32600 and "id" not in r
        async with Wire(server) as w:
            await w.call("server/discover", {"_meta": modern_meta()}, id=1)
            r = await w.call("tools/call", {"name": "echo", "arguments": {"text": "x"}}, id=2)
            assert r["error"]["code"] == -32602  # no _meta envelope
            r = await w.call("tools/call", {"name": "echo", "arguments": {"text": "x"}, "_meta": modern_meta()}, id=3)
            assert r["result"]["resultType"] == "complete" and r["result"]["content"][0]["text"] == "x"

    run(main())


def test_roots_request_and_roots_changed() -> None:
    server = MCPServer("t", "1")
    changed: list[Any] = []
    server.on_roots_changed = changed.append

    @server.tool()
    async def roots(ctx: MCPContext) -> ToolResult:
        r = await ctx.list_roots()
        return ToolResult([{"type": "text", "text": ",".join(x["uri"] for x in r["roots"])}])

    async def main() -> None:
        async with Wire(server) as w:
            await w.initialize("2025-06-18", {"roots": {"listChanged": True}})
            await w.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "roots"}})
            req = await w.recv()
            assert req["method"] == "roots/list"
            await w.send({"jsonrpc": "2.0", "id": req["id"], "result": {"roots": [{"uri": "file:///a"}, {"uri": "file:///b"}]}})
            r = await w.recv()
            assert r["result"]["content"][0]["text"] == "file:///a,file:///b"
            await w.send({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
            await asyncio.sleep(0.05)
            assert len(changed) == 1
            w.validate("2025-06-18")
        async with Wire(server) as w:
            await w.call("server/discover", {"_meta": modern_meta()}, id=1)
            r = await w.call("logging/setLevel", {"level": "info", "_meta": modern_meta()}, id=2)
            assert r["error"]["code"] == -32601

    run(main())


def test_tool_failures_never_leak_or_kill_the_server() -> None:
    server = MCPServer("t", "1")

    @server.tool(blocking=False)
    def exits() -> str:
        raise SystemExit("secret-exit")

    @server.tool(blocking=False)
    def unencodable() -> str:
        return object()  # type: ignore[return-value]

    @server.tool()
    async def nan() -> float:
        return float("nan")

    async def main() -> None:
        async with Wire(server) as w:
            await w.initialize()
            for i, name in enumerate(["exits", "unencodable", "nan"]):
                r = await w.call("tools/call", {"name": name}, id=i + 2)
                assert r["result"]["isError"] is True and "incident" in r["result"]["content"][0]["text"]
                assert "secret" not in json.dumps(r)
            assert (await w.call("ping", id=9))["result"] == {}

    run(main())


def test_stdio_inline_tools_keep_the_rules(spawn: Any) -> None:
    """Over real stdio, inline tools are answered on the reader's turn; the rules still hold."""
    import sys

    p = spawn([sys.executable, "-m", "sturdyrpc", "demo", "--mcp"])
    echo = {"name": "echo", "arguments": {"text": "x"}}
    p.request("tools/call", echo, id=1)
    assert p.recv(10)["error"]["code"] == -32600  # before initialize
    p.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}, id=2)
    assert p.recv(10)["result"]["protocolVersion"] == "2025-11-25"
    p.send_line('{"jsonrpc":"2.0","method":"notifications/initialized"}')
    p.request("tools/call", {"name": "slow", "arguments": {"seconds": 0.5}}, id=3)
    time.sleep(0.1)
    p.request("tools/call", echo, id=3)
    r = p.recv()
    assert r["id"] == 3 and r["error"]["code"] == -32600  # id 3 still running
    assert p.recv()["result"]["content"][0]["text"] == "slept 0.5 seconds"
    p.request("tools/call", echo, id=None)
    r = p.recv()
    assert r["error"]["code"] == -32600 and "id" not in r
    p.request("tools/call", {"name": "echo", "arguments": {"text": 1}}, id=4)
    assert p.recv()["result"]["isError"] is True
    p.request("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}}, id=5)
    assert p.recv()["result"] == {"content": [{"type": "text", "text": "5"}], "structuredContent": {"result": 5}, "isError": False}
    n = 300
    p.send(b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"t%d"}}}\n' % (i, i) for i in range(100, 100 + n)))
    got = {p.recv()["id"] for _ in range(n)}
    assert got == set(range(100, 100 + n))
    p.close_stdin()
    assert p.wait(10) == 0


def test_stdio_client_that_does_not_read_is_held_back() -> None:
    """A client that writes requests but does not read replies: the server stops reading (the
    pipes fill up) instead of buffering without bound; then everything is answered."""
    import os
    import subprocess
    import sys
    import threading

    n = 60_000
    proc = subprocess.Popen([sys.executable, "-m", "sturdyrpc", "demo", "--mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        init = b'{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n'
        proc.stdin.write(init)
        assert b'"protocolVersion"' in proc.stdout.readline()
        reqs = b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"text":"%s"}}}\n' % (i, b"x" * 50) for i in range(n))
        writer = threading.Thread(target=lambda: proc.stdin.write(reqs), daemon=True)  # type: ignore[union-attr]
        writer.start()
        time.sleep(1.5)  # we read nothing meanwhile
        with open(f"/proc/{proc.pid}/status") as f:
            rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        assert rss_kib < 60 * 1024, f"server RSS {rss_kib} KiB while its client does not read"
        assert writer.is_alive(), "the server swallowed everything: nothing held the writer back"
        got = 0
        buf = b""
        while got < n:
            data = os.read(proc.stdout.fileno(), 1 << 16)
            assert data, "server closed stdout early"
            buf += data
            got += data.count(b"\n")
        writer.join(10)
    finally:
        proc.kill()
        proc.wait(5)


def test_share_keeps_tasks_in_the_given_store_and_sends_notifications_through_the_fanout() -> None:
    """``server.share(store, worker=, fanout=)``: how several workers' wiring reaches the server
    (no attribute set from outside)."""
    from sturdyrpc.store.memory import MemoryStore

    async def main() -> None:
        server = MCPServer("shared", "1")

        @server.tool(task_support="optional")
        async def work() -> str:
            return "done"

        store = MemoryStore()
        sent: list[tuple[str, dict[str, Any]]] = []

        async def fanout(method: str, params: dict[str, Any]) -> None:
            sent.append((method, params))

        server.share(store, worker="worker-one", fanout=fanout)
        await server.notify_list_changed("prompts")
        await server.resource_updated("test://x")

        @server.tool()
        def later() -> str:
            return "x"

        for _ in range(5):  # the registration's list_changed goes out from a task of the loop
            await asyncio.sleep(0)
        assert sent == [("notifications/prompts/list_changed", {}), ("notifications/resources/updated", {"uri": "test://x"}),
                        ("notifications/tools/list_changed", {})]

        async with server.test_client("2025-11-25") as client:
            handle = await client.call_tool_as_task("work")
            raw = await store.get(f"task:{handle.task_id}")
            assert raw is not None and json.loads(raw)["worker"] == "worker-one"
            assert (await handle.wait())["status"] == "completed"

    run(main())


def test_create_peer_passes_on_enqueue_to_its_peer() -> None:
    """A transport that tags outgoing messages gives its callback to ``create_peer`` (the HTTP
    app does): it sees every message the session queues, the reply included."""
    from sturdyrpc.transports.memory import memory_pair

    async def main() -> None:
        server = make_mcp_demo()
        queued: list[bytes] = []
        client_end, server_end = memory_pair()
        peer = server.create_peer(server_end, on_enqueue=queued.append)
        assert server.session_of(peer) is not None
        async with peer:
            await client_end.send(msgspec.json.encode({"jsonrpc": "2.0", "id": 7, "method": "ping"}))
            reply = msgspec.json.decode(await asyncio.wait_for(client_end.receive(), 5))
            assert reply == {"jsonrpc": "2.0", "id": 7, "result": {}}
            assert [msgspec.json.decode(b) for b in queued] == [reply]
            await client_end.close()

    run(main())
