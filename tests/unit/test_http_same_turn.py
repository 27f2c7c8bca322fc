"""Streamable HTTP replies ready on the POST's own turn: a session's ``tools/call`` of an inline
tool (the runner answers it before the POST's feeding returns) and 2026-07-28 requests answered
without a task (``MCPServer.serve_stateless`` done at once), and what must hold for them: the same
replies as the task plan gives, no priming event or event ids for a reply sent whole at once
(resumability kept for streams that stay open), 409 for an id in flight, the server-wide slots
given back, error results, HTTP statuses.

The apps run in-process under httpx's ASGI transport (real app, server and sessions, no sockets).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from support.http import open_session

from sturdyrpc.mcp import MCPServer, ToolError
from sturdyrpc.mcp_http import StreamableHTTPApp, mcp_http_app
from sturdyrpc.mcp_http.events import MemoryEventStore
from sturdyrpc.mcp_http.modern import decode_header_value
from sturdyrpc.mcp_http.session import close_current_stream
from sturdyrpc.mcp_http.sse import SSEParser
from sturdyrpc.request_context import current_headers

pytestmark = pytest.mark.timeout(60)

ACCEPT = "application/json, text/event-stream"
BASE = "http://127.0.0.1:8000"
MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}


def make_server(inline: bool = True) -> MCPServer:
    """``inline=False``: the same sync tools run as tasks (on the pool), not on the POST's turn."""
    server = MCPServer("same-turn-test", "1.0")

    @server.tool(blocking=not inline)
    def echo(text: str) -> str:
        """Inline: answered on the POST's turn."""
        return text

    @server.tool(blocking=not inline)
    def boom() -> str:
        """Inline, and fails."""
        raise ToolError("it broke")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Not inline: the session's peer runs it."""
        await asyncio.sleep(seconds)
        return "slept"

    return server


def client(app: StreamableHTTPApp) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE, timeout=20)


