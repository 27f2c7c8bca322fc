"""The stdio early answer (``MCPServer.fast_path``) answers exactly as the peer does.

There is one ``tools/call`` path (``mcp/tools_call.py``); the early answer is that path entered
before the peer's queues. Random and edge ``tools/call`` frames are given to the early answer
and, on the same session, to the peer; whenever the early answer answers, its bytes must be the
peer's bytes (incident ids aside, which are random by design), on every protocol version, and
it must leave to the peer what only the peer may decide (duplicates, closing).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import msgspec
import pytest
from _mcp_support import VERSIONS, Wire, modern_meta
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sturdyrpc import codec
from sturdyrpc.errors import InvalidParams
from sturdyrpc.mcp import MCPContext, MCPServer, ToolError, ToolResult

pytestmark = pytest.mark.timeout(120)

_INCIDENT = re.compile(rb"incident [0-9a-f]{8}")


def make_server() -> MCPServer:
    server = MCPServer("fast", "1.0", title="Fast path check")

    @server.tool(blocking=False)
    def echo(text: str) -> str:
        return text

    @server.tool(blocking=False)
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(blocking=False)
    def flag(x: bool) -> bool:
        return x

    @server.tool(blocking=False)
    def maybe(x: int | None = None, y: str = "d") -> str:
        return f"{x}{y}"

    @server.tool(blocking=False)
    def num(x: float) -> float:
        return x * 2

    @server.tool(blocking=False)
    def obj(d: dict) -> dict:  # type: ignore[type-arg]
        return d

    @server.tool(blocking=False)
    def untyped(x=None):  # type: ignore[no-untyped-def]
        return x

    @server.tool(blocking=False, structured=False)
    def plain(text: str) -> str:
        return text

    @server.tool(blocking=False, input_schema={"type": "object"})
    def raw(**kw: Any) -> str:
        return json.dumps(kw, sort_keys=True)

    @server.tool(blocking=False)
    def tr(text: str = "t") -> ToolResult:
        return ToolResult([{"type": "text", "text": text}, {"type": "audio", "data": "AA==", "mimeType": "audio/wav"}], structured={"t": text})

    @server.tool(blocking=False)
    def err(text: str) -> str:
        raise ToolError(text)

    @server.tool(blocking=False)
    def rpcerr() -> str:
        raise InvalidParams("Invalid params: on purpose", {"param": "x"})

    @server.tool(blocking=False)
    def boom() -> str:
        raise RuntimeError("secret")

    @server.tool(blocking=False)
    def nan() -> float:
        return float("nan")

    @server.tool(blocking=False)
    def big() -> int:
        return 2**80

    @server.tool()
    async def aecho(text: str) -> str:
        return text

    @server.tool(blocking=False)
    def withctx(ctx: MCPContext, text: str = "") -> str:
        return text

    return server


SERVER = make_server()
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


async def general(w: Wire, frame: bytes) -> bytes:
    await w.client.send(frame)
    data = await asyncio.wait_for(w.client.receive(), 3.0)
    assert isinstance(data, bytes)
    return data


async def compare(version: str, batch: list[bytes], server: MCPServer = SERVER) -> int:
    answered = 0
    async with Wire(server) as w:
        await negotiate(w, version)
        for frame in batch:
            fast = server.fast_reply(frame, w.peer)
            try:
                decoded = codec.decode_bounded(frame, 64)
            except codec.DecodeFailure:
                decoded = None
            # given the frame as decoded already (HTTP): whatever the typed decode answers, and
            # the general path's reply whenever it answers
            again = None if decoded is None else server.fast_path(w.peer)(frame, decoded)
            assert fast is None or again is not None, (version, frame, fast)
            slow = await general(w, frame)
            if again is not None:
                assert _INCIDENT.sub(b"incident X", again) == _INCIDENT.sub(b"incident X", slow), (version, frame, again, slow)
            if fast is not None:
                answered += 1
                assert _INCIDENT.sub(b"incident X", fast) == _INCIDENT.sub(b"incident X", slow), (version, frame, fast, slow)
    return answered


@pytest.mark.parametrize("version", VERSIONS)
def test_fast_path_replies_are_the_general_paths(version: str) -> None:
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
def test_fast_path_edge_cases(version: str) -> None:
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
    assert answered >= 10  # the fast path does take the common cases


@pytest.mark.parametrize("version", ["2025-11-25", "2026-07-28"])
def test_fast_path_leaves_a_duplicate_id_to_the_general_path(version: str) -> None:
    server = MCPServer("dup", "1")
    gate = asyncio.Event()

    @server.tool()
    async def wait() -> str:
        await gate.wait()
        return "done"

    @server.tool(blocking=False)
    def echo(text: str) -> str:
        return text

    meta = modern_meta(version) if version == "2026-07-28" else MISSING

    async def main() -> None:
        async with Wire(server) as w:
            await negotiate(w, version)
            await w.client.send(_call(7, "wait", {}, meta))
            await asyncio.sleep(0.05)
            frame = _call(7, "echo", {"text": "x"}, meta)
            assert server.fast_reply(frame, w.peer) is None
            assert server.fast_reply(_call("7", "echo", {"text": "x"}, meta), w.peer) is not None
            r = msgspec.json.decode(await general(w, frame))
            assert r["error"]["code"] == -32600
            gate.set()
            r = msgspec.json.decode(await asyncio.wait_for(w.client.receive(), 3.0))
            assert r["result"]["content"][0]["text"] == "done"

    asyncio.run(main())


def test_early_answer_leaves_every_frame_to_the_peer_once_the_connection_is_closing() -> None:
    frame = _call(1, "echo", {"text": "x"})

    async def main() -> None:
        async with Wire(SERVER) as w:
            await negotiate(w, "2025-11-25")
            early = SERVER.fast_path(w.peer)
            assert early(frame) is not None
            w.peer.abort("test: closing")
            assert w.peer.is_closing
            assert early(frame) is None  # the peer refuses or drops it, as its rules say

    asyncio.run(main())


def test_early_answer_of_a_peer_not_made_by_the_server_answers_nothing() -> None:
    from sturdyrpc.peer import Peer
    from sturdyrpc.transports.memory import memory_pair

    async def main() -> None:
        _client, end = memory_pair()
        peer = Peer(end, SERVER.dispatcher)
        assert SERVER.fast_path(peer)(_call(1, "echo", {"text": "x"})) is None

    asyncio.run(main())


def test_early_answer_made_before_initialize_answers_nothing_then_as_the_peer_does_after_it() -> None:
    """The early answer of stdio is made when the connection opens, before any version is
    negotiated: what it works out once per session must follow the negotiation."""
    frame = _call(1, "echo", {"text": "x"})

    async def main() -> None:
        async with Wire(SERVER) as w:
            early = SERVER.fast_path(w.peer)
            assert early(frame) is None  # not initialized: the lifecycle is the peer's
            r = msgspec.json.decode(await general(w, frame))
            assert r["error"]["code"] == -32600
            await negotiate(w, "2025-06-18")
            fast = early(_call(2, "echo", {"text": "x"}))
            assert fast is not None
            assert fast == await general(w, _call(2, "echo", {"text": "x"}))
            assert early(_call(3, "echo", {"text": "y"})) == await general(w, _call(3, "echo", {"text": "y"}))

    asyncio.run(main())


def test_early_answer_follows_a_change_of_the_negotiated_version() -> None:
    """What the early answer skips per session (the profile's checks, the version's rules) is
    worked out again when the profile's version changes."""
    plain = _call(1, "echo", {"text": "x"})

    async def main() -> None:
        async with Wire(SERVER) as w:
            early = SERVER.fast_path(w.peer)
            await negotiate(w, "2025-11-25")
            assert early(plain) == await general(w, plain)
            w.peer.profile.set_version("2026-07-28")  # e.g. an HTTP layer re-pinning the session
            assert early(plain) is None  # no 2026-07-28 envelope: refused by the peer's rules
            r = msgspec.json.decode(await general(w, plain))
            assert r["error"]["code"] == -32602
            modern = _call(2, "echo", {"text": "x"}, modern_meta("2026-07-28"))
            fast = early(modern)
            assert fast is not None and b'"resultType":"complete"' in fast
            assert fast == await general(w, modern)

    asyncio.run(main())


