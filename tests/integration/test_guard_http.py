"""``sturdyrpc guard --url URL --http HOST:PORT``: the guard in front of real Streamable HTTP servers.

The upstreams are real subprocesses on 127.0.0.1: the TypeScript "everything" server from npm
(``streamableHttp`` mode), a FastMCP server from PyPI (tests/servers/fastmcp_server.py on its own
virtualenv), and ``sturdyrpc demo --mcp --http``; guard is ``python -m sturdyrpc guard`` in front of
each. ``sturdyrpc check --url`` runs through guard (no MUST failure may remain, whatever the server
alone fails), the official Python SDK client lists and calls tools through it, and the HTTP rules are probed one by one.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from support import SERVERS
from support.auth import IdP
from support.check import describe, not_passed
from support.http import ACCEPT, demo_http_cmd, free_port, open_session, server_process
from support.sdk import need_python_sdk
from support.thirdparty import everything_server, fastmcp_server

from sturdyrpc.check import Config, run_checks

PY = sys.executable

pytestmark = pytest.mark.timeout(240)

#: The HTTP-level MUST failures of each third-party server on its own (the pinned versions):
#: what guard is there to contain.
HTTP_BUGS = {
    "fastmcp": {"http.origin", "http.protocol-version"},
    "everything": {"http.origin", "http.session-delete", "http.session-unknown"},
}


def guard_cmd(upstream: str, port: int, *extra: str) -> list[str]:
    return [PY, "-m", "sturdyrpc", "guard", "--url", upstream, "--http", f"127.0.0.1:{port}", *extra]


@contextmanager
def upstream(kind: str) -> Iterator[str]:
    """Start the upstream ``kind``; yield its MCP URL."""
    port = free_port()
    if kind == "everything":
        cmd, env = everything_server("streamableHttp"), {"PORT": str(port)}
    elif kind == "fastmcp":
        cmd, env = fastmcp_server("http", port), None
    elif kind == "demo":
        cmd, env = demo_http_cmd(port, mcp=True), None
    else:
        cmd, env = [PY, "-m", "sturdyrpc", "run", str(SERVERS / "guard_upstream_server.py") + ":mcp", "--http", f"127.0.0.1:{port}"], None
    with server_process(cmd, port, env=env):
        yield f"http://127.0.0.1:{port}/mcp"


@contextmanager
def guarded(kind: str, *extra: str) -> Iterator[tuple[str, str]]:
    """The upstream ``kind`` with guard in front: yields (upstream URL, guard URL)."""
    with upstream(kind) as up:
        port = free_port()
        with server_process(guard_cmd(up, port, *extra), port):
            yield up, f"http://127.0.0.1:{port}/mcp"


@pytest.fixture(scope="module", params=["everything", "fastmcp", "demo"])
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[str, str, str]]:
    with guarded(request.param) as (up, url):
        yield request.param, up, url


def _check_options(kind: str) -> dict[str, Any]:
    return {"slow": "slow", "leak_probe": "fail"} if kind == "demo" else {"slow": "sleep", "leak_probe": "fail"} if kind == "fastmcp" else {}


@pytest.mark.parametrize("protocol", [None, "2025-11-25"])
def test_check_through_guard(pair: tuple[str, str, str], protocol: str | None) -> None:
    kind, up, url = pair
    opts = _check_options(kind)
    if protocol:
        opts["protocol"] = protocol
    through = run_checks(Config([url], url=url, **opts))
    assert not {k for k, v in not_passed(through).items() if v == "fail"}, describe(through)
    assert not {k for k in not_passed(through) if k.startswith("http.")}, describe(through)
    if kind in HTTP_BUGS and protocol is None:
        # The server alone has them: guard is what contains them.
        alone = not_passed(run_checks(Config([up], url=up, **opts)))
        assert HTTP_BUGS[kind] <= {k for k, v in alone.items() if v == "fail"}, alone


def test_check_through_guard_2025_03_26() -> None:
    """The era with batches: split, answered and gathered back through guard, nothing failing."""
    with guarded("demo") as (_, url):
        report = run_checks(Config([url], url=url, protocol="2025-03-26", **_check_options("demo")))
        assert not not_passed(report), describe(report)


#: A tool of each upstream, its arguments and the text it answers with.
CALLS = {
    "everything": ("echo", {"message": "héllo"}, "Echo: héllo"),
    "fastmcp": ("add", {"a": 2, "b": 40}, "42"),
    "demo": ("echo", {"text": "héllo"}, "héllo"),
}


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_python_sdk_client_through_guard(pair: tuple[str, str, str], mode: str) -> None:
    need_python_sdk()
    from mcp.client.client import Client

    kind, _, url = pair
    name, args, text = CALLS[kind]

    async def main() -> None:
        async with Client(url, mode=mode, read_timeout_seconds=20) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            assert name in tools
            r = await c.call_tool(name, args)
            assert not r.is_error and r.content[0].text == text
            # several calls in flight at once in one session, each answered on its own POST
            rs = await asyncio.gather(*(c.call_tool(name, args) for _ in range(5)))
            assert all(x.content[0].text == text for x in rs)

    asyncio.run(main())


def test_progress_streamed_through_guard() -> None:
    """A call that sends progress before its reply: the POST becomes an SSE stream, in order."""
    with guarded("everything") as (_, url):
        async def main() -> None:
            async with httpx.AsyncClient(base_url=url.removesuffix("/mcp"), timeout=20) as c:
                h = await open_session(c)
                body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
                    "name": "trigger-long-running-operation", "arguments": {"duration": 1, "steps": 3}, "_meta": {"progressToken": "p"}}}
                r = await c.post("/mcp", json=body, headers=h)
                assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
                events = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
                assert [e["method"] for e in events[:-1]] == ["notifications/progress"] * 3
                assert [e["params"]["progress"] for e in events[:-1]] == [1, 2, 3]
                assert events[-1]["id"] == 7 and "result" in events[-1]

        asyncio.run(main())


@pytest.fixture(scope="module")
def everything_guarded() -> Iterator[str]:
    with guarded("everything") as (_, url):
        yield url


def _post(url: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(url, content=json.dumps(body), headers={"content-type": "application/json", "accept": ACCEPT, **(headers or {})}, timeout=20)


def _init(url: str, auth: dict[str, str] | None = None) -> dict[str, str]:
    """Open a session through guard (with the ``auth`` header); the headers of its later requests."""
    r = _post(url, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}, auth)
    assert r.status_code == 200, r.text
    h = {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    assert _post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, {**h, **(auth or {})}).status_code == 202
    return h


PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


@pytest.mark.parametrize(("headers", "status"), [
    ({"origin": "http://evil.example"}, 403),
    ({"host": "evil.example"}, 403),
    ({"mcp-session-id": "no-such-session", "mcp-protocol-version": "2025-11-25"}, 404),
    ({"mcp-protocol-version": "1999-01-01"}, 400),
    ({}, 400),  # a request that is not initialize, without a session
])
def test_http_rules(everything_guarded: str, headers: dict[str, str], status: int) -> None:
    r = _post(everything_guarded, PING, headers)
    assert r.status_code == status, r.text
    assert "error" in r.json()


def test_delete_honoured(everything_guarded: str) -> None:
    h = _init(everything_guarded)
    r = _post(everything_guarded, PING, h)
    assert r.status_code == 200 and "result" in (r.json() if r.headers["content-type"].startswith("application/json") else
                                                 json.loads(r.text.split("data:", 1)[1].split("\n", 1)[0]))
    assert httpx.delete(everything_guarded, headers=h, timeout=20).status_code == 200
    assert _post(everything_guarded, PING, h).status_code == 404
    assert httpx.delete(everything_guarded, headers=h, timeout=20).status_code == 404


def test_session_ids_are_guards_own(everything_guarded: str) -> None:
    """Two sessions, two unrelated ids, each usable only as itself."""
    a, b = _init(everything_guarded), _init(everything_guarded)
    assert a["mcp-session-id"] != b["mcp-session-id"] and len(a["mcp-session-id"]) >= 32
    assert _post(everything_guarded, PING, {**a, "mcp-session-id": a["mcp-session-id"][:-1]}).status_code == 404


def test_body_limit(everything_guarded: str) -> None:
    h = _init(everything_guarded)
    big = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "x" * (5 << 20)}}}
    assert _post(everything_guarded, big, h).status_code == 413


def test_usage_errors() -> None:
    import subprocess

    for args, needle in [
        (["--url", "http://127.0.0.1:1/mcp", "--http", "127.0.0.1:2", "--", "cat"], "not both"),
        ([], "give the server"),
        (["--url", "http://127.0.0.1:1/mcp"], "go together"),
        (["--auth-issuer", "http://x", "--", "cat"], "need --url"),
    ]:
        p = subprocess.run([PY, "-m", "sturdyrpc", "guard", *args], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and needle in p.stderr, (args, p.stderr)
        assert p.stdout == ""


def _call(url: str, h: dict[str, str], tool: str, args: dict[str, Any] | None = None) -> httpx.Response:
    return _post(url, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": tool, "arguments": args or {}}}, h)


def _text(r: httpx.Response) -> str:
    data = r.json() if r.headers["content-type"].startswith("application/json") else json.loads(r.text.split("data:", 1)[1].split("\n", 1)[0])
    return str(data["result"]["content"][0]["text"])


@pytest.mark.parametrize("forward", [False, True])
def test_auth_in_front_of_an_open_server(forward: bool) -> None:
    """guard is the OAuth resource server; the upstream has no authorization at all and gets the
    client's token only with --forward-authorization."""
    idp = IdP()
    idp.add_key("k1")
    with idp.serve(), upstream("plain") as up:
        port = free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        extra = ["--auth-issuer", idp.issuer, "--auth-jwks", idp.jwks_url, "--auth-scopes", "mcp:tools",
                 "--auth-tool-scope", "authorization=admin"] + (["--forward-authorization"] if forward else [])
        with server_process(guard_cmd(up, port, *extra), port):
            r = _post(url, PING)
            assert r.status_code == 401 and r.headers["www-authenticate"].lower().startswith("bearer")
            assert _post(url, PING, {"authorization": "Bearer not-a-token"}).status_code == 401
            plain = {"authorization": "Bearer " + idp.token(url)}
            h = {**_init(url, plain), **plain}
            # per-tool scopes: authorization needs "admin" as well
            r = _call(url, h, "authorization")
            assert r.status_code == 403 and "insufficient_scope" in r.headers["www-authenticate"]
            assert _text(_call(url, h, "echo", {"text": "hi"})) == "hi"
            admin = {"authorization": "Bearer " + idp.token(url, scope="mcp:tools admin")}
            seen = _text(_call(url, {**h, **admin}, "authorization"))
            assert seen == (admin["authorization"] if forward else "none")
            # the session is bound to its principal: another one's token finds no such session
            bob = {"authorization": "Bearer " + idp.token(url, sub="bob")}
            assert _call(url, {**h, **bob}, "echo", {"text": "x"}).status_code == 404