def call(id_: Any, name: str, **args: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": name, "arguments": args}}


def events(r: httpx.Response) -> list[tuple[str | None, str]]:
    """(id, data) of every event, the priming event (empty data) included."""
    out = []
    for block in r.content.decode().split("\n\n"):
        if not block.strip():
            continue
        fields = dict(line.split(": ", 1) if ": " in line else (line.rstrip(":"), "") for line in block.split("\n"))
        out.append((fields.get("id"), fields.get("data", "")))
    return out


def test_a_reply_ready_on_the_posts_turn_is_one_whole_body_without_event_ids_or_store_writes() -> None:
    store = MemoryEventStore()
    app = mcp_http_app(make_server(), event_store=store)

    async def go() -> None:
        async with client(app) as c:
            h = await open_session(c)
            stored = len(store._streams)
            r = await c.post("/mcp", json=call(7, "echo", text="hi"), headers=h)
            assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
            assert r.headers["mcp-session-id"] == h["mcp-session-id"]
            # complete at once: sent with its length, not chunked
            assert int(r.headers["content-length"]) == len(r.content)
            # nothing to resume: no priming event, no event id, nothing recorded
            assert events(r) == [(None, events(r)[0][1])]
            assert r.content.startswith(b"event: message\ndata: ")
            # what only a stream that stays open needs is left out, as for a JSON reply
            assert "cache-control" not in r.headers and "x-accel-buffering" not in r.headers
            msg = json.loads(events(r)[0][1])
            assert msg["id"] == 7 and msg["result"]["content"][0]["text"] == "hi"
            assert len(store._streams) == stored
            assert app.admission.in_use == 0  # the request's server-wide slot came back
            # answered on its own turn, it never had a stream: nothing of it is left in the session
            session = app.sessions[h["mcp-session-id"]]
            assert session.streams == {} and not session.key_in_flight((int, 7))
            await app.aclose()

    asyncio.run(go())


def test_stream_that_stays_open_keeps_priming_event_ids_and_resumption() -> None:
    """Beside replies ready at once on the same session: a request that is not answered at once
    gets the priming event, event ids and the store, and resumes after its response was closed
    mid-call."""
    server = make_server()

    @server.tool()
    async def poll() -> str:
        assert close_current_stream()  # SEP-1699 polling: the client comes back with Last-Event-ID
        await asyncio.sleep(0.1)
        return "done"

    store = MemoryEventStore()
    app = mcp_http_app(server, event_store=store)

    async def go() -> None:
        async with client(app) as c:
            h = await open_session(c)
            assert events(await c.post("/mcp", json=call(1, "echo", text="x"), headers=h))[0][0] is None
            r = await c.post("/mcp", json=call(2, "slow", seconds=0.01), headers=h)
            assert r.headers["x-accel-buffering"] == "no"  # a stream that stays open
            evs = events(r)
            assert len(evs) == 2 and evs[0][0] and evs[0][1] == "" and evs[1][0] and evs[1][0] != evs[0][0]
            assert json.loads(evs[1][1])["id"] == 2
            r = await c.post("/mcp", json=call(3, "poll"), headers=h)
            evs = events(r)
            assert len(evs) == 1 and evs[0][0] and evs[0][1] == ""  # only the priming event, then closed
            g = await c.get("/mcp", headers={**h, "last-event-id": evs[0][0]})
            assert g.status_code == 200
            replay = [json.loads(e.data) for e in SSEParser().feed(g.content)]
            assert [m["id"] for m in replay] == [3] and replay[0]["result"]["content"][0]["text"] == "done"
            # a reply ready at once after it still records nothing; a stream that stays open does
            before = len(store._streams)
            await c.post("/mcp", json=call(4, "echo", text="y"), headers=h)
            assert len(store._streams) == before
            r = await c.post("/mcp", json=call(5, "slow", seconds=0.01), headers=h)
            assert events(r)[0][0] and events(r)[0][1] == ""
            assert len(store._streams) == before + 1
            assert app.admission.in_use == 0
            await app.aclose()

    asyncio.run(go())


@pytest.mark.parametrize("json_response", [False, True], ids=["sse", "json"])
def test_replies_ready_at_once_are_the_replies_of_the_task_plan(json_response: bool) -> None:
    inline_app = mcp_http_app(make_server(), json_response=json_response)
    task_app = mcp_http_app(make_server(inline=False), json_response=json_response)

    async def go() -> None:
        async with client(inline_app) as a, client(task_app) as b:
            ha, hb = await open_session(a), await open_session(b)
            bodies = [call(1, "echo", text='a"\u2028b'), call(2, "boom"), call(3, "echo"), call(4, "nope", x=1),
                      {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "echo", "arguments": [1]}}]
            at_once = [await a.post("/mcp", json=m, headers=ha) for m in bodies]
            tasks = [await b.post("/mcp", json=m, headers=hb) for m in bodies]
            for x, y in zip(at_once, tasks, strict=True):
                assert x.status_code == y.status_code == 200
                if json_response:
                    assert x.content == y.content
                else:
                    # the same reply event; the task's stream stays open, so it is primed and has ids
                    assert [d for _, d in events(y) if d] == [d for _, d in events(x) if d]
                    if events(x)[0][0] is None:  # answered at once: one whole event, nothing else
                        assert x.content == b"event: message\ndata: " + events(y)[-1][1].encode() + b"\n\n"
            assert sum(events(x)[0][0] is None for x in at_once) >= 3 or json_response
            boom = json.loads(events(at_once[1])[-1][1] if not json_response else at_once[1].content)
            assert boom["result"]["isError"] is True and boom["result"]["content"][0]["text"] == "it broke"
            assert inline_app.admission.in_use == task_app.admission.in_use == 0
            await inline_app.aclose()
            await task_app.aclose()

    asyncio.run(go())


def test_an_id_in_flight_is_refused_and_served_once_free() -> None:
    app = mcp_http_app(make_server(), json_response=True)

    async def go() -> None:
        async with client(app) as c:
            h = await open_session(c)
            slow = asyncio.ensure_future(c.post("/mcp", json=call(5, "slow", seconds=0.3), headers=h))
            await asyncio.sleep(0.1)
            r = await c.post("/mcp", json=call(5, "echo", text="x"), headers=h)
            assert r.status_code == 409
            assert (await slow).json()["result"]["content"][0]["text"] == "slept"
            r = await c.post("/mcp", json=call(5, "echo", text="x"), headers=h)
            assert r.status_code == 200 and r.json()["id"] == 5
            await app.aclose()

    asyncio.run(go())


