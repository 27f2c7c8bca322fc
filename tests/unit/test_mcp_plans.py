"""A plan changes how a call runs, never what it answers.

A tool that runs inline (sync, ``blocking=False``) is answered on the reader's turn through its
own routed entry and cached reply templates; the same tool run as a task (``blocking=True``)
goes through the async ``tools/call`` entry and the general rendering. Random and edge
``tools/call`` frames are sent to both servers; their replies must be the same bytes (incident
ids aside, which are random by design), on every protocol version.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.mcp import VERSIONS, Wire, modern_meta

from sturdyrpc.errors import InvalidParams
from sturdyrpc.mcp import MCPContext, MCPServer, ToolError, ToolResult

pytestmark = pytest.mark.timeout(120)

_INCIDENT = re.compile(rb"incident [0-9a-f]{8}")


def make_server(inline: bool = True) -> MCPServer:
    """The same tools; ``inline=False`` runs the sync ones as tasks (on the pool) instead."""
    server = MCPServer("plans", "1.0", title="Plan check")
    blocking = not inline

    @server.tool(blocking=blocking)
    def echo(text: str) -> str:
        return text

    @server.tool(blocking=blocking)
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(blocking=blocking)
    def flag(x: bool) -> bool:
        return x

    @server.tool(blocking=blocking)
    def maybe(x: int | None = None, y: str = "d") -> str:
        return f"{x}{y}"

    @server.tool(blocking=blocking)
    def num(x: float) -> float:
        return x * 2

    @server.tool(blocking=blocking)
    def obj(d: dict) -> dict:  # type: ignore[type-arg]
        return d

    @server.tool(blocking=blocking)
    def untyped(x=None):  # type: ignore[no-untyped-def]
        return x

    @server.tool(blocking=blocking, structured=False)
    def plain(text: str) -> str:
        return text

    @server.tool(blocking=blocking, input_schema={"type": "object"})
    def raw(**kw: Any) -> str:
        return json.dumps(kw, sort_keys=True)

    @server.tool(blocking=blocking)
    def tr(text: str = "t") -> ToolResult:
        return ToolResult([{"type": "text", "text": text}, {"type": "audio", "data": "AA==", "mimeType": "audio/wav"}], structured={"t": text})

    @server.tool(blocking=blocking)
    def err(text: str) -> str:
        raise ToolError(text)

    @server.tool(blocking=blocking)
    def rpcerr() -> str:
        raise InvalidParams("Invalid params: on purpose", {"param": "x"})

    @server.tool(blocking=blocking)
    def boom() -> str:
        raise RuntimeError("secret")

    @server.tool(blocking=blocking)
    def nan() -> float:
        return float("nan")

    @server.tool(blocking=blocking)
    def big() -> int:
        return 2**80

    @server.tool()
    async def aecho(text: str) -> str:
        return text

    @server.tool(blocking=blocking)
    def withctx(ctx: MCPContext, text: str = "") -> str:
        return text

    return server


SERVER = make_server()
TASKS = make_server(inline=False)
NAMES = [*SERVER.tools, "nope", ""]

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8)
)
json_value = st.recursive(json_leaf, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=4), c, max_size=3)), max_leaves=6)
ids = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(0, 5),
    st.text(max_size=6),
    st.sampled_from(["1", "init", "\u00e9\U0001f600", 'q"\\', "\x00"]),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
)
good_args = st.one_of(
    st.fixed_dictionaries({"text": st.text(max_size=10)}),
    st.fixed_dictionaries({"a": st.integers(-(2**70), 2**70), "b": st.integers(-5, 5)}),
    st.fixed_dictionaries({"x": json_leaf}),
    st.fixed_dictionaries({"x": json_leaf, "y": json_leaf}),
    st.fixed_dictionaries({"d": json_value}),
    st.just({}),
)
MISSING: Any = object()
arguments = st.one_of(good_args, good_args, st.dictionaries(st.sampled_from(["text", "a", "b", "x", "zz"]), json_value, max_size=3), json_value, st.just(MISSING))


def metas(version: str) -> st.SearchStrategy[Any]:
    modern = st.builds(
        lambda v, extra: modern_meta(v, **extra),
        st.sampled_from([version, version, "2026-07-28", "2025-11-25", "1999-01-01"]),
        st.dictionaries(st.sampled_from(["progressToken", "x", "io.modelcontextprotocol/logLevel"]), json_leaf, max_size=2),
    )
    plain = st.one_of(st.just({}), st.fixed_dictionaries({"progressToken": st.one_of(st.integers(), st.text(max_size=4))}), json_value)
    return st.one_of(st.just(MISSING), modern, modern, plain) if version == "2026-07-28" else st.one_of(st.just(MISSING), plain, plain, modern)


@st.composite
def frames(draw: st.DrawFn, version: str) -> bytes:
    params: dict[str, Any] = {}
    if draw(st.integers(0, 20)):
        params["name"] = draw(st.sampled_from(NAMES))
    else:
        params["name"] = draw(json_leaf)
    a = draw(arguments)
    if a is not MISSING:
        params["arguments"] = a
    m = draw(metas(version))
    if m is not MISSING:
        params["_meta"] = m
    extra = draw(st.integers(0, 30))
    if extra == 0:
        params["requestState"] = "x"
    elif extra == 1:
        params["unknown"] = 1
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": draw(ids), "method": "tools/call", "params": params}
    shape = draw(st.integers(0, 40))
    if shape == 0:
        msg["jsonrpc"] = "1.0"
    elif shape == 1:
        msg["params"] = [params]
    elif shape == 2:
        msg["extra"] = True
    elif shape == 3:
        msg["method"] = "tools/list"
    elif shape == 4:
        msg = dict(reversed(list(msg.items())))
    elif shape == 5:
        return json.dumps(msg).encode()  # spaces, \\u escapes
    elif shape == 6:
        return msgspec.json.encode(msg)[:-1] + b',"id":7}'  # a duplicate member: the last one wins
    elif shape == 7:
        return msgspec.json.encode(msg).replace(b'"tools/call"', b'"tools\\/call"')
    elif shape == 8:
        return msgspec.json.encode(msg).replace(b'"name":"echo"', b'"name":"ech\\u006f"')
    return msgspec.json.encode(msg)


async def negotiate(w: Wire, version: str) -> None:
    if version == "2026-07-28":
        r = await w.call("server/discover", {"_meta": modern_meta()}, id="d")
    else:
        r = await w.initialize(version)
    assert "result" in r, r


async def reply(w: Wire, frame: bytes) -> bytes:
    await w.client.send(frame)
    data = await asyncio.wait_for(w.client.receive(), 3.0)
    assert isinstance(data, bytes)
    return data


async def compare(version: str, batch: list[bytes]) -> int:
    """Send each frame to the inline and the task server; returns how many were answered inline."""
    inline_answered = 0
    async with Wire(SERVER) as a, Wire(TASKS) as b:
        await negotiate(a, version)
        await negotiate(b, version)
        for frame in batch:
            ra, rb = await reply(a, frame), await reply(b, frame)
            assert _INCIDENT.sub(b"incident X", ra) == _INCIDENT.sub(b"incident X", rb), (version, frame, ra, rb)
            inline_answered += b'"result"' in ra
    return inline_answered


@pytest.mark.parametrize("version", VERSIONS)
def test_inline_and_task_plans_answer_alike(version: str) -> None:
    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(frames(version), min_size=5, max_size=25))
    def check(batch: list[bytes]) -> None:
        asyncio.run(compare(version, batch))

    check()


def _call(id_: Any, name: str, args: Any = MISSING, meta: Any = MISSING, **extra: Any) -> bytes:
    params: dict[str, Any] = {"name": name, **extra}
    if args is not MISSING:
        params["arguments"] = args
    if meta is not MISSING:
        params["_meta"] = meta
    return msgspec.json.encode({"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": params})


@pytest.mark.parametrize("version", VERSIONS)
def test_plans_answer_edge_cases_alike(version: str) -> None:
    meta = modern_meta(version) if version == "2026-07-28" else MISSING
    edge = [
        _call(1, "echo", {"text": "hello"}, meta),
        _call("s", "echo", {"text": '"\\\n\u2028\U0001f600'}, meta),
        _call(2**64, "add", {"a": 2**70, "b": -1}, meta),
        _call(-3, "add", {"a": True, "b": 1}, meta),
        _call(4, "echo", {"text": 5}, meta),
        _call(5, "echo", {}, meta),
        _call(6, "echo", {"text": "a", "more": 1}, meta),
        _call(7, "echo", None, meta),
        _call(8, "echo", [1], meta),
        _call(9, "maybe", MISSING, meta),
        _call(10, "maybe", {"x": None}, meta),
        _call(11, "flag", {"x": False}, meta),
        _call(12, "num", {"x": 1}, meta),
        _call(13, "num", {"x": 1.5e300}, meta),
        _call(14, "obj", {"d": {"a": [1, None, 2.5]}}, meta),
        _call(15, "untyped", {"x": [1, "a"]}, meta),
        _call(16, "untyped", {"x": {"type": "text", "text": "blk"}}, meta),
        _call(17, "plain", {"text": "p"}, meta),
        _call(18, "raw", {"z": 1, "a": [2]}, meta),
        _call(19, "tr", {}, meta),
        _call(20, "err", {"text": "shown"}, meta),
        _call(21, "rpcerr", {}, meta),
        _call(22, "boom", {}, meta),
        _call(23, "nan", {}, meta),
        _call(24, "big", {}, meta),
        _call(25, "aecho", {"text": "a"}, meta),
        _call(26, "withctx", {"text": "a"}, meta),
        _call(27, "nope", {}, meta),
        _call(28, "echo", {"text": "x"}, {"progressToken": "p"} if meta is MISSING else {**meta, "progressToken": 1}),
        _call(29, "echo", {"text": "x"}, {"io.modelcontextprotocol/serverInfo": 1}),
        _call(30, "echo", {"text": "x"}, meta, requestState="x"),
        _call(None, "echo", {"text": "x"}, meta),
        _call(1.0, "echo", {"text": "x"}, meta),
        _call(True, "echo", {"text": "x"}, meta),
        _call("", "echo", {"text": ""}, meta),
        _call(31, "echo", {"text": "x" * 5000}, meta),
        b'{"jsonrpc":"2.0","id":32,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a","text":"b"}}}',
        b'{"jsonrpc":"2.0","id":33,"id":34,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a"}}}',
        b' {"jsonrpc" : "2.0", "id": 35, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "a"}}} ',
        b'{"jsonrpc":"2.0","id":36,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a"}},"params":{"name":"add","arguments":{"a":1,"b":2}}}',
        b'{"jsonrpc":"2.0","id":37,"method":"tools/call","params":{"name":"echo","arguments":{"text":"\xff"}}}',
        b'{"jsonrpc":"2.0","id":38,"method":"tools/call","params":{"name":"echo","arguments":{"text":"\\ud800"}}}',
        b'{"jsonrpc":"2.0","id":39,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a"}}}x',
        b'{"jsonrpc":"2.0","id":40,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a"},"_meta":null}}',
        b'{"jsonrpc":"2.0","id":41e0,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a"}}}',
        b'{"jsonrpc":"2.0","id":-0,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a"}}}',
        b'{"jsonrpc":"2.0","id":1' + b"0" * 40 + b',"method":"tools/call","params":{"name":"echo","arguments":{"text":"a"}}}',
    ]
    answered = asyncio.run(compare(version, edge))
    assert answered >= 10  # the common cases do succeed


def test_a_duplicate_of_a_running_id_of_the_same_type_is_refused_and_another_type_is_not() -> None:
    """While request ``1`` runs, ``1`` is refused (-32600, the first untouched); ``"1"`` is another id."""
    server = MCPServer("dup-types", "1")
    gate = asyncio.Event()

    @server.tool()
    async def wait() -> str:
        await gate.wait()
        return "done"

    @server.tool(blocking=False)
    def echo(text: str) -> str:
        return text

    async def main() -> None:
        async with Wire(server) as w:
            await negotiate(w, "2025-11-25")
            await w.client.send(_call(1, "wait", {}))
            await asyncio.sleep(0.05)
            assert w.peer.is_running(1) and not w.peer.accepts_id(1)
            assert msgspec.json.decode(await reply(w, _call(1, "echo", {"text": "x"})))["error"]["code"] == -32600
            assert msgspec.json.decode(await reply(w, _call("1", "echo", {"text": "x"})))["id"] == "1"
            gate.set()
            r = msgspec.json.decode(await asyncio.wait_for(w.client.receive(), 3.0))
            assert r["id"] == 1 and r["result"]["content"][0]["text"] == "done"
            await asyncio.sleep(0)
            assert "result" in msgspec.json.decode(await reply(w, _call(1, "echo", {"text": "x"})))  # no longer running

    asyncio.run(main())


def test_ids_are_echoed_exactly_and_ids_mcp_refuses_are_refused() -> None:
    """``1``, ``"1"``, ``1.0`` and ``true`` are different ids: the first two are answered with
    the id exactly as sent, the others refused (-32600)."""

    async def main() -> None:
        async with Wire(SERVER) as w:
            await negotiate(w, "2025-11-25")
            assert msgspec.json.decode(await reply(w, _call(1, "echo", {"text": "x"})))["id"] == 1
            assert (await reply(w, _call("1", "echo", {"text": "x"}))).endswith(b',"id":"1"}')
            big = 2**63 + 5
            assert msgspec.json.decode(await reply(w, _call(big, "echo", {"text": "x"})))["id"] == big
            for frame in (_call(1.0, "echo", {"text": "x"}), _call(True, "echo", {"text": "x"}), _call(None, "echo", {"text": "x"})):
                assert msgspec.json.decode(await reply(w, frame))["error"]["code"] == -32600
            for digits in (19, 20, 40, 4300, 4301, 5000):
                frame = b'{"jsonrpc":"2.0","id":' + b"7" * digits + b',"method":"tools/call","params":{"name":"echo","arguments":{"text":"a"}}}'
                out = await reply(w, frame)
                if digits <= 4300:
                    assert b'"id":' + b"7" * digits + b"}" in out
                else:
                    assert msgspec.json.decode(out)["error"]["code"] == -32600
            escaped = _call(5, "echo", {"text": "x"}).replace(b'"tools/call"', b'"tools\\/call"')
            assert msgspec.json.decode(await reply(w, escaped))["result"]["content"][0]["text"] == "x"
            nan = await reply(w, _call(6, "nan", {}))
            assert b"NaN" not in nan and b"Infinity" not in nan

    asyncio.run(main())
