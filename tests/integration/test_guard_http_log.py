"""``sturdyrpc guard --url URL --http HOST:PORT --log FILE``: the HTTP guard's traffic recorded
(trace --log's NDJSON, each record with its session), and ``sturdyrpc replay FILE --session ID``
re-sending one session to a stdio server of the same app.

Real subprocesses on 127.0.0.1: the upstream is ``sturdyrpc run tests/servers/guard_upstream_server.py:mcp
--http``, guard is ``python -m sturdyrpc guard`` in front of it, and the replay's server is the same
app on stdio (``sturdyrpc run tests/servers/guard_upstream_server.py:mcp``); what the upstream sends on
its GET stream comes from ``tests/servers/guard_get_stream_server.py``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import SERVERS
from support.http import ACCEPT, demo_http_cmd, free_port, server_process

PY = sys.executable
APP = str(SERVERS / "guard_upstream_server.py") + ":mcp"
STDIO_APP = [PY, "-m", "sturdyrpc", "run", APP]
BEARER = "Bearer b3arer-t0ken-never-logged"
SECRET = "s3cr3t-argument-value"

pytestmark = pytest.mark.timeout(120)


@contextmanager
def logged_guard(log: Path, *extra: str, demo: bool = False, app: str = APP) -> Iterator[str]:
    """The upstream ``app`` (``demo``: ``sturdyrpc demo --mcp``) on HTTP with ``guard --log log`` in
    front; yields guard's URL. Guard is stopped (SIGTERM) at the end: its log is then complete."""
    up_port, port = free_port(), free_port()
    up = demo_http_cmd(up_port, mcp=True) if demo else [PY, "-m", "sturdyrpc", "run", app, "--http", f"127.0.0.1:{up_port}"]
    with server_process(up, up_port):
        cmd = [PY, "-m", "sturdyrpc", "guard", "--url", f"http://127.0.0.1:{up_port}/mcp", "--http", f"127.0.0.1:{port}",
               "--log", str(log), *extra]
        with server_process(cmd, port):
            yield f"http://127.0.0.1:{port}/mcp"


