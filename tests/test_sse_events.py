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
