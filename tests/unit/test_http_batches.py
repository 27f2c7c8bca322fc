"""JSON-RPC batches over MCP Streamable HTTP (only on sessions negotiated at 2025-03-26).

MCP 2025-03-26 transports: a POST body may be an array of requests and/or notifications; a body
holding any request gets SSE or JSON carrying one response per request. JSON-RPC §6: the reply
to a batch is an array (even of one), each invalid element gets its own -32600 (id null), only
``[]`` is one -32600, notifications get nothing. In JSON mode the reply is that array; on SSE
each response is its own event (the responses "MAY be batched"; the official TypeScript SDK 1.x
client parses one message per event, so an array event would be rejected there).
Other versions have no batches: ONE -32600 (HTTP 400) and nothing runs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from sturdyrpc.demos.mcp import make_mcp_demo
from sturdyrpc.mcp_http import mcp_http_app
from sturdyrpc.mcp_http.server import StreamableHTTPApp
from sturdyrpc.mcp_http.sse import SSEParser

pytestmark = pytest.mark.timeout(60)

ACCEPT = "application/json, text/event-stream"
V = "2025-03-26"
NULL_INVALID = {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": None}
MODES = {"sse": {}, "json": {"json_response": True}}


def req(id_: Any, method: str = "ping", params: dict[str, Any] | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        m["params"] = params
    return m


def bump(id_: Any) -> dict[str, Any]:
    return req(id_, "tools/call", {"name": "bump", "arguments": {}})


NOTE = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}


def make_app(**options: Any) -> tuple[StreamableHTTPApp, list[int]]:
    """The demo server plus ``bump``, a tool that counts its calls (to see what ran)."""
    server = make_mcp_demo()
    calls: list[int] = []

    @server.tool()
    async def bump() -> str:
        """Count one call."""
        calls.append(1)
        return str(len(calls))

    return mcp_http_app(server, path="/mcp", **options), calls


def run(app: StreamableHTTPApp, body: Callable[[httpx.AsyncClient], Awaitable[None]]) -> None:
    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as c:
            try:
                await body(c)
            finally:
                await app.aclose()

    asyncio.run(go())


async def open_session(c: httpx.AsyncClient, version: str = V) -> dict[str, str]:
    init = req(0, "initialize", {"protocolVersion": version, "capabilities": {},
                                 "clientInfo": {"name": "t", "version": "1"}})
    r = await c.post("/mcp", json=init, headers={"accept": ACCEPT})
    assert r.status_code == 200, r.text
    h = {"accept": ACCEPT, "mcp-session-id": r.headers["mcp-session-id"]}
    if version != V:
        h["mcp-protocol-version"] = version
    r = await c.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)
    assert r.status_code == 202
    return h


async def post(c: httpx.AsyncClient, h: dict[str, str], body: Any) -> httpx.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {**h, "content-type": "application/json"}
    # a batch that is never answered hangs the client: fail instead of waiting forever
    return await asyncio.wait_for(c.post("/mcp", content=data, headers=headers), 5)


def batch_reply(r: httpx.Response) -> list[Any]:
    """The responses of a batch reply: the JSON array, or the SSE events (one message each)."""
    assert r.status_code == 200, (r.status_code, r.text)
    ctype = r.headers["content-type"].split(";")[0]
    if ctype == "application/json":
        out = r.json()
        assert type(out) is list, f"a batch is answered with an array, got {r.text}"
        return out
    assert ctype == "text/event-stream"
    msgs = [json.loads(ev.data) for ev in SSEParser().feed(r.content)]
    assert all(type(m) is dict for m in msgs), "an SSE event carries one message (what the TypeScript SDK 1.x parses)"
    return msgs


def by_id(msgs: list[Any]) -> dict[Any, Any]:
    return {m["id"]: m for m in msgs if m.get("id") is not None}


@pytest.mark.parametrize("mode", list(MODES))
def test_batch_of_one_request_is_answered_with_an_array_of_one(mode: str) -> None:
    app, calls = make_app(**MODES[mode])

    async def body(c: httpx.AsyncClient) -> None:
        h = await open_session(c)
        for one in (req(1), bump(2)):  # an inline handler, and one that runs as a task
            msgs = batch_reply(await post(c, h, [one]))
            assert len(msgs) == 1 and msgs[0]["id"] == one["id"] and "result" in msgs[0], msgs
        # with notifications beside it: still only the request's response
        msgs = batch_reply(await post(c, h, [NOTE, bump(3), NOTE]))
        assert [m["id"] for m in msgs] == [3] and msgs[0]["result"]["content"][0]["text"] == "2"
        # a batch of only notifications: 202, no body
        r = await post(c, h, [NOTE])
        assert r.status_code == 202 and r.content == b""
        r = await post(c, h, [NOTE, NOTE])
        assert r.status_code == 202 and r.content == b""
        assert len(calls) == 2

    run(app, body)


def test_batch_of_one_request_on_a_stateless_app() -> None:
    app, calls = make_app(stateless=True, json_response=True)

    async def body(c: httpx.AsyncClient) -> None:
        msgs = batch_reply(await post(c, {"accept": ACCEPT}, [bump(1)]))
        assert len(msgs) == 1 and msgs[0]["id"] == 1 and "result" in msgs[0]
        assert calls == [1]

    run(app, body)


@pytest.mark.parametrize("mode", list(MODES))
def test_each_invalid_element_gets_its_own_32600(mode: str) -> None:
    app, calls = make_app(**MODES[mode])

    async def body(c: httpx.AsyncClient) -> None:
        h = await open_session(c)
        assert batch_reply(await post(c, h, b"[1]")) == [NULL_INVALID]
        assert batch_reply(await post(c, h, b"[1,2,3]")) == [NULL_INVALID] * 3
        # invalid elements beside notifications only: still an array of the errors
        assert batch_reply(await post(c, h, [NOTE, "x", NOTE])) == [NULL_INVALID]
        # only the empty array is ONE -32600 (400 on HTTP)
        r = await post(c, h, b"[]")
        assert r.status_code == 400 and r.json()["error"]["code"] == -32600
        assert calls == []

    run(app, body)


@pytest.mark.parametrize("mode", list(MODES))
def test_mixed_batch_answers_requests_and_invalid_elements(mode: str) -> None:
    app, calls = make_app(**MODES[mode])

    async def body(c: httpx.AsyncClient) -> None:
        h = await open_session(c)
        batch = [req("b-1"), NOTE, {"foo": "boo"}, bump("b-2"), req(None), req("b-3", "no/such-method"), 5]
        msgs = batch_reply(await post(c, h, batch))
        assert len(msgs) == 6, msgs
        got = by_id(msgs)
        assert got["b-1"]["result"] == {}
        assert got["b-2"]["result"]["content"][0]["text"] == "1"
        assert got["b-3"]["error"]["code"] == -32601
        assert [m for m in msgs if m.get("id") is None] == [NULL_INVALID] * 3
        assert calls == [1]
        # a request id used twice in one batch: the second gets -32600 and does not run
        msgs = batch_reply(await post(c, h, [req(7), bump(7)]))
        assert sorted(("error" in m, m["id"]) for m in msgs) == [(False, 7), (True, 7)], msgs
        assert [m["error"]["code"] for m in msgs if "error" in m] == [-32600]
        assert calls == [1]
        # initialize is never part of a batch: refused, nothing runs
        init = req(9, "initialize", {"protocolVersion": V, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}})
        r = await post(c, h, [bump(10), init])
        assert r.status_code == 400 and r.json()["error"]["code"] == -32600
        r = await post(c, {"accept": ACCEPT}, [init])
        assert r.status_code == 400 and "mcp-session-id" not in r.headers
        assert calls == [1]

    run(app, body)


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
def test_batches_refused_on_other_versions_and_nothing_runs(version: str) -> None:
    app, calls = make_app()

    async def body(c: httpx.AsyncClient) -> None:
        old = await open_session(c)  # the same batch IS served on 2025-03-26
        assert len(batch_reply(await post(c, old, [bump(1), 1]))) == 2
        assert calls == [1]
        h = await open_session(c, version)
        for batch in ([bump(1), 1], [bump(2)], [NOTE], b"[1]"):
            r = await post(c, h, batch)
            assert r.status_code == 400, (batch, r.text)
            err = r.json()
            assert type(err) is dict and err["error"]["code"] == -32600
        assert calls == [1]

    run(app, body)
