"""Regressions from the MCP protocol review: one test per finding, each failing on the code before its fix.

Every message the server writes in these tests is validated against the official schema of the
negotiated version (except the unreadable-id errors of the old schemas, which cannot express them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from support.http import demo_http_cmd, free_port, server_process
from support.mcp import VERSIONS, Wire, modern_meta

from sturdyrpc.demos.mcp import make_mcp_demo

pytestmark = pytest.mark.timeout(60)

ACCEPT = "application/json, text/event-stream"


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _open(version: str) -> Wire:
    w = Wire(make_mcp_demo())
    await w.__aenter__()
    if version != "2026-07-28":
        r = await w.initialize(version)
        assert r["result"]["protocolVersion"] == version
    return w


def _params(version: str, params: dict[str, Any]) -> dict[str, Any]:
    if version == "2026-07-28":
        return {**params, "_meta": {**params.get("_meta", {}), **modern_meta()}}
    return params


@pytest.mark.parametrize("version", VERSIONS)
def test_notification_method_sent_as_request_is_method_not_found(version: str) -> None:
    """A request (with an id) named like a notification got ``result: null``: results are objects."""

    async def main() -> None:
        w = await _open(version)
        try:
            for i, method in enumerate(["notifications/cancelled", "notifications/initialized", "notifications/roots/list_changed"]):
                r = await w.call(method, _params(version, {"requestId": 99}), id=100 + i)
                assert "result" not in r and r["error"]["code"] == -32601, r
            assert (await w.call("ping" if version != "2026-07-28" else "tools/list", _params(version, {}), id=7)).get("result") is not None
            w.validate(version)
        finally:
            await w.__aexit__(None, None, None)

    _run(main())


def test_audio_content_is_not_sent_on_2024_11_05() -> None:
    """2024-11-05 has no audio content: a tool returning audio must still give a schema-valid result."""

    async def main() -> None:
        for version, kind in (("2024-11-05", "text"), ("2025-03-26", "audio")):
            w = await _open(version)
            try:
                r = await w.call("tools/call", {"name": "test_audio_content", "arguments": {}}, id=1)
                assert [b["type"] for b in r["result"]["content"]] == [kind], r
                w.validate(version)
            finally:
                await w.__aexit__(None, None, None)

    _run(main())


@pytest.mark.parametrize("version", ["2025-06-18", "2026-07-28"])
def test_completion_of_unknown_prompt_or_bad_ref_is_invalid_params(version: str) -> None:
    """completion/complete for a prompt that does not exist (or a bad ref/argument) answered values; the spec says -32602."""

    async def main() -> None:
        w = await _open(version)
        try:
            bad = [
                {"ref": {"type": "ref/prompt", "name": "no_such_prompt"}, "argument": {"name": "arg1", "value": "p"}},
                {"ref": {"type": "ref/resource", "uri": "test://nowhere/{x}"}, "argument": {"name": "x", "value": ""}},
                {"ref": {"type": "ref/bogus", "name": "x"}, "argument": {"name": "arg1", "value": "p"}},
                {"ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"}, "argument": {"name": "arg1"}},
            ]
            for i, p in enumerate(bad):
                r = await w.call("completion/complete", _params(version, p), id=10 + i)
                assert r.get("error", {}).get("code") == -32602, r
            ok = {"ref": {"type": "ref/resource", "uri": "test://template/{id}/data"}, "argument": {"name": "id", "value": ""}}
            r = await w.call("completion/complete", _params(version, ok), id=20)
            assert "completion" in r["result"]
            ok = {"ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"}, "argument": {"name": "arg1", "value": "pa"}}
            r = await w.call("completion/complete", _params(version, ok), id=21)
            assert r["result"]["completion"]["values"] == ["paris", "park", "party"]
            w.validate(version)
        finally:
            await w.__aexit__(None, None, None)

    _run(main())


def test_modern_request_missing_protocol_version_on_fresh_connection_is_invalid_params() -> None:
    """2026-07-28: ``_meta`` with client capabilities but no protocol version is -32602, not a "not initialized" -32600."""

    async def main() -> None:
        w = Wire(make_mcp_demo())
        async with w:
            meta = {"io.modelcontextprotocol/clientCapabilities": {}, "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"}}
            r = await w.call("tools/list", {"_meta": meta}, id=1)
            assert r["error"]["code"] == -32602, r
            r = await w.call("tools/list", {"_meta": modern_meta()}, id=2)
            assert r["result"]["resultType"] == "complete"
            w.validate("2026-07-28")

    _run(main())


def test_batch_with_duplicate_ids_refuses_the_duplicate_on_2025_03_26() -> None:
    """Two requests with one id in one batch both ran; an id equal to one in flight is refused with -32600."""

    async def main() -> None:
        w = await _open("2025-03-26")
        try:
            await w.send([{"jsonrpc": "2.0", "id": 5, "method": "ping"}, {"jsonrpc": "2.0", "id": 5, "method": "ping"},
                          {"jsonrpc": "2.0", "id": 6, "method": "ping"}])
            reply = await w.recv()
            assert isinstance(reply, list) and len(reply) == 3, reply
            assert sum(1 for m in reply if "result" in m) == 2
            errs = [m for m in reply if "error" in m]
            assert len(errs) == 1 and errs[0]["error"]["code"] == -32600 and errs[0]["id"] == 5
            # a batch element with the id of a request still running is refused too, the first untouched
            slow = {"name": "slow", "arguments": {"seconds": 0.3, "steps": 1}}
            await w.send({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": slow})
            await asyncio.sleep(0.05)
            await w.send([{"jsonrpc": "2.0", "id": 9, "method": "ping"}, {"jsonrpc": "2.0", "id": 10, "method": "ping"}])
            got = [await w.recv(), await w.recv()]
            batch = next(m for m in got if isinstance(m, list))
            assert {m["id"]: ("error" in m) for m in batch} == {9: True, 10: False}
            single = next(m for m in got if isinstance(m, dict))
            assert single["id"] == 9 and single["result"]["isError"] is False
            w.validate("2025-03-26")
        finally:
            await w.__aexit__(None, None, None)

    _run(main())


# ----------------------------------------------------------------------------- Streamable HTTP


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    port = free_port()
    with server_process(demo_http_cmd(port, mcp=True), port):
        yield f"http://127.0.0.1:{port}/mcp"


def test_http_delete_with_modern_version_header_is_405(url: str) -> None:
    """2026-07-28 has no sessions: DELETE (like GET) with that version header is 405, not 400."""
    with httpx.Client(timeout=10) as c:
        r = c.delete(url, headers={"mcp-protocol-version": "2026-07-28"})
        assert r.status_code == 405 and "POST" in r.headers.get("allow", "")
        r = c.get(url, headers={"mcp-protocol-version": "2026-07-28", "accept": "text/event-stream"})
        assert r.status_code == 405


def test_http_modern_request_without_version_header_is_header_mismatch(url: str) -> None:
    """A request whose ``_meta`` says 2026-07-28 but without ``MCP-Protocol-Version`` is 400 + -32020 (header missing)."""
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": modern_meta()}}
    with httpx.Client(timeout=10) as c:
        r = c.post(url, json=body, headers={"accept": ACCEPT, "mcp-method": "tools/list"})
        assert r.status_code == 400
        assert r.json()["error"]["code"] == -32020 and r.json()["id"] == 3
        r = c.post(url, json=body, headers={"accept": ACCEPT, "mcp-method": "tools/list", "mcp-protocol-version": "2026-07-28"})
        assert r.status_code == 200 and r.json()["result"]["resultType"] == "complete"


def test_http_json_reply_request_progress_not_delivered_after_the_reply(url: str) -> None:
    """A request answered with application/json had its progress held for the GET stream, so it
    arrived there after the reply (progress MUST stop once the request completes)."""
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    with httpx.Client(timeout=10) as c:
        r = c.post(url, json=init, headers={"accept": ACCEPT})
        h = {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        assert c.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers={**h, "accept": ACCEPT}).status_code == 202
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "slow", "arguments": {"seconds": 0.1, "steps": 3}, "_meta": {"progressToken": "jp"}}}
        r = c.post(url, json=body, headers={**h, "accept": "application/json"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
        assert r.json()["id"] == 1 and r.json()["result"]["isError"] is False
        seen = b""
        try:
            with c.stream("GET", url, headers={**h, "accept": "text/event-stream"}, timeout=httpx.Timeout(10, read=0.7)) as g:
                assert g.status_code == 200
                for chunk in g.iter_bytes():
                    seen += chunk
        except httpx.ReadTimeout:
            pass
        assert b"notifications/progress" not in seen, seen


def test_modern_ping_on_fresh_connection_is_method_not_found() -> None:
    """``ping`` is removed in 2026-07-28: one carrying the 2026-07-28 ``_meta`` was answered ``{}`` when it
    came first on a connection; a plain ping before ``initialize`` is still answered (handshake era)."""

    async def main() -> None:
        w = Wire(make_mcp_demo())
        async with w:
            r = await w.call("ping", {"_meta": modern_meta()}, id=1)
            assert r.get("error", {}).get("code") == -32601, r
            r = await w.call("ping", None, id=2)
            assert r["result"] == {}
            r = await w.initialize("2025-11-25")
            assert r["result"]["protocolVersion"] == "2025-11-25"
            w.validate("2025-11-25")

    _run(main())