def test_deadline_over_http() -> None:
    """--deadline on HTTP: a call the upstream leaves too long is answered by guard (-32001) and
    cancelled upstream; the session goes on."""
    with guarded("fastmcp", "--deadline", "0.5") as (_, url):
        h = _init(url)
        r = _call(url, h, "sleep", {"seconds": 5})
        assert r.elapsed.total_seconds() < 3
        if r.headers.get("content-type", "").startswith("application/json"):
            messages = [r.json()]
        else:  # an SSE stream: the reply may come after notifications of the call (logging, progress)
            messages = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()]
        replies = [m for m in messages if type(m) is dict and "method" not in m]
        assert len(replies) == 1, (r.status_code, r.headers, r.text)
        assert replies[0]["id"] == 3 and replies[0]["error"]["code"] == -32001, replies
        assert _text(_call(url, h, "echo", {"text": "still here"})) == "still here"


@pytest.mark.parametrize("limit", [1, 2, None])
def test_max_in_flight_over_http(limit: int | None) -> None:
    """--max-in-flight on HTTP: at most N requests of a session reach the upstream at once, the
    rest wait in order and are sent as answers come; every call is answered under its own id.
    Without the option all four run at once upstream (so the limit is what holds them back)."""
    import concurrent.futures

    with guarded("guard-upstream", *(["--max-in-flight", str(limit)] if limit else [])) as (_, url):
        h = _init(url)

        def one(i: int) -> httpx.Response:
            return _post(url, {"jsonrpc": "2.0", "id": 100 + i, "method": "tools/call",
                               "params": {"name": "slow", "arguments": {"seconds": 0.4}}}, h)

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            replies = list(pool.map(one, range(4)))
        for i, r in enumerate(replies):
            assert r.status_code == 200, r.text
            body = r.json() if r.headers["content-type"].startswith("application/json") else json.loads(
                [line for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()][-1][5:])
            assert body["id"] == 100 + i and body["result"]["content"][0]["text"] == "slept 0.4", body
        assert _text(_call(url, h, "peak")) == str(limit or 4)