def test_early_answer_echoes_the_exact_id_and_leaves_ids_mcp_refuses_to_the_peer() -> None:
    """``1``, ``"1"``, ``1.0`` and ``true`` are different ids: the first two are answered with
    the id exactly as sent, the others are left to the peer (which refuses them)."""

    async def main() -> None:
        async with Wire(SERVER) as w:
            early = SERVER.fast_path(w.peer)
            await negotiate(w, "2025-11-25")
            assert msgspec.json.decode(early(_call(1, "echo", {"text": "x"})) or b"null")["id"] == 1
            one_str = early(_call("1", "echo", {"text": "x"}))
            assert one_str is not None and one_str.endswith(b',"id":"1"}')
            big = 2**63 + 5
            assert msgspec.json.decode(early(_call(big, "echo", {"text": "x"})) or b"null")["id"] == big
            for frame in (_call(1.0, "echo", {"text": "x"}), _call(True, "echo", {"text": "x"}), _call(None, "echo", {"text": "x"})):
                assert early(frame) is None
                r = msgspec.json.decode(await general(w, frame))
                assert r["error"]["code"] == -32600

    asyncio.run(main())


def test_early_answer_refuses_a_duplicate_of_a_running_id_of_the_same_type_only() -> None:
    """While request ``1`` runs, ``1`` is the peer's to refuse; ``"1"`` is another id."""
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
            early = server.fast_path(w.peer)
            await negotiate(w, "2025-11-25")
            await w.client.send(_call(1, "wait", {}))
            await asyncio.sleep(0.05)
            assert w.peer.is_running(1) and not w.peer.accepts_id(1)
            assert early(_call(1, "echo", {"text": "x"})) is None
            assert early(_call("1", "echo", {"text": "x"})) is not None
            assert early(_call(2, "echo", {"text": "x"})) is not None
            gate.set()
            r = msgspec.json.decode(await asyncio.wait_for(w.client.receive(), 3.0))
            assert r["id"] == 1 and r["result"]["content"][0]["text"] == "done"
            await asyncio.sleep(0)
            assert early(_call(1, "echo", {"text": "x"})) is not None  # no longer running

    asyncio.run(main())


