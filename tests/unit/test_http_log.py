"""The HTTP guard's log (``guard --url --log``), sans I/O: TraceLog's records with a session,
and replay's reading of one session (tests/integration/test_guard_http_log.py runs it end to end)."""

from __future__ import annotations

import io
import json

from sturdyrpc.codec import encode
from sturdyrpc.proxy.guard import GuardCore
from sturdyrpc.proxy.replay import ALL_SESSIONS, Replay, load_session, recorded_sessions
from sturdyrpc.proxy.tracelog import UNREADABLE, TraceLog


def _log(url: str = "http://127.0.0.1:8000/mcp") -> tuple[io.BytesIO, TraceLog]:
    f = io.BytesIO()
    return f, TraceLog(f, [], "line", upstream=url)


def test_the_header_names_the_upstream_without_credentials() -> None:
    f, _ = _log("http://alice:pw123@up.example:8000/mcp?token=abc123&x=1")
    head = json.loads(f.getvalue().splitlines()[0])
    assert head["transport"] == "http" and "command" not in head and head["redacted"] is True
    assert "pw123" not in head["upstream"] and "alice" not in head["upstream"] and "abc123" not in head["upstream"]
    assert head["upstream"].startswith("http://[REDACTED]@up.example:8000/mcp?") and "x=1" in head["upstream"]


def test_records_carry_their_session_and_are_redacted() -> None:
    f, log = _log()
    log.http_message("c2s", "sid-1", b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"api_key":"k3y"}}', 1.0)
    log.http_message("s2c", "sid-1", b'{"jsonrpc":"2.0","id":7,"result":{}}', 2.0, client_id=1)
    log.http_message("c2s", None, b"not json", 3.0, value=UNREADABLE)
    log.http_message("g2c", "sid-2", b'[{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"m"}}]', 4.0)
    lines = f.getvalue().splitlines()
    assert b"k3y" not in f.getvalue()
    recs = [json.loads(line) for line in lines[1:]]
    assert [(r["dir"], r["session"]) for r in recs] == [("c2s", "sid-1"), ("s2c", "sid-1"), ("c2s", None), ("g2c", "sid-2")]
    assert recs[1]["client_id"] == 1 and "client_id" not in recs[0] and recs[2]["raw"] == "not json"
    assert recorded_sessions(lines) == ["sid-1", None, "sid-2"]


def test_a_session_is_read_as_the_client_saw_it() -> None:
    f, log = _log()
    log.http_message("c2s", "a", encode({"jsonrpc": "2.0", "id": 0, "method": "ping"}), 1.0)
    log.http_message("c2s", "b", encode({"jsonrpc": "2.0", "id": 0, "method": "ping"}), 1.1)
    log.http_message("s2c", "a", encode({"jsonrpc": "2.0", "id": 1, "result": {"who": "a"}}), 1.2, client_id=0)
    log.http_message("s2c", "a", encode({"jsonrpc": "2.0", "id": 9, "result": {}}), 1.3)  # a late reply nobody got
    log.http_message("g2c", "b", encode({"jsonrpc": "2.0", "id": 0, "error": {"code": -32001, "message": "deadline"}}), 1.4)
    lines = f.getvalue().splitlines()
    a = load_session(lines, "a")
    assert [(r.dir, r.msg) for r in a] == [("c2s", {"jsonrpc": "2.0", "id": 0, "method": "ping"}),
                                           ("s2c", {"jsonrpc": "2.0", "id": 0, "result": {"who": "a"}})]
    assert [r.dir for r in load_session(lines, "b")] == ["c2s"]  # guard's own answer is not the server's
    assert len(load_session(lines, ALL_SESSIONS)) == 3
    run = Replay(a)
    assert run.next_messages() == [encode({"jsonrpc": "2.0", "id": 0, "method": "ping"})]
    run.from_server({"jsonrpc": "2.0", "id": 0, "result": {"who": "a"}})
    assert run.done and run.compared == 1 and not run.differences


def test_a_stdio_log_has_no_sessions() -> None:
    f = io.BytesIO()
    TraceLog(f, ["server"], "line").frames("c2s", [b'{"jsonrpc":"2.0","id":1,"method":"x"}'], 1.0)
    lines = f.getvalue().splitlines()
    assert recorded_sessions(lines) is None and "session" not in json.loads(lines[1])
    assert [r.msg["id"] for r in load_session(lines)] == [1]


def test_the_core_tells_the_id_the_client_knows() -> None:
    core = GuardCore(protocol="mcp")
    acts = core.from_client(encode({"jsonrpc": "2.0", "id": "c-1", "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}), 0.0)
    sent = json.loads(acts.to_server[0])
    reply = {"jsonrpc": "2.0", "id": sent["id"], "result": {"protocolVersion": "2025-11-25", "capabilities": {},
                                                            "serverInfo": {"name": "s", "version": "1"}}}
    assert core.client_id(reply) == "c-1"
    core.from_server(encode(reply), 0.1)
    assert core.client_id(reply) is None  # answered: no longer in flight
    ask = {"jsonrpc": "2.0", "id": 55, "method": "roots/list"}
    out = core.from_server(encode(ask), 0.2)
    assert core.client_id(ask) == json.loads(out.to_client[0])["id"]


def test_an_id_used_again_after_its_reply_is_compared_with_its_own_reply() -> None:
    """2026-07-28 requests (session null) are conversations of one request each, often all id 1:
    each is compared with the reply that followed it, not with the first reply of that id."""
    f, log = _log()
    for text in ("one", "two"):
        log.http_message("c2s", None, encode({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"text": text}}), 1.0)
        log.http_message("s2c", None, encode({"jsonrpc": "2.0", "id": 1, "result": {"text": text}}), 1.1, client_id=1)
    run = Replay(load_session(f.getvalue().splitlines(), None))
    for text in ("one", "two"):
        assert [json.loads(m)["params"]["text"] for m in run.next_messages()] == [text]
        run.from_server({"jsonrpc": "2.0", "id": 1, "result": {"text": text}})
    assert run.done and run.compared == 2 and not run.differences