def _post(url: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(url, content=json.dumps(body), headers={"content-type": "application/json", "accept": ACCEPT,
                                                             "authorization": BEARER, **(headers or {})}, timeout=20)


def _messages(r: httpx.Response) -> list[Any]:
    if r.headers.get("content-type", "").startswith("application/json"):
        return [r.json()]
    return [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:") and line[5:].strip()]


def _session(url: str, text: str, first_id: int) -> tuple[str, Any]:
    """One client's session: initialize, initialized, tools/list, a call of echo with ``text``
    (and a secret beside it), a ping; its session id and the echo's reply."""
    r = _post(url, {"jsonrpc": "2.0", "id": first_id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    assert r.status_code == 200, r.text
    h = {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    assert _post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, h).status_code == 202
    assert _messages(_post(url, {"jsonrpc": "2.0", "id": first_id + 1, "method": "tools/list"}, h))[-1]["result"]["tools"]
    call = {"jsonrpc": "2.0", "id": first_id + 2, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": text}, "_meta": {"api_token": SECRET}}}
    echo = _messages(_post(url, call, h))[-1]
    assert echo["result"]["content"][0]["text"] == text, echo
    assert _messages(_post(url, {"jsonrpc": "2.0", "id": first_id + 3, "method": "ping"}, h))[-1]["result"] == {}
    return h["mcp-session-id"], echo


def _replay(log: Path, *args: str, cmd: list[str] = STDIO_APP) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "sturdyrpc", "replay", str(log), *args, "--", *cmd], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def two_sessions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A log of two sessions through guard, their requests interleaved: (log, session a, session b)."""
    log = tmp_path_factory.mktemp("guard-log") / "http.ndjson"
    with logged_guard(log) as url:
        a, _ = _session(url, "from session a", 0)
        b, _ = _session(url, "from session b", 10)
        # Interleaved: one more request of a after b's.
        r = _post(url, {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "a again"}}},
                  {"mcp-session-id": a, "mcp-protocol-version": "2025-11-25"})
        assert _messages(r)[-1]["result"]["content"][0]["text"] == "a again"
        # One guard answers itself (an id of the wrong type): never the upstream's.
        r = _post(url, {"jsonrpc": "2.0", "id": None, "method": "ping"}, {"mcp-session-id": b, "mcp-protocol-version": "2025-11-25"})
        assert r.json()["error"]["code"] == -32600
    return log, a, b


def test_the_log_holds_both_sessions_with_their_ids(two_sessions: tuple[Path, str, str]) -> None:
    log, a, b = two_sessions
    data = log.read_bytes()
    records = [json.loads(line) for line in data.splitlines()]
    head = records[0]
    assert head["sturdyrpc"] == "trace" and head["transport"] == "http" and head["redacted"] is True
    assert head["upstream"].startswith("http://127.0.0.1:") and "command" not in head
    messages = [r for r in records[1:] if "dir" in r]
    assert {r["session"] for r in messages} == {a, b}
    for sid, text in ((a, "from session a"), (b, "from session b")):
        mine = [r for r in messages if r["session"] == sid]
        c2s = [r["msg"] for r in mine if r["dir"] == "c2s"]
        assert [m.get("method") for m in c2s][:5] == ["initialize", "notifications/initialized", "tools/list", "tools/call", "ping"]
        echo = next(r for r in mine if r["dir"] == "s2c" and "content" in r["msg"].get("result", {}))
        assert echo["msg"]["result"]["content"][0]["text"] == text
        assert echo["client_id"] == c2s[3]["id"] and echo["msg"]["id"] != echo["client_id"]  # the upstream saw guard's id
    # interleaved: b's messages come between a's
    order = [r["session"] for r in messages]
    assert order.index(b) < len(order) - 1 - order[::-1].index(a)
    # what guard answered itself, in its session
    own = [r for r in messages if r["dir"] == "g2c"]
    assert own and own[0]["session"] == b and own[0]["msg"]["error"]["code"] == -32600
    # no credential: neither the bearer token (no header is recorded) nor the secret argument
    assert b"b3arer-t0ken" not in data and b"bearer" not in data.lower() and SECRET.encode() not in data
    assert b"[REDACTED]" in data
    assert records[-1]["event"] == "contained"  # written at SIGTERM, the log closed whole


@pytest.mark.parametrize("which", [1, 2])
def test_replay_one_session_against_the_stdio_app(two_sessions: tuple[Path, str, str], which: int) -> None:
    log, a, b = two_sessions
    sid = (a, b)[which - 1]
    out = _replay(log, f"--session={sid}")
    assert out.returncode == 0, (out.stdout, out.stderr)
    compared = 5 if sid == a else 4  # initialize, tools/list, echo, ping (and a's second echo)
    assert f"replay: {compared} replies compared, same behaviour" in out.stderr, out.stderr


def test_replay_tells_a_difference(two_sessions: tuple[Path, str, str], tmp_path: Path) -> None:
    # A server whose echo answers otherwise: the replay of the HTTP session finds it.
    other = tmp_path / "other.py"
    other.write_text("from sturdyrpc.mcp import MCPServer\nmcp = MCPServer('guard-upstream')\n"
                     "@mcp.tool()\ndef echo(text: str) -> str:\n    '''Return the text as it came.'''\n    return text.upper()\n")
    log, a, _ = two_sessions
    out = _replay(log, f"--session={a}", "--ignore", "tools", cmd=[PY, "-m", "sturdyrpc", "run", f"{other}:mcp"])
    assert out.returncode == 1 and "--- tools/call (recorded id 2) differs" in out.stdout, (out.stdout, out.stderr)
    assert "--- tools/call (recorded id 7) differs" in out.stdout and "FROM SESSION A" in out.stdout
    assert "replay: 5 replies compared, 2 difference(s)" in out.stderr


def test_replay_without_session_names_the_sessions(two_sessions: tuple[Path, str, str]) -> None:
    log, a, b = two_sessions
    out = _replay(log)
    assert out.returncode == 2 and out.stdout == ""
    assert "holds 2 sessions" in out.stderr and "--session=ID" in out.stderr and a in out.stderr and b in out.stderr, out.stderr
    out = _replay(log, "--session", "no-such-session")
    assert out.returncode == 2 and "no session 'no-such-session'" in out.stderr and a in out.stderr


def test_replay_of_a_one_session_log_needs_no_session(tmp_path: Path) -> None:
    log = tmp_path / "one.ndjson"
    with logged_guard(log) as url:
        _session(url, "alone", 1)
    out = _replay(log)
    assert out.returncode == 0 and "replay: 4 replies compared, same behaviour" in out.stderr, (out.stdout, out.stderr)


def test_session_is_refused_for_a_stdio_log(tmp_path: Path) -> None:
    log = tmp_path / "stdio.ndjson"
    log.write_text(json.dumps({"sturdyrpc": "trace", "format": 1, "command": ["x"], "framing": "line", "redacted": True}) + "\n")
    out = _replay(log, "--session", "x")
    assert out.returncode == 2 and "is a stdio log" in out.stderr, out.stderr


def test_a_request_of_the_server_on_an_sse_stream_is_logged_and_replayed(tmp_path: Path) -> None:
    """The demo's ``approve`` asks the client (``elicitation/create``) on the call's SSE stream:
    the log holds the request under the id the client answered, and the replay against the
    stdio demo answers it with the recorded answer."""
    log = tmp_path / "elicit.ndjson"
    with logged_guard(log, demo=True) as url:
        r = subprocess.run([PY, "-m", "sturdyrpc", "mcp", "call", "--url", url, "--protocol", "2025-11-25",
                            "--elicit-accept", '{"ok": true}', "approve", '{"action": "deploy"}'],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == "deploy: approved", (r.stdout, r.stderr)
    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    asked = next(r for r in records if r.get("dir") == "s2c" and r["msg"].get("method") == "elicitation/create")
    answer = next(r for r in records if r.get("dir") == "c2s" and "result" in r["msg"] and "action" in r["msg"]["result"])
    assert asked["client_id"] == answer["msg"]["id"] and asked["session"] == answer["session"] is not None
    out = _replay(log, cmd=[PY, "-m", "sturdyrpc", "demo", "--mcp"])
    assert out.returncode == 0 and "same behaviour" in out.stderr, (out.stdout, out.stderr)


def _initialized(url: str) -> dict[str, str]:
    """A new 2025-11-25 session through guard at ``url``, initialized: its headers."""
    r = _post(url, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    assert r.status_code == 200, r.text
    h = {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    assert _post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, h).status_code == 202
    return h


def test_what_the_upstream_sends_on_the_get_stream_is_logged(tmp_path: Path) -> None:
    """A notification and a request the upstream sends outside any POST come on the session's GET
    stream: the log holds both (s2c, in their session, the request under the id the client saw),
    and the client's answer to the request (c2s)."""
    log = tmp_path / "get.ndjson"
    with logged_guard(log, app=str(SERVERS / "guard_get_stream_server.py") + ":mcp") as url:
        h = _initialized(url)
        with httpx.stream("GET", url, headers={**h, "accept": "text/event-stream", "authorization": BEARER}, timeout=20) as g:
            assert g.status_code == 200
            # A second later: time for guard to open its own GET stream to the upstream first.
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "announce", "arguments": {"after": 1.0}}}
            assert _messages(_post(url, call, h))[-1]["result"]["content"][0]["text"] == "announced"
            seen: list[Any] = []
            for line in g.iter_lines():
                if line.startswith("data:") and line[5:].strip():
                    seen.append(json.loads(line[5:]))
                    if seen[-1].get("method") == "ping":
                        break
        assert [m["method"] for m in seen] == ["notifications/tools/list_changed", "ping"], seen
        ping = seen[-1]
        assert _post(url, {"jsonrpc": "2.0", "id": ping["id"], "result": {}}, h).status_code == 202
    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    mine = [r for r in records if r.get("session") == h["mcp-session-id"]]
    changed = [r for r in mine if r["msg"].get("method") == "notifications/tools/list_changed"]
    assert [r["dir"] for r in changed] == ["s2c"], changed
    asked = [r for r in mine if r["msg"].get("method") == "ping" and "id" in r["msg"] and r["dir"] == "s2c"]
    assert len(asked) == 1 and asked[0]["client_id"] == ping["id"], asked
    answered = [r for r in mine if r["dir"] == "c2s" and r["msg"].get("id") == ping["id"] and "result" in r["msg"]]
    assert len(answered) == 1, mine
    assert records.index(changed[0]) < records.index(asked[0]) < records.index(answered[0])


MODERN = "2026-07-28"


def _stateless(url: str, method: str, params: dict[str, Any], id_: int = 1) -> Any:
    """One 2026-07-28 request through guard (no session: its version in a header and in ``_meta``): its reply."""
    h = {"mcp-protocol-version": MODERN, "mcp-method": method}
    if method == "tools/call":
        h["mcp-name"] = params["name"]
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    r = _post(url, {"jsonrpc": "2.0", "id": id_, "method": method, "params": {**params, "_meta": meta}}, h)
    assert r.status_code == 200 and "mcp-session-id" not in r.headers, r.text
    return _messages(r)[-1]


@pytest.fixture(scope="module")
def with_stateless(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A log of one 2025-11-25 session and, around it, 2026-07-28 requests (each with id 1, as a
    client without sessions may well send them): (log, the session's id)."""
    log = tmp_path_factory.mktemp("guard-log-stateless") / "http.ndjson"
    with logged_guard(log) as url:
        assert _stateless(url, "tools/list", {})["result"]["tools"]
        sid, _ = _session(url, "in a session", 0)
        for text in ("stateless one", "stateless two"):
            assert _stateless(url, "tools/call", {"name": "echo", "arguments": {"text": text}})["result"]["content"][0]["text"] == text
    return log, sid


def test_stateless_requests_are_logged_without_a_session(with_stateless: tuple[Path, str]) -> None:
    log, sid = with_stateless
    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    messages = [r for r in records if "dir" in r]
    assert {r["session"] for r in messages} == {sid, None}
    stateless = [r for r in messages if r["session"] is None]
    c2s = [r["msg"]["method"] for r in stateless if r["dir"] == "c2s"]
    assert c2s == ["tools/list", "tools/call", "tools/call"], stateless
    texts = [r["msg"]["result"]["content"][0]["text"] for r in stateless if r["dir"] == "s2c" and "content" in r["msg"].get("result", {})]
    assert texts == ["stateless one", "stateless two"]
    assert all(r["client_id"] == 1 for r in stateless if r["dir"] == "s2c")


def test_replay_names_the_stateless_requests_and_replays_them(with_stateless: tuple[Path, str]) -> None:
    log, sid = with_stateless
    out = _replay(log)
    assert out.returncode == 2 and "holds 2 sessions" in out.stderr and "stateless" in out.stderr and sid in out.stderr, out.stderr
    out = _replay(log, "--session=stateless")
    assert out.returncode == 0 and "replay: 3 replies compared, same behaviour" in out.stderr, (out.stdout, out.stderr)
    out = _replay(log, f"--session={sid}")
    assert out.returncode == 0 and "replay: 4 replies compared, same behaviour" in out.stderr, (out.stdout, out.stderr)


def test_what_guard_refuses_itself_is_logged_g2c(tmp_path: Path) -> None:
    """Guard's own answers are in the log as g2c, each after the message it answers (c2s), in its
    session: a request past ``--deadline``, a second request with an id already in flight (409),
    and a 2026-07-28 call whose headers do not match its body (-32020, session null)."""
    log = tmp_path / "refused.ndjson"
    with logged_guard(log, "--deadline", "1") as url:
        h = _initialized(url)
        slow = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "slow", "arguments": {"seconds": 3}}}
        with ThreadPoolExecutor(1) as pool:
            late = pool.submit(_post, url, slow, h)
            time.sleep(0.4)
            again = _post(url, {"jsonrpc": "2.0", "id": 5, "method": "ping"}, h)
            assert again.status_code == 409 and again.json()["id"] == 5, again.text
            past = _messages(late.result())[-1]
        assert past["id"] == 5 and past["error"]["code"] == -32001, past
        meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
        call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}, "_meta": meta}}
        r = _post(url, call, {"mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": "not-echo"})
        assert r.status_code == 400 and r.json()["error"]["code"] == -32020, r.text
    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    own = [r for r in records if r.get("dir") == "g2c"]
    assert [(r["session"], r["msg"]["id"], r["msg"]["error"]["code"]) for r in own] == [
        (h["mcp-session-id"], 5, -32600), (h["mcp-session-id"], 5, -32001), (None, 9, -32020)], own
    for answer in own:  # the message it answers is in the log before it
        asked = [r for r in records[:records.index(answer)] if r.get("dir") == "c2s" and r["session"] == answer["session"]
                 and r["msg"].get("id") == answer["msg"]["id"]]
        assert asked, answer


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_official_clients_session_logged_and_replayed(tmp_path: Path, mode: str) -> None:
    """A real client, the official Python SDK's, through ``guard --url --log``: what it did is in
    the log, and replayed to the same app on stdio it behaves the same. ``legacy``: one
    2025-11-25 session (replayed without ``--session``); ``auto``: 2026-07-28 requests, logged
    without a session and replayed with ``--session=stateless``."""
    import asyncio

    from support.sdk import need_python_sdk

    need_python_sdk()
    from mcp.client.client import Client

    log = tmp_path / "sdk.ndjson"
    with logged_guard(log) as url:
        async def main() -> None:
            async with Client(url, mode=mode, read_timeout_seconds=20) as c:
                assert "echo" in {t.name for t in (await c.list_tools()).tools}
                r = await c.call_tool("echo", {"text": "through guard"})
                assert not r.is_error and r.content[0].text == "through guard"

        asyncio.run(main())
    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    messages = [r for r in records if "dir" in r]
    sessions = {r["session"] for r in messages}
    calls = [r["msg"] for r in messages if r["dir"] == "c2s" and r["msg"].get("method") == "tools/call"]
    assert [m["params"]["arguments"] for m in calls] == [{"text": "through guard"}]
    echo = [r for r in messages if r["dir"] == "s2c" and r["client_id"] == calls[0]["id"]]
    assert echo and echo[-1]["msg"]["result"]["content"][0]["text"] == "through guard"
    if mode == "legacy":
        assert len(sessions) == 1 and None not in sessions, sessions
        out = _replay(log)
    else:
        assert None in sessions, sessions
        out = _replay(log, "--session=stateless")
    assert out.returncode == 0, (out.stdout, out.stderr)
    # tools/list and the call at least (legacy: the initialize too), each compared
    compared = re.search(r"replay: (\d+) replies compared, same behaviour", out.stderr)
    assert compared and int(compared.group(1)) >= (3 if mode == "legacy" else 2), out.stderr
