"""The SSE parser (client side), SSE encoding, the in-memory event store, and the 2026-07-28 header rules."""

from __future__ import annotations

import asyncio

import pytest

from sturdyrpc.mcp_http.events import MemoryEventStore, sse_event, sse_priming
from sturdyrpc.mcp_http.modern import HeaderProblem, check_modern_headers, decode_header_value, encode_header_value
from sturdyrpc.mcp_http.sse import SSEParser


def test_parser_line_endings_split_chunks_comments_and_fields() -> None:
    raw = b": hello\r\nid: a.1\r\nretry: 250\r\ndata: \r\n\r\nevent: message\rid: a.2\rdata: {\"x\":\r\rdata: 1\ndata: 2\n\n"
    for step in (1, 2, 3, 7, len(raw)):
        p = SSEParser()
        events = []
        for i in range(0, len(raw), step):
            events += p.feed(raw[i : i + step])
        assert [(e.event, e.data, e.id) for e in events] == [("message", '{"x":', "a.2"), ("message", "1\n2", "a.2")]
        assert p.retry == 250 and p.last_event_id == "a.2"


def test_parser_bounds_line_length() -> None:
    p = SSEParser(max_line=100)
    with pytest.raises(ValueError):
        p.feed(b"data: " + b"x" * 200)


def test_encoding_round_trips() -> None:
    p = SSEParser()
    evs = p.feed(sse_priming("s1.1", 500) + sse_event(b'{"a":1}', "s1.2") + sse_event(b"{}"))
    assert [(e.data, e.id) for e in evs] == [('{"a":1}', "s1.2"), ("{}", "s1.2")]
    assert p.retry == 500


def test_memory_store_replays_one_stream_only_and_is_bounded() -> None:
    async def go() -> None:
        st = MemoryEventStore(max_events_per_stream=3, max_streams=2)
        a1 = await st.store("S", "a", None)
        await st.store("S", "b", b"B1")
        a2 = await st.store("S", "a", b"A2")
        await st.store("S", "a", b"A3")
        await st.store("S", "b", b"B2")
        ids = {a1, a2}
        assert len(ids) == 2
        got = await st.replay_after("S", a1)
        assert got == ("a", [("a.3", b"A2"), ("a.4", b"A3")])
        assert await st.replay_after("T", a1) is None  # another session's id selects nothing
        assert await st.replay_after("S", "nope") is None
        for i in range(5):
            await st.store("S", "a", b"%d" % i)
        _, evs = await st.replay_after("S", a1) or ("", [])
        assert len(evs) == 3  # bounded per stream
        await st.store("S", "c", b"C")  # a third stream evicts the oldest
        assert len(st._streams) == 2
        await st.drop_session("S")
        assert await st.replay_after("S", a2) is None

    asyncio.run(go())


META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


def _check(obj: dict[str, object], **hdrs: str) -> HeaderProblem | None:
    try:
        check_modern_headers(obj.get("method"), obj.get("params"), "id" in obj, hdrs.pop("version", "2026-07-28"),  # type: ignore[arg-type]
                             ["2026-07-28"], {k.replace("_", "-").encode(): v.encode() for k, v in hdrs.items()})
    except HeaderProblem as p:
        return p
    return None


def test_modern_header_rules() -> None:
    req = {"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": "file:///ü x", "_meta": META}}
    ok = _check(req, mcp_method="resources/read", mcp_name=encode_header_value("file:///ü x"))
    assert ok is None
    assert encode_header_value("plain") == "plain" and encode_header_value(" pad").startswith("=?base64?")
    assert decode_header_value(encode_header_value("=?base64?x?=").encode()) == "=?base64?x?="
    p = _check(req, mcp_method="resources/read")
    assert p is not None and (p.status, p.code) == (400, -32020)
    p = _check(req, mcp_method="resources/read", mcp_name="=?base64?!!!?=")
    assert p is not None and p.code == -32020
    p = _check(req, mcp_method="resources/read", mcp_name=encode_header_value("file:///ü x"), version="2099-01-01")
    assert p is not None and p.code == -32022 and p.data == {"supported": ["2026-07-28"], "requested": "2099-01-01"}
    bare = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    p = _check(bare, mcp_method="tools/list")
    assert p is not None and (p.status, p.code) == (400, -32602)
    # notifications carry no header rules
    assert _check({"jsonrpc": "2.0", "method": "notifications/x"}) is None