def test_early_answer_takes_an_escaped_method_name_and_answers_as_the_peer() -> None:
    frame = _call(5, "echo", {"text": "x"}).replace(b'"tools/call"', b'"tools\\/call"')

    async def main() -> None:
        async with Wire(SERVER) as w:
            await negotiate(w, "2025-11-25")
            fast = SERVER.fast_reply(frame, w.peer)
            assert fast is not None and fast == await general(w, frame)

    asyncio.run(main())


def test_early_answer_never_encodes_nan_or_infinity() -> None:
    async def main() -> None:
        async with Wire(SERVER) as w:
            await negotiate(w, "2025-11-25")
            frame = _call(1, "nan", {})
            fast = SERVER.fast_reply(frame, w.peer)
            slow = await general(w, frame)
            for reply in (fast, slow):
                if reply is not None:
                    assert b"NaN" not in reply and b"Infinity" not in reply
                    assert _INCIDENT.sub(b"incident X", reply) == _INCIDENT.sub(b"incident X", slow)

    asyncio.run(main())


@pytest.mark.parametrize("version", VERSIONS)
def test_profile_accepts_every_request_only_where_check_request_would(version: str) -> None:
    """``MCPProfile.accepts_every(method)`` is True only where ``check_request`` passes every
    request of that method with a string or integer id and object params."""
    from sturdyrpc.mcp.profile import MCPProfile

    methods = ["tools/call", "tools/list", "ping", "initialize", "server/discover", "notifications/initialized", "x/y"]
    params_list: list[dict[str, Any]] = [{}, {"name": "echo"}, {"_meta": modern_meta(version)}, {"_meta": {"progressToken": 1}}]
    fresh = MCPProfile()
    assert not any(fresh.accepts_every(m) for m in methods)  # nothing negotiated yet
    assert not MCPProfile(version, role="client").accepts_every("tools/call")
    p = MCPProfile()
    if version == "2026-07-28":
        assert p.check_request("server/discover", {"_meta": modern_meta(version)}, 1, False) is None
    else:
        assert p.check_request("initialize", {"protocolVersion": version, "capabilities": {}, "clientInfo": {}}, 0, False) is None
    assert p.version == version
    for m in methods:
        if p.accepts_every(m):
            for params in params_list:
                for id_ in (1, "1", 0, "", 2**70):
                    assert p.check_request(m, params, id_, False) is None, (m, params, id_)
    assert p.accepts_every("tools/call") == (version != "2026-07-28")
    assert not p.accepts_every("initialize") and not p.accepts_every("notifications/initialized")


def test_early_answer_of_long_integer_ids_is_the_peers_reply_up_to_the_bound_and_none_past_it() -> None:
    async def main() -> None:
        async with Wire(SERVER) as w:
            await negotiate(w, "2025-11-25")
            for digits in (19, 20, 40, 4300, 4301, 5000):
                frame = b'{"jsonrpc":"2.0","id":' + b"7" * digits + b',"method":"tools/call","params":{"name":"echo","arguments":{"text":"a"}}}'
                fast = SERVER.fast_reply(frame, w.peer)
                slow = await general(w, frame)
                if digits <= 4300:
                    assert fast == slow and b'"id":' + b"7" * digits + b"}" in slow
                else:
                    assert fast is None and msgspec.json.decode(slow)["error"]["code"] == -32600

    asyncio.run(main())
