"""The inspector's session (sans I/O): each frame an entry, replies paired with their requests,
every rule a message breaks on that message (named as ``check`` names it), and the export a
``trace --log`` file that ``replay`` reads back message for message."""

from __future__ import annotations

import json

import pytest

from sturdyrpc.check.verdicts import SPECS
from sturdyrpc.framing import BadHeader, FrameTooLarge
from sturdyrpc.inspect.session import C2S, S2C, Session
from sturdyrpc.proxy.replay import load_session, recorded_framing, recorded_redacted

INIT = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
INIT_OK = b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}}'
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
CALL = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}'
CALL_OK = b'{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"hi"}]}}'


def handshake(s: Session) -> None:
    for i, (d, f) in enumerate([(C2S, INIT), (S2C, INIT_OK), (C2S, INITIALIZED)]):
        s.feed(d, f, 100.0 + i)


#: (what the server sends after a clean handshake and one call, the rule the offending entry breaks)
BROKEN = [
    pytest.param(b"server ready, listening", "framing.stdout-only-jsonrpc", id="banner-on-stdout"),
    pytest.param(b'{"jsonrpc":"2.0","id":2,"result":{"content":[]}}', "ids.duplicate-reply", id="second-reply"),
    pytest.param(b'{"jsonrpc":"2.0","id":99,"result":{}}', "ids.unknown-reply", id="unknown-id"),
    pytest.param(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"no"}}', "messages.notification-silent", id="reply-to-notification"),
    pytest.param(b'{"jsonrpc":"2.0","id":7,"result":{},"error":{"code":1,"message":"x"}}', "messages.response-shape", id="result-and-error"),
    pytest.param(b"[]", "messages.response-shape", id="empty-batch"),
    pytest.param(b"42", "messages.invalid-message", id="bare-number"),
]


@pytest.mark.parametrize(("frame", "rule"), BROKEN)
def test_a_broken_message_carries_the_rule_it_breaks(frame: bytes, rule: str) -> None:
    s = Session(["server"])
    handshake(s)
    s.feed(C2S, CALL, 104.0)
    s.feed(S2C, CALL_OK, 104.5)
    clean = len(s.entries)
    made = s.feed(S2C, frame, 105.0)
    assert all(not e["violations"] for e in s.entries[:clean])  # nothing before it is blamed
    rules = [v["rule"] for e in made for v in e["violations"]]
    assert rules == [rule]
    v = next(v for e in made for v in e["violations"])
    spec = SPECS[rule]
    assert (v["title"], v["text"], v["hint"], v["side"]) == (spec.title, spec.rule, spec.hint, "server")
    summary = s.summary(106.0)
    assert summary["violation_count"] == 1
    assert [(r["rule"], r["count"], r["first"]) for r in summary["by_rule"]] == [(rule, 1, made[0]["seq"])]


def test_replies_are_paired_with_their_requests_and_latency() -> None:
    s = Session(["server"])
    handshake(s)
    s.feed(C2S, CALL, 110.0)
    s.feed(S2C, b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}', 110.1)
    s.feed(S2C, CALL_OK, 110.25)
    req, note, reply = s.entries[3:]
    assert (req["kind"], req["label"], note["kind"], reply["kind"]) == ("request", "tools/call echo", "notification", "response")
    assert req["pair"] == reply["seq"] and reply["pair"] == req["seq"]
    assert req["ms"] == reply["ms"] == pytest.approx(250.0)
    assert s.entries[1]["pair"] == 0 and s.entries[0]["ms"] == pytest.approx(1000.0)
    assert "pair" not in note
    assert s.summary(111.0)["unanswered"] == []


def test_server_requests_pair_with_the_clients_replies() -> None:
    s = Session(["server"])
    handshake(s)
    s.feed(S2C, b'{"jsonrpc":"2.0","id":"e1","method":"elicitation/create","params":{"message":"ok?","requestedSchema":{}}}', 120.0)
    s.feed(C2S, b'{"jsonrpc":"2.0","id":"e1","result":{"action":"accept","content":{}}}', 121.5)
    ask, answer = s.entries[3:]
    assert (ask["dir"], ask["kind"], answer["dir"], answer["pair"]) == (S2C, "request", C2S, ask["seq"])
    assert ask["ms"] == pytest.approx(1500.0)


def test_a_request_never_answered_is_overdue_past_the_deadline() -> None:
    s = Session(["server"])
    handshake(s)
    s.feed(C2S, CALL, 130.0)
    young = s.summary(131.0, deadline=5.0)["unanswered"]
    old = s.summary(140.0, deadline=5.0)["unanswered"]
    assert [(u["seq"], u["label"], u["overdue"]) for u in young] == [(3, "tools/call echo", False)]
    assert [(u["seq"], u["overdue"], u["age"]) for u in old] == [(3, True, 10.0)]


