"""``sturdyrpc guard --url URL --http HOST:PORT`` checks SEP-2243 ``Mcp-Param-*`` headers.

The upstream (tests/servers/guard_param_upstream.py, a subprocess on 127.0.0.1) does NOT check
them; its ``seen`` tool says how many calls of each tool reached it. Guard (a subprocess too)
learns each tool's headers from the 2026-07-28 ``tools/list`` results it passes on (every page:
the annotated ``route`` is on the second) and answers a 2026-07-28 ``tools/call`` whose headers
are missing, malformed or disagree with the arguments with 400 / -32020 itself: such a call never
reaches the upstream. A tool guard has not seen listed is not checked.
"""

from __future__ import annotations

import http.client
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from support import SERVERS
from support.http import ACCEPT, free_port, server_process

from sturdyrpc.mcp_http.modern import encode_header_value

PY = sys.executable
MODERN = "2026-07-28"

pytestmark = pytest.mark.timeout(120)


@contextmanager
def param_upstream(*extra: str) -> Iterator[str]:
    """The upstream that does not check ``Mcp-Param-*`` headers (``--check``: that does); its MCP URL."""
    port = free_port()
    with server_process([PY, str(SERVERS / "guard_param_upstream.py"), str(port), *extra], port):
        yield f"http://127.0.0.1:{port}/mcp"


@contextmanager
def guard_in_front(up: str, *extra: str) -> Iterator[str]:
    """A new guard (an empty table) in front of ``up``; its URL."""
    port = free_port()
    with server_process([PY, "-m", "sturdyrpc", "guard", "--url", up, "--http", f"127.0.0.1:{port}", *extra], port):
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with param_upstream() as up:
        yield up


@pytest.fixture(scope="module")
def listed(upstream: str) -> Iterator[str]:
    """A guard that has passed every page of the upstream's tools/list on."""
    with guard_in_front(upstream) as url:
        names = list_tools(url)
        assert {"seen", "echo", "route", "broken"} <= set(names), names
        yield url


def modern_headers(method: str, name: str | None = None) -> dict[str, str]:
    h = {"content-type": "application/json", "accept": ACCEPT, "mcp-protocol-version": MODERN, "mcp-method": method}
    if name is not None:
        h["mcp-name"] = name
    return h


def modern_body(method: str, params: dict[str, Any], id_: int = 1) -> bytes:
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": {**params, "_meta": meta}}).encode()


def reply_of(r: httpx.Response) -> dict[str, Any]:
    if r.headers["content-type"].startswith("text/event-stream"):
        data = [line[5:] for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()]
        return dict(json.loads(data[-1]))
    return dict(r.json())


def post(url: str, method: str, params: dict[str, Any], extra: dict[str, str] | None = None) -> httpx.Response:
    name = params.get("name") if method == "tools/call" else None
    return httpx.post(url, content=modern_body(method, params), headers={**modern_headers(method, name), **(extra or {})}, timeout=20)


def list_tools(url: str) -> list[str]:
    """Every page of a 2026-07-28 tools/list through ``url``: the tools' names."""
    names: list[str] = []
    cursor: str | None = None
    for _ in range(10):
        r = post(url, "tools/list", {} if cursor is None else {"cursor": cursor})
        assert r.status_code == 200, r.text
        result = reply_of(r)["result"]
        names += [t["name"] for t in result["tools"]]
        cursor = result.get("nextCursor")
        if not cursor:
            return names
    raise AssertionError("tools/list pages do not end")


def list_tools_in_a_session(url: str) -> list[str]:
    """Every page of a tools/list in a 2025-11-25 session through ``url``: the tools' names."""
    h = {"content-type": "application/json", "accept": ACCEPT}
    r = httpx.post(url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}, headers=h, timeout=20)
    h |= {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    assert httpx.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h, timeout=20).status_code == 202
    names: list[str] = []
    params: dict[str, Any] = {}
    for i in range(1, 10):
        r = httpx.post(url, json={"jsonrpc": "2.0", "id": i, "method": "tools/list", "params": params}, headers=h, timeout=20)
        assert r.status_code == 200, r.text
        result = reply_of(r)["result"]
        names += [t["name"] for t in result["tools"]]
        if not result.get("nextCursor"):
            return names
        params = {"cursor": result["nextCursor"]}
    raise AssertionError("tools/list pages do not end")