def test_a_reply_ready_at_once_on_2025_03_26_has_no_priming_event() -> None:
    app = mcp_http_app(make_server())

    async def go() -> None:
        async with client(app) as c:
            h = await open_session(c, "2025-03-26")
            r = await c.post("/mcp", json=call(1, "echo", text="x"), headers=h)
            evs = events(r)
            assert len(evs) == 1 and evs[0][0] is None and json.loads(evs[0][1])["id"] == 1
            await app.aclose()

    asyncio.run(go())


def test_serve_stateless_is_done_at_once_for_an_inline_tool_and_awaited_otherwise() -> None:
    from sturdyrpc.envelope import read
    from sturdyrpc.limits import DEFAULT_LIMITS

    server = make_server()

    async def related(data: bytes) -> None:
        return None

    def body(id_: Any, name: str, **args: Any) -> bytes:
        return json.dumps({"jsonrpc": "2.0", "id": id_, "method": "tools/call",
                           "params": {"name": name, "arguments": args, "_meta": META}}).encode()

    async def go() -> None:
        now = server.serve_stateless(read(body(1, "echo", text="hi"), DEFAULT_LIMITS), related)
        assert now.done and now.task is None and type(now.value) is bytes
        assert now.value == await server.handle_stateless(body(1, "echo", text="hi"), related)
        later = server.serve_stateless(read(body(2, "slow", seconds=0.01), DEFAULT_LIMITS), related)
        assert not later.done and later.task is not None
        assert json.loads(await later.wait() or b"")["result"]["content"][0]["text"] == "slept"
        note = json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                           "params": {"requestId": 9, "_meta": META}}).encode()
        done = server.serve_stateless(read(note, DEFAULT_LIMITS), related)
        assert done.done and done.value is None

    asyncio.run(go())


def test_modern_http_answers_ready_replies_with_the_right_status() -> None:
    app = mcp_http_app(make_server())
    h = {"accept": ACCEPT, "mcp-protocol-version": MODERN}

    def req(id_: Any, method: str, **params: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": id_, "method": method, "params": {**params, "_meta": META}}

    async def go() -> None:
        async with client(app) as c:
            r = await c.post("/mcp", json=req(1, "tools/call", name="echo", arguments={"text": "hi"}),
                             headers={**h, "mcp-method": "tools/call", "mcp-name": "echo"})
            assert r.status_code == 200 and r.json()["result"]["content"][0]["text"] == "hi"
            assert int(r.headers["content-length"]) == len(r.content)
            r = await c.post("/mcp", json=req(2, "no/such"), headers={**h, "mcp-method": "no/such"})
            assert r.status_code == 404 and r.json()["error"]["code"] == -32601
            r = await c.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/cancelled",
                                           "params": {"requestId": 3, "_meta": META}}, headers=h)
            assert r.status_code == 202 and r.content == b""
            r = await c.post("/mcp", json=req(4, "tools/call", name="slow", arguments={"seconds": 0.05}),
                             headers={**h, "mcp-method": "tools/call", "mcp-name": "slow"})
            assert r.status_code == 200 and "slept" in r.text
            # a header that disagrees with the body is still refused on the quick path
            r = await c.post("/mcp", json=req(5, "tools/call", name="echo", arguments={"text": "hi"}),
                             headers={**h, "mcp-method": "tools/call", "mcp-name": "other"})
            assert r.status_code == 400 and r.json()["error"]["code"] == -32020
            assert app.admission.in_use == 0
            await app.aclose()

    asyncio.run(go())


def test_memory_event_store_bounds_per_stream_and_overall() -> None:
    async def go() -> None:
        store = MemoryEventStore(max_events_per_stream=3, max_streams=2)
        first = await store.store("S", "s1", None)
        ids = [await store.store("S", "s1", b"%d" % i) for i in range(5)]
        found = await store.replay_after("S", first)
        assert found is not None and found[0] == "s1"
        assert found[1] == [(i, b"%d" % n) for i, n in zip(ids[2:], range(2, 5), strict=True)]  # only the last 3 kept
        other = await store.store("S", "s2", b"x")
        assert (await store.replay_after("S", other)) == ("s2", [])
        await store.store("S", "s3", b"y")  # a third stream: the oldest (s1) is forgotten
        assert await store.replay_after("S", first) is None
        await store.drop_session("S")
        assert await store.replay_after("S", other) is None

    asyncio.run(go())