@pytest.mark.parametrize("protocol", ["2025-11-25", "2025-06-18", "2026-07-28"])
def test_server_requests_through_guard(protocol: str) -> None:
    """A request of the server to the client (``elicitation/create`` of the demo's ``approve``)
    through guard: on the handshake era it travels on the call's SSE stream and the client's
    answer is POSTed back through guard to the upstream; on 2026-07-28 it is an input round of
    the call. Either way the tool gets the answer and the call its reply."""
    with guarded("demo") as (_, url):
        r = subprocess.run([PY, "-m", "sturdyrpc", "mcp", "call", "--url", url, "--protocol", protocol,
                            "--elicit-accept", '{"ok": true}', "approve", '{"action": "deploy"}'],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert r.stdout.strip() == "deploy: approved", (r.stdout, r.stderr)
        assert "elicitation: Approve deploy? -> accept" in r.stderr, r.stderr


def test_get_stream(everything_guarded: str) -> None:
    h = _init(everything_guarded)
    with httpx.stream("GET", everything_guarded, headers={**h, "accept": "text/event-stream"}, timeout=20) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        again = httpx.get(everything_guarded, headers={**h, "accept": "text/event-stream"}, timeout=20)
        assert again.status_code == 409
    assert httpx.get(everything_guarded, headers={**h, "mcp-session-id": "nope", "accept": "text/event-stream"}, timeout=20).status_code == 404


def test_upstream_restart_ends_the_session() -> None:
    """The upstream forgets its sessions (a restart): the client gets 404 for guard's session too,
    and re-initializes through guard, as it would without it."""
    up_port, port = free_port(), free_port()
    up, url = f"http://127.0.0.1:{up_port}/mcp", f"http://127.0.0.1:{port}/mcp"
    with server_process(guard_cmd(up, port), port):
        with server_process(demo_http_cmd(up_port, mcp=True), up_port):
            h = _init(url)
            assert _text(_call(url, h, "echo", {"text": "one"})) == "one"
        with server_process(demo_http_cmd(up_port, mcp=True), up_port):
            assert _call(url, h, "echo", {"text": "two"}).status_code == 404
            assert _call(url, h, "echo", {"text": "two"}).status_code == 404
            h = _init(url)
            assert _text(_call(url, h, "echo", {"text": "three"})) == "three"


@pytest.mark.parametrize(("batch", "ids"), [
    ([{"jsonrpc": "2.0", "method": "ping", "id": "b-1"}, {"foo": "boo"}, {"jsonrpc": "2.0", "method": "ping", "id": "b-2"}], ["b-1", None, "b-2"]),
    ([1], [None]),
    ([{"jsonrpc": "2.0", "method": "ping", "id": 7}], [7]),
])
def test_batches_2025_03_26(batch: list[Any], ids: list[Any]) -> None:
    """On 2025-03-26 a batch through guard gets one array: a reply per request, one per unreadable element."""
    with guarded("demo") as (_, url):
        r = _post(url, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        h = {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-03-26", "accept": "application/json"}
        assert _post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, h).status_code == 202
        r = _post(url, batch, h)
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json"), r.text
        got = r.json()
        assert type(got) is list and sorted(map(str, (m.get("id") for m in got))) == sorted(map(str, ids)), got


def test_report_of_what_was_contained(tmp_path: Any) -> None:
    """--report: at shutdown, what guard answered for the server, by the rule check names."""
    report = tmp_path / "contained.json"
    with upstream("demo") as up:
        port = free_port()
        url = f"http://127.0.0.1:{port}/mcp"
        with server_process(guard_cmd(up, port, "--report", str(report)), port):
            h = _init(url)
            r = httpx.post(url, content=b'{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]',
                           headers={"content-type": "application/json", "accept": ACCEPT, **h}, timeout=20)
            assert r.status_code == 400 and r.json()["error"]["code"] == -32700
            assert _post(url, {"jsonrpc": "2.0", "id": None, "method": "ping"}, h).json()["error"]["code"] == -32600
        contained = json.loads(report.read_text())["contained"]
        assert contained.get("framing.parse-error") == 1 and contained.get("ids.invalid-type") == 1, contained


def test_client_leaving_frees_its_request_id() -> None:
    """A client that closes its POST before the reply: guard cancels the call upstream and
    forgets the id, so the same id is usable at once (no 409)."""
    with guarded("demo") as (_, url):
        h = _init(url)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url, content=json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
                "name": "slow", "arguments": {"seconds": 30}}}), headers={"content-type": "application/json", "accept": ACCEPT, **h},
                timeout=httpx.Timeout(20, read=0.5))
        time.sleep(0.3)  # the disconnect reaches guard
        assert _text(_call(url, h, "echo", {"text": "again"})) == "again"  # id 3 again, answered


def test_idle_sessions_end() -> None:
    """--session-idle: a session no request came for within S seconds ends (404, the client
    re-initializes), one in use stays."""
    with guarded("demo", "--session-idle", "1.5") as (up, url):
        idle, used = _init(url), _init(url)
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:  # the used session gets a request every 0.5 s
            assert _text(_call(url, used, "echo", {"text": "busy"})) == "busy"
            time.sleep(0.5)
        assert _call(url, idle, "echo", {"text": "late"}).status_code == 404
        assert _text(_call(url, used, "echo", {"text": "still"})) == "still"
        assert _text(_call(url, _init(url), "echo", {"text": "again"})) == "again"


def test_a_session_is_idle_from_the_end_of_its_reply() -> None:
    """--session-idle: a call that runs longer than the idle time leaves its session in use until
    the reply is sent; the client's next request, right after, finds it (no 404)."""
    with guarded("demo", "--session-idle", "1") as (_, url):
        h = _init(url)
        r = _call(url, h, "slow", {"seconds": 1.6})  # the request is 1.6 s old when its reply ends
        assert r.status_code == 200, r.text
        assert _text(_call(url, h, "echo", {"text": "after"})) == "after"