def call(url: str, tool: str, arguments: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    return post(url, "tools/call", {"name": tool, "arguments": arguments}, headers)


def text_of(r: httpx.Response) -> str:
    assert r.status_code == 200, r.text
    return str(reply_of(r)["result"]["content"][0]["text"])


def seen(url: str, tool: str) -> int:
    """How many calls of ``tool`` reached the upstream (asked through guard)."""
    return int(text_of(call(url, "seen", {"tool": tool})))


ROUTE = {"region": "eu", "query": "q", "priority": 3, "verbose": True}
GOOD = {"mcp-param-region": "eu", "mcp-param-priority": "3", "mcp-param-verbose": "true"}


def test_a_correct_call_passes(listed: str) -> None:
    before = seen(listed, "route")
    assert text_of(call(listed, "route", ROUTE, GOOD)) == "region=eu priority=3 verbose=True query=q"
    # a value beyond plain ASCII comes base64-encoded; the names are case-insensitive; a null argument has no header
    zurich = {"region": "Zürich", "query": "q", "verbose": None}
    assert text_of(call(listed, "route", zurich, {"MCP-PARAM-REGION": encode_header_value("Zürich")})).startswith("region=Zürich")
    assert seen(listed, "route") == before + 2
    assert call(listed, "route", ROUTE).status_code == 400  # and guard does check this tool's headers
    assert seen(listed, "route") == before + 2


@pytest.mark.parametrize(("arguments", "headers", "message"), [
    (ROUTE, {**GOOD, "mcp-param-region": "us"}, "mcp-param-region header does not match the body"),
    (ROUTE, {k: v for k, v in GOOD.items() if k != "mcp-param-priority"}, "mcp-param-priority header is required"),
    (ROUTE, {**GOOD, "mcp-param-priority": "4"}, "mcp-param-priority header does not match the body"),
    (ROUTE, {**GOOD, "mcp-param-verbose": "yes"}, "mcp-param-verbose header does not match the body"),
    (ROUTE, {**GOOD, "mcp-param-region": "=?base64?!!not base64!!?="}, "mcp-param-region header is malformed"),
    ({"region": "eu", "query": "q"}, {**GOOD}, "mcp-param-priority header does not match the body"),  # a header without its argument
], ids=["mismatch", "missing", "integer-mismatch", "boolean-mismatch", "malformed", "header-without-argument"])
def test_a_wrong_header_is_refused_by_guard(listed: str, arguments: dict[str, Any], headers: dict[str, str], message: str) -> None:
    before = seen(listed, "route")
    r = call(listed, "route", arguments, headers)
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["id"] == 1 and body["error"]["code"] == -32020, body
    assert body["error"]["message"] == f"Header mismatch: {message}", body
    assert seen(listed, "route") == before  # it never reached the upstream


def test_whitespace_around_a_value_is_accepted(listed: str) -> None:
    """RFC 9110 5.5: whitespace around a field value is not part of it (httpx refuses to send
    such a value: http.client sends it as given)."""
    before = seen(listed, "route")
    status, raw = raw_call(listed, {"Mcp-Param-Region": "  eu\t", "Mcp-Param-Priority": "\t3 ", "Mcp-Param-Verbose": " true"})
    assert status == 200, raw
    assert seen(listed, "route") == before + 1
    status, raw = raw_call(listed, {"Mcp-Param-Region": "  us\t", "Mcp-Param-Priority": "\t3 ", "Mcp-Param-Verbose": " true"})
    assert status == 400 and json.loads(raw)["error"]["code"] == -32020, raw  # the value inside is still compared
    assert seen(listed, "route") == before + 1


def raw_call(url: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """``tools/call route`` with ROUTE's arguments and ``headers`` sent exactly as given."""
    u = httpx.URL(url)
    conn = http.client.HTTPConnection(u.host, u.port, timeout=20)
    try:
        conn.request("POST", u.path, body=modern_body("tools/call", {"name": "route", "arguments": ROUTE}),
                     headers={**modern_headers("tools/call", "route"), **headers})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_broken_annotations_are_not_checked(listed: str) -> None:
    """A tool whose ``x-mcp-header`` breaks the rules (a client leaves it out): no headers checked."""
    before = seen(listed, "broken")
    assert text_of(call(listed, "broken", {"where": "x"})) == "where=x"
    assert seen(listed, "broken") == before + 1
    assert call(listed, "route", ROUTE).status_code == 400  # while the tool listed with it is checked


def test_a_tool_not_listed_is_not_checked(upstream: str) -> None:
    """A new guard knows no tool: the call passes unchecked (the upstream gets it). A handshake-era
    session's tools/list does not teach it either; a 2026-07-28 one does, and the same call is refused."""
    wrong = {"mcp-param-region": "us"}
    with guard_in_front(upstream) as url:
        before = seen(url, "route")
        assert text_of(call(url, "route", ROUTE, wrong)).startswith("region=eu")
        assert seen(url, "route") == before + 1
        assert "route" in list_tools_in_a_session(url)
        assert text_of(call(url, "route", ROUTE, wrong)).startswith("region=eu")  # still unchecked
        list_tools(url)
        r = call(url, "route", ROUTE, wrong)
        assert r.status_code == 400 and r.json()["error"]["code"] == -32020, r.text
        assert seen(url, "route") == before + 2


def test_refusals_are_counted_in_the_report(upstream: str, tmp_path: Any) -> None:
    """--report: each 2026-07-28 header mismatch guard refused, as ``mcp.header-mismatch``."""
    report = tmp_path / "contained.json"
    with guard_in_front(upstream, "--report", str(report)) as url:
        list_tools(url)
        assert call(url, "route", ROUTE, {**GOOD, "mcp-param-region": "us"}).status_code == 400
        assert call(url, "route", ROUTE).status_code == 400
        assert post(url, "tools/call", {"name": "route", "arguments": ROUTE}, {**GOOD, "mcp-name": "echo"}).status_code == 400
    contained = json.loads(report.read_text())["contained"]
    assert contained.get("mcp.header-mismatch") == 3, contained


def test_the_headers_reach_an_upstream_that_checks_them() -> None:
    """Guard hands a 2026-07-28 call's ``Mcp-Param-*`` headers on: an upstream that checks them
    (as ours does) answers the correct call."""
    with param_upstream("--check") as up, guard_in_front(up) as url:
        list_tools(url)
        assert text_of(call(url, "route", ROUTE, GOOD)) == "region=eu priority=3 verbose=True query=q"
        assert call(up, "route", ROUTE).status_code == 400  # it checks them: without the headers, refused