@pytest.mark.parametrize("raw", [b"a\x01b", b"a\x7fb", b"a\nb", b"a\rb", b"\x00"])
def test_header_values_with_control_characters_are_malformed(raw: bytes) -> None:
    with pytest.raises(ValueError):
        decode_header_value(raw)


def test_header_values_with_tabs_and_base64_decode() -> None:
    assert decode_header_value(b"a\tb") == "a\tb"
    assert decode_header_value(b"=?base64?aMOp?=") == "h\u00e9"


@pytest.mark.parametrize("sync", [True, False], ids=["raises-at-once", "raises-in-task"])
def test_a_modern_handler_that_fails_gets_internal_error_either_way(sync: bool) -> None:
    def no_sessions(session: Any) -> Any:
        raise AssertionError("no sessions here")

    class Broken:
        done = False

        async def wait(self) -> bytes | None:
            raise RuntimeError("bug")

        def cancel(self) -> None:
            return None

    def broken(got: Any, emit: Any) -> Any:
        if sync:
            raise RuntimeError("bug")
        return Broken()

    app = StreamableHTTPApp(no_sessions, modern=broken)

    async def go() -> None:
        async with client(app) as c:
            r = await c.post("/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": META}},
                             headers={"accept": ACCEPT, "mcp-protocol-version": MODERN, "mcp-method": "tools/list"})
            assert r.status_code == 200
            assert r.json() == {"jsonrpc": "2.0", "id": 3, "error": {"code": -32603, "message": "Internal error"}}
            assert app.admission.in_use == 0
            await app.aclose()

    asyncio.run(go())


def test_modern_requests_are_read_once_and_answer_as_handle_stateless_does(monkeypatch: Any) -> None:
    """The app reads each 2026-07-28 body once and hands what it read to the server: the replies
    are byte for byte those of ``handle_stateless`` reading the body itself; a body the app read
    to a depth the dispatcher does not allow is still refused by the dispatcher's limit; the
    handler's ``ctx.headers`` (decoded on first use) still sees the request's headers."""
    from sturdyrpc import envelope
    from sturdyrpc.mcp_http import server as http_server

    server = make_server()
    seen: dict[str, Any] = {}

    @server.tool(blocking=False)
    def hdr() -> str:
        h = current_headers.get()
        assert h is not None
        seen["h"] = dict(h)
        seen["x"] = h.get("x-custom"), h["mcp-name"], "x-custom" in h, len(h) == len(seen["h"])
        return "ok"

    app = mcp_http_app(server)
    reads: list[bytes] = []
    real_read = envelope.read

    def counting(data: bytes, limits: Any) -> Any:
        reads.append(data)
        return real_read(data, limits)

    async def related(data: bytes) -> None:
        return None

    def body(id_: Any, name: str, args: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": name, "arguments": args, "_meta": META}}

    cases = [body(1, "echo", {"text": 'a"\u2028b'}), body(2, "boom", {}), body(3, "nope", {"x": 1}), body(4, "echo", [1]),
             body(5, "echo", {"text": {"a": [[[[1]]]]}}), body(6, "slow", {"seconds": 0})]

    async def go() -> None:
        async with client(app) as c:
            for b in cases:
                raw = json.dumps(b).encode()
                h = {"accept": ACCEPT, "content-type": "application/json", "mcp-protocol-version": MODERN,
                     "mcp-method": "tools/call", "mcp-name": b["params"]["name"]}
                monkeypatch.setattr(http_server, "read", counting)
                reads.clear()
                r = await c.post("/mcp", content=raw, headers=h)
                assert reads == [raw]
                monkeypatch.undo()
                assert r.content == await server.handle_stateless(raw, related), b
            h = {"accept": ACCEPT, "mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": "hdr",
                 "x-custom": "v1"}
            r = await c.post("/mcp", json=body(8, "hdr", {}), headers=[*h.items(), ("X-Custom", "v2")])
            assert r.json()["result"]["content"][0]["text"] == "ok"
            assert seen["x"] == ("v1, v2", "hdr", True, True) and seen["h"]["mcp-protocol-version"] == MODERN
            await app.aclose()

    asyncio.run(go())