def test_a_batch_is_one_entry_per_element() -> None:
    s = Session(["server"])
    made = s.feed(S2C, b'[{"jsonrpc":"2.0","id":5,"result":1},{"jsonrpc":"2.0","method":"x"}]', 1.0)
    assert [(e["kind"], e["batch"]) for e in made] == [("response", 0), ("notification", 0)]
    assert [v["rule"] for v in made[0]["violations"]] == ["ids.unknown-reply"]


@pytest.mark.parametrize("frame", [FrameTooLarge(1024), BadHeader("no Content-Length")])
def test_an_unreadable_frame_is_an_entry_and_a_log_event(frame: FrameTooLarge | BadHeader) -> None:
    s = Session(["server"])
    (e,) = s.feed(S2C, frame, 1.0)
    assert e["kind"] == "unreadable" and [v["rule"] for v in e["violations"]] == ["framing.stdout-only-jsonrpc"]
    last = json.loads(s.export().splitlines()[-1])
    assert last["event"] == ("too-large" if isinstance(frame, FrameTooLarge) else "bad-header")


def test_the_export_is_a_trace_log_replay_reads() -> None:
    s = Session(["python", "server.py", "--token", "s3cret"])
    handshake(s)
    s.feed(C2S, CALL, 104.0)
    s.feed(S2C, b"junk on stdout", 104.1)
    s.feed(S2C, CALL_OK, 104.5)
    lines = s.export().splitlines(keepends=True)
    head = json.loads(lines[0])
    assert (head["sturdyrpc"], head["format"], head["framing"]) == ("trace", 1, "line")
    assert "s3cret" not in head["command"]  # redacted as trace --log does by default
    assert recorded_framing(lines) == "line" and recorded_redacted(lines)
    records = load_session(lines)
    assert [(r.dir, r.msg) for r in records] == [(e["dir"], e["msg"]) for e in s.entries if e["kind"] != "junk"]
    assert json.loads(lines[5])["raw"] == "junk on stdout"


def test_on_entry_sees_every_entry_in_order() -> None:
    seen: list[int] = []
    s = Session(["server"], on_entry=lambda e: seen.append(e["seq"]))
    handshake(s)
    s.feed(S2C, b'[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b"}]', 5.0)
    assert seen == list(range(len(s.entries))) == [0, 1, 2, 3, 4]
    assert s.since(3) == s.entries[3:]


#: (the result of a tools/call, the protocol version, what is wrong with it: None for nothing)
TOOL_RESULTS = [
    pytest.param({"content": [{"type": "text", "text": "hi"}]}, "2025-06-18", None, id="text"),
    pytest.param({"content": []}, "2025-06-18", None, id="no-content-items"),
    pytest.param({"content": "hi"}, "2025-06-18", "content must be an array", id="content-a-string"),
    pytest.param({}, "2025-06-18", "content must be an array", id="no-content"),
    pytest.param({"content": [{"text": "hi"}]}, "2025-06-18", "content must be an array", id="item-without-type"),
    pytest.param({"content": [], "isError": "yes"}, "2025-06-18", "isError must be a boolean", id="isError-a-string"),
    pytest.param({"task": {"taskId": "t1", "status": "working"}}, "2025-11-25", None, id="a-task-created"),
    pytest.param({"content": [], "resultType": "complete"}, "2026-07-28", None, id="modern-complete"),
    pytest.param({"resultType": "input_required", "inputRequests": {}}, "2026-07-28", None, id="modern-input-required"),
    pytest.param({"content": []}, "2026-07-28", "no valid resultType", id="modern-without-resultType"),
]


@pytest.mark.parametrize(("result", "version", "problem"), TOOL_RESULTS)
def test_a_tool_result_is_judged_as_check_judges_it(result: dict[str, object], version: str, problem: str | None) -> None:
    s = Session(["server"])
    if version == "2026-07-28":
        meta = {"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {}}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {}, "_meta": meta}}
        s.feed(C2S, json.dumps(call).encode(), 1.0)
    else:
        s.feed(C2S, INIT.replace(b"2025-06-18", version.encode()), 0.0)
        s.feed(S2C, INIT_OK.replace(b"2025-06-18", version.encode()), 0.1)
        s.feed(C2S, INITIALIZED, 0.2)
        s.feed(C2S, CALL, 1.0)
    (reply,) = s.feed(S2C, json.dumps({"jsonrpc": "2.0", "id": 2, "result": result}).encode(), 1.5)
    found = [(v["rule"], v["detail"]) for v in reply["violations"]]
    if problem is None:
        assert found == []
    else:
        assert len(found) == 1 and found[0][0] == "mcp.call-tools" and problem in found[0][1] and "'echo'" in found[0][1]
        assert s.summary(2.0)["violation_count"] == 1