def test_memory_store_is_bounded_in_bytes_per_session() -> None:
    async def go() -> None:
        st = MemoryEventStore(max_bytes_per_session=10_000)
        first = await st.store("S", "a", None)
        for i in range(30):  # 30 KB over three streams: the oldest events go first
            await st.store("S", "abc"[i % 3], b"%04d" % i + b"x" * 996)
        assert st.bytes_kept("S") == 10_000
        found = await st.replay_after("S", first)
        assert found is not None and found[0] == "a"
        assert [d[:4] for _, d in found[1]] == [b"0021", b"0024", b"0027"]  # the newest ten of all are kept
        await st.store("T", "a", b"y" * 5000)  # another session's bound is its own
        assert st.bytes_kept("T") == 5000 and st.bytes_kept("S") >= 9_000
        await st.drop_session("S")
        assert st.bytes_kept("S") == 0 and await st.replay_after("S", first) is None

    asyncio.run(go())


def test_a_finished_stream_is_dropped_after_the_replay_window() -> None:
    async def go() -> None:
        st = MemoryEventStore(replay_window=0.2)
        a0 = await st.store("S", "a", None)
        await st.store("S", "a", b"A1")
        b0 = await st.store("S", "b", None)
        await st.store("S", "b", b"B1")
        st.end_stream("S", "a")  # finished; "b" stays open
        assert await st.replay_after("S", a0) == ("a", [("a.2", b"A1")])  # still resumable within the window
        await asyncio.sleep(0.35)
        assert st.bytes_kept("S") == 2  # dropped by the timer alone: only B1 is left
        assert await st.replay_after("S", a0) is None
        assert await st.replay_after("S", b0) == ("b", [("b.4", b"B1")])
        st.end_stream("S", "b")
        st.end_stream("S", "b")  # twice, or for a stream never stored: nothing more happens
        st.end_stream("S", "nope")
        await asyncio.sleep(0.35)
        assert st.bytes_kept("S") == 0

    asyncio.run(go())


def test_stored_form_keeps_a_repeated_result_once_and_gives_back_the_same_bytes() -> None:
    import msgspec

    from sturdyrpc.mcp_http.events import Compacted, stored_form

    text = 'caf\u00e9 "quoted" \\ \u2028 ' * 500
    obj = {"rows": [{"id": i, "name": f"n{i}"} for i in range(300)]}
    cases = [
        {"content": [{"type": "text", "text": text}], "structuredContent": {"result": text}, "isError": False},
        {"content": [{"type": "text", "text": msgspec.json.encode(obj).decode()}], "structuredContent": obj, "isError": False},
        {"content": [{"type": "text", "text": msgspec.json.encode(obj["rows"]).decode()}],
         "structuredContent": {"result": obj["rows"]}, "isError": False},
    ]
    for result in cases:
        data = msgspec.json.encode({"jsonrpc": "2.0", "result": result, "id": 7})
        kept = stored_form(data)
        assert type(kept) is Compacted and len(kept) < 0.6 * len(data)
        assert kept.expand() == data and Compacted.from_bytes(kept.to_bytes()).expand() == data
    plain = msgspec.json.encode({"jsonrpc": "2.0", "result": {"content": [{"type": "text", "text": text}]}, "id": 7})
    assert stored_form(plain) is plain  # nothing repeated: kept as it is
    assert stored_form(b'{"structuredContent": ' + b"x" * 5000) == b'{"structuredContent": ' + b"x" * 5000  # not JSON


CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "q", "_meta": META}}
#: The ``Mcp-Param-*`` headers of tool ``q`` (SEP-2243), as ``MCPServer.param_headers`` gives them.
Q_HEADERS = {"mcp-param-region": ("region", "string"), "mcp-param-priority": ("priority", "integer"),
             "mcp-param-verbose": ("verbose", "boolean")}


def _call(arguments: dict[str, object], **hdrs: str) -> HeaderProblem | None:
    msg = {**CALL, "params": {**CALL["params"], "arguments": arguments}}  # type: ignore[dict-item]
    try:
        check_modern_headers("tools/call", msg["params"], True, "2026-07-28", ["2026-07-28"],
                             {b"mcp-method": b"tools/call", b"mcp-name": b"q",
                              **{k.replace("_", "-").encode(): v.encode() for k, v in hdrs.items()}},
                             lambda tool: Q_HEADERS if tool == "q" else {})
    except HeaderProblem as p:
        return p
    return None


@pytest.mark.parametrize(("arguments", "headers", "accepted"), [
    ({"region": "us-east1"}, {"mcp_param_region": "us-east1"}, True),
    ({"region": "us-east1"}, {"mcp_param_region": "  us-east1\t"}, True),  # RFC 9110: OWS is not the value
    ({"region": "Hello"}, {"mcp_param_region": "=?base64?SGVsbG8=?="}, True),
    ({"region": "Hello"}, {"mcp_param_region": "=?base64?SGVsbG8?="}, False),  # bad padding
    ({"region": "Hello"}, {"mcp_param_region": "=?base64?SGVs!!!bG8=?="}, False),  # not the alphabet
    ({"region": "SGVsbG8="}, {"mcp_param_region": "SGVsbG8="}, True),  # no sentinel: literal
    ({"region": "=?base64?SGVsbG8="}, {"mcp_param_region": "=?base64?SGVsbG8="}, True),  # no suffix: literal
    ({"region": "us-east1"}, {}, False),  # the value is in the body, the header is missing
    ({"region": "us-east1"}, {"mcp_param_region": "eu-west1"}, False),
    ({}, {"mcp_param_region": "eu-west1"}, False),  # a header for an argument the body lacks
    ({"region": None}, {}, True),  # null: no header
    ({"region": "r", "priority": 3, "verbose": True}, {"mcp_param_region": "r", "mcp_param_priority": "3", "mcp_param_verbose": "true"}, True),
    ({"region": "r", "priority": 3}, {"mcp_param_region": "r", "mcp_param_priority": "4"}, False),
    ({"region": "r", "verbose": False}, {"mcp_param_region": "r", "mcp_param_verbose": "False"}, False),
])
def test_mcp_param_headers_mirror_the_arguments(arguments: dict[str, object], headers: dict[str, str], accepted: bool) -> None:
    p = _call(arguments, **headers)
    assert (p is None) == accepted, p and p.message
    if p is not None:
        assert (p.status, p.code) == (400, -32020)


@pytest.mark.parametrize(("method", "field", "value"), [
    ("tools/call", "name", "echo"), ("prompts/get", "name", "greet"), ("resources/read", "uri", "test://x"),
    ("tasks/get", "taskId", "t1"), ("tasks/update", "taskId", "t1"), ("tasks/cancel", "taskId", "t1"),
])
def test_mcp_name_header_whitespace_accepted_mismatch_refused(method: str, field: str, value: str) -> None:
    req = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {field: value, "_meta": META}}
    assert _check(req, mcp_method=method, mcp_name=f"  {value}  ") is None
    assert _check(req, mcp_method=f" {method}", mcp_name=value) is None
    for wrong in ({"mcp_name": "other"}, {}):
        p = _check(req, mcp_method=method, **wrong)
        assert p is not None and (p.status, p.code) == (400, -32020)
