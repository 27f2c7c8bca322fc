"""GuardCore, sans I/O: the client's messages read as a correct server reads them, ids mapped both
ways, the server's bugs contained (the programs: tests/integration/test_proxy_e2e.py and
test_guard_contains.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.frames import b, note, req, res

from sturdyrpc.proxy.guard import DEADLINE_CODE, INVALID_REPLY_CODE, SERVER_GONE_CODE, Actions, GuardCore


def msgs(payloads: list[bytes]) -> list[Any]:
    return [json.loads(p) for p in payloads]


INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
INIT_RESULT = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "s", "version": "1"}}


def mcp_session(version: str = "2025-11-25") -> GuardCore:
    """A guard past the MCP handshake: the server saw initialize as id 1."""
    g = GuardCore(protocol="auto")
    out = g.from_client(req(0, "initialize", {**INIT, "protocolVersion": version}), 0.0)
    assert msgs(out.to_server)[0]["id"] == 1
    g.from_server(res(1, {**INIT_RESULT, "protocolVersion": version}), 0.0)
    g.from_client(note("notifications/initialized"), 0.0)
    return g


def forwarded_id(out: Actions) -> int:
    (m,) = msgs(out.to_server)
    assert type(m["id"]) is int
    return int(m["id"])


# -- ids: the server sees guard's, the client gets its own back exactly ---------------------------


@pytest.mark.parametrize("cid", [2**64 + 1, 2**53 + 1, "7", 7, "", 0, -1, "é\u2028"])
def test_the_clients_id_comes_back_exactly(cid: Any) -> None:
    g = GuardCore(protocol="jsonrpc")
    out = g.from_client(req(cid, "echo", {"a": 1}), 0.0)
    gid = forwarded_id(out)
    back = g.from_server(res(gid, {"a": 1}), 0.1)
    (reply,) = msgs(back.to_client)
    assert reply["id"] == cid and type(reply["id"]) is type(cid)
    assert b'"id":' + json.dumps(cid, ensure_ascii=False).encode() in back.to_client[0]


def test_string_and_number_ids_in_flight_together_stay_apart() -> None:
    g = GuardCore(protocol="jsonrpc")
    g1 = forwarded_id(g.from_client(req("7", "a"), 0.0))
    g2 = forwarded_id(g.from_client(req(7, "b"), 0.0))
    assert g1 != g2
    assert msgs(g.from_server(res(g2, "B"), 0.1).to_client) == [{"jsonrpc": "2.0", "id": 7, "result": "B"}]
    assert msgs(g.from_server(res(g1, "A"), 0.1).to_client) == [{"jsonrpc": "2.0", "id": "7", "result": "A"}]


def test_duplicate_in_flight_ids_under_mcp_refused_the_first_untouched() -> None:
    g = mcp_session()
    first = forwarded_id(g.from_client(req(5, "tools/call", {"name": "slow"}), 0.0))
    out = g.from_client(req(5, "tools/call", {"name": "other"}), 0.1)
    assert out.to_server == []
    (err,) = msgs(out.to_client)
    assert err["id"] == 5 and err["error"]["code"] == -32600
    assert msgs(g.from_server(res(first, {"content": []}), 0.2).to_client)[0]["id"] == 5
    assert g.contained["mcp.duplicate-id"] == 1


def test_plain_jsonrpc_duplicate_ids_are_both_answered() -> None:
    g = GuardCore(protocol="jsonrpc")
    a = forwarded_id(g.from_client(req(1, "a"), 0.0))
    c = forwarded_id(g.from_client(req(1, "b"), 0.0))
    assert [m["id"] for m in msgs(g.from_server(res(c), 0.1).to_client) + msgs(g.from_server(res(a), 0.1).to_client)] == [1, 1]


def test_progress_tokens_and_cancels_are_mapped() -> None:
    g = mcp_session()
    out = g.from_client(req("x", "tools/call", {"name": "slow", "_meta": {"progressToken": 2**70}}), 0.0)
    (fwd,) = msgs(out.to_server)
    gid = fwd["id"]
    assert fwd["params"]["_meta"]["progressToken"] == gid
    prog = g.from_server(note("notifications/progress", {"progressToken": gid, "progress": 1}), 0.1)
    assert msgs(prog.to_client) == [{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 2**70, "progress": 1}}]
    cancel = g.from_client(note("notifications/cancelled", {"requestId": "x", "reason": "r"}), 0.2)
    assert msgs(cancel.to_server) == [{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": gid, "reason": "r"}}]
    late = g.from_server(res(gid, {"content": []}), 0.3)
    assert late.to_client == []  # cancelled: the client expects no reply


def test_server_requests_are_mapped_both_ways() -> None:
    g = mcp_session()
    out = g.from_server(req("srv-1", "sampling/createMessage", {"messages": []}), 0.0)
    (to_client,) = msgs(out.to_client)
    assert to_client["method"] == "sampling/createMessage" and type(to_client["id"]) is int
    back = g.from_client(res(to_client["id"], {"text": "hi"}), 0.1)
    assert msgs(back.to_server) == [{"jsonrpc": "2.0", "id": "srv-1", "result": {"text": "hi"}}]
    assert g.from_client(res(to_client["id"], {"text": "again"}), 0.2).to_server == []  # answered already


# -- what a correct server refuses, guard answers ------------------------------------------------

BAD_INPUT = [
    (b"{not json", -32700, None),
    (b'{"jsonrpc":"2.0","id":1,"method":"m"} trailing', -32700, None),
    (b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":NaN}}', -32700, None),
    (b'{"jsonrpc":"2.0","id":1,"method":"\xff"}', -32700, None),
    (b'{"jsonrpc":"2.0","id":1,"method":"\\ud800"}', -32700, None),
    (b"[]", -32600, None),
    (b'{"jsonrpc":"1.0","id":3,"method":"m"}', -32600, 3),
    (b'{"jsonrpc":"2.0","id":{"a":1},"method":"m"}', -32600, None),
    (b"[" * 300 + b"]" * 300, -32600, None),
]


@pytest.mark.parametrize(("frame", "code", "id"), BAD_INPUT)
def test_what_a_server_refuses_never_reaches_it(frame: bytes, code: int, id: Any) -> None:
    g = GuardCore(protocol="jsonrpc")
    out = g.from_client(frame, 0.0)
    assert out.to_server == []
    (err,) = msgs(out.to_client)
    assert err["error"]["code"] == code and err["id"] == id
    assert sum(g.contained.values()) == 1


def test_mcp_rules_of_the_negotiated_version() -> None:
    g = GuardCore()
    before = g.from_client(req(1, "tools/list", {}), 0.0)  # MCP by its method, before initialize
    assert before.to_server == [] and msgs(before.to_client)[0]["error"]["code"] == -32600
    g = mcp_session()
    for frame in (req(None, "tools/list", {}), req(2, "tools/call", ["a"]), b"[" + req(3, "tools/list", {}) + b"]"):
        out = g.from_client(frame, 0.0)
        assert out.to_server == [], frame
        assert len(msgs(out.to_client)) == 1
    assert {"mcp.params-array", "mcp.batch", "ids.invalid-type"} <= set(g.contained)
    assert g.from_client(note("notifications/whatever", ["not an object"]), 0.0).to_server == []  # never answered


def test_a_batch_on_2025_03_26_goes_as_single_messages_and_comes_back_as_one() -> None:
    g = mcp_session("2025-03-26")
    out = g.from_client(b"[" + req("a", "tools/list", {}) + b"," + note("notifications/x", {}) + b"," + b'{"bad":1}' + b"," + req("b", "ping") + b"]", 0.0)
    sent = msgs(out.to_server)
    assert [m.get("method") for m in sent] == ["tools/list", "notifications/x", "ping"]
    assert out.to_client == []
    requests = [m["id"] for m in sent if "id" in m]
    assert g.from_server(res(requests[1], {}), 0.1).to_client == []
    (batch,) = msgs(g.from_server(res(requests[0], {"tools": []}), 0.2).to_client)
    assert sorted(str(m["id"]) for m in batch) == ["None", "a", "b"]


# -- the server's side ---------------------------------------------------------------------------


def test_guard_drops_what_the_client_cannot_expect() -> None:
    g = GuardCore(protocol="jsonrpc")
    gid = forwarded_id(g.from_client(req(1), 0.0))
    assert g.from_server(b"Loading... 42%", 0.1).to_client == []
    assert msgs(g.from_server(res(gid), 0.2).to_client) == [{"jsonrpc": "2.0", "id": 1, "result": "ok"}]
    dup = g.from_server(res(gid, "again"), 0.3)
    assert dup.to_client == [] and any("ids.duplicate-reply" in line for line in dup.log)
    assert g.from_server(res("ghost"), 0.3).to_client == []
    g.from_client(note("hello"), 0.4)
    assert g.from_server(b({"jsonrpc": "2.0", "id": None, "result": 1}), 0.5).to_client == []
    assert g.from_server(note("log", {}), 0.6).to_client == [note("log", {})]  # server-initiated traffic passes


def test_leaky_errors_and_tool_failures_are_made_plain() -> None:
    g = mcp_session()
    gid = forwarded_id(g.from_client(req(1, "tools/call", {"name": "x"}), 0.0))
    leak = {"code": -32603, "message": 'Traceback (most recent call last):\n  File "/srv/app.py", line 3'}
    out = g.from_server(b({"jsonrpc": "2.0", "id": gid, "error": leak}), 0.1)
    (reply,) = msgs(out.to_client)
    assert reply["error"]["code"] == -32603 and reply["error"]["message"] == "Internal error"
    incident = reply["error"]["data"]["incident"]
    assert any(incident in line and "app.py" in line for line in out.log)
    gid = forwarded_id(g.from_client(req(2, "tools/call", {"name": "x"}), 0.2))
    failed = {"content": [{"type": "text", "text": "KeyError: 'city' at /home/u/srv/tool.py"}], "isError": True}
    (reply,) = msgs(g.from_server(res(gid, failed), 0.3).to_client)
    assert reply["result"]["isError"] is True and "KeyError" not in json.dumps(reply)
    kept = GuardCore(keep_tool_errors=True, protocol="mcp")
    kept.from_client(req(0, "initialize", INIT), 0.0)
    gid = forwarded_id(kept.from_client(req(2, "tools/call", {"name": "x"}), 0.2))
    assert msgs(kept.from_server(res(gid, failed), 0.3).to_client)[0]["result"] == failed


def test_modern_results_get_their_result_type() -> None:
    g = GuardCore()
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    gid = forwarded_id(g.from_client(req(1, "tools/list", {"_meta": meta}), 0.0))
    (reply,) = msgs(g.from_server(res(gid, {"tools": []}), 0.1).to_client)
    assert reply["result"] == {"tools": [], "resultType": "complete"}


def test_guard_replaces_a_malformed_reply_with_an_error() -> None:
    g = GuardCore(protocol="jsonrpc")
    gid = forwarded_id(g.from_client(req(1), 0.0))
    (reply,) = msgs(g.from_server(b({"jsonrpc": "2.0", "id": gid}), 0.1).to_client)
    assert reply["id"] == 1 and reply["error"]["code"] == INVALID_REPLY_CODE


# -- deadlines, slots and death ------------------------------------------------------------------


def test_guard_deadline_answers_and_cancels_mcp() -> None:
    g = GuardCore(deadline=2.0)
    g.from_client(req(0, "initialize", INIT), 0.0)
    g.from_server(res(1, INIT_RESULT), 0.1)
    g.from_client(note("notifications/initialized"), 0.1)
    gid = forwarded_id(g.from_client(req(5, "tools/call", {"name": "slow"}), 1.0))
    assert g.next_deadline() == 3.0
    assert g.tick(2.9).to_client == []
    out = g.tick(3.0)
    (reply,) = msgs(out.to_client)
    assert reply["id"] == 5 and reply["error"]["code"] == DEADLINE_CODE and "2 s" in reply["error"]["message"]
    (cancel,) = msgs(out.to_server)
    assert cancel["method"] == "notifications/cancelled" and cancel["params"]["requestId"] == gid
    late = g.from_server(res(gid), 4.0)
    assert late.to_client == [] and any("late reply" in line for line in late.log)
    assert not any("ids.unknown-reply" in line for line in late.log)  # it crossed the cancel: no violation


def test_guard_deadline_cancel_by_protocol() -> None:
    lsp = GuardCore(deadline=1.0, content_length=True)
    gid = forwarded_id(lsp.from_client(req("a", "textDocument/hover"), 0.0))
    assert msgs(lsp.tick(1.0).to_server) == [{"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": gid}}]
    plain = GuardCore(deadline=1.0)
    plain.from_client(req("a"), 0.0)
    out = plain.tick(5.0)
    assert out.to_server == [] and len(out.to_client) == 1


def test_guard_max_in_flight_holds_requests_in_order_never_drops() -> None:
    g = GuardCore(max_in_flight=2, protocol="jsonrpc")
    sent: list[bytes] = []
    for i in range(5):
        sent += g.from_client(req(i), 0.0).to_server
    assert [m["id"] for m in msgs(sent)] == [1, 2] and g.waiting == 3
    assert g.from_client(note("n"), 0.0).to_server == [note("n")]  # notifications are never held
    out = g.from_server(res(2), 0.1)
    assert msgs(out.to_client)[0]["id"] == 1 and [m["id"] for m in msgs(out.to_server)] == [3]
    assert [m["id"] for m in msgs(g.from_server(res(1), 0.2).to_server)] == [4]
    out = g.from_server(res(3), 0.3)
    assert [m["id"] for m in msgs(out.to_server)] == [5] and g.waiting == 0 and g.in_flight == 2


def test_a_request_cancelled_while_held_never_reaches_the_server() -> None:
    g = mcp_session()
    g.max_in_flight = 1
    g.from_client(req(1, "tools/call", {"name": "a"}), 0.0)
    g.from_client(req(2, "tools/call", {"name": "b"}), 0.0)
    out = g.from_client(note("notifications/cancelled", {"requestId": 2}), 0.1)
    assert out.to_server == [] and g.waiting == 0


def test_guard_held_request_past_its_deadline_is_answered_without_a_cancel() -> None:
    g = GuardCore(max_in_flight=1, deadline=1.0, cancel="mcp", protocol="jsonrpc")
    g.from_client(req(1), 0.0)
    g.from_client(req(2), 0.0)
    g.from_client(req(3), 0.9)
    out = g.tick(1.0)  # 1 (in flight) and 2 (held) both expire; 3 is released
    assert sorted(m["id"] for m in msgs(out.to_client)) == [1, 2]
    assert [m["params"]["requestId"] for m in msgs(out.to_server) if "method" in m and "cancelled" in m["method"]] == [1]
    assert msgs(out.to_server)[-1]["id"] == 3


def test_guard_answers_everything_pending_when_the_server_dies() -> None:
    g = GuardCore(max_in_flight=1, protocol="jsonrpc")
    g.from_client(req(1), 0.0)
    g.from_client(req(2), 0.0)
    out = g.server_gone(3)
    replies = msgs(out.to_client)
    assert sorted(r["id"] for r in replies) == [1, 2]
    assert all(r["error"]["code"] == SERVER_GONE_CODE and "code 3" in r["error"]["message"] for r in replies)
    assert g.server_gone(3).to_client == [] and g.open == 0


# -- a property: whatever both sides send, the client gets only valid messages ---------------------


def test_property_only_valid_messages_reach_either_side() -> None:
    from hypothesis import given
    from hypothesis import strategies as st

    from sturdyrpc.check.verdicts import message_problems, response_problems

    scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False, allow_infinity=False),
                        st.sampled_from(["2.0", "1.0", "a", "notifications/progress", "notifications/cancelled", "initialize", "tools/call"]))
    ids = st.one_of(st.integers(0, 4), st.sampled_from(["0", "1"]), st.none(), st.floats(0, 2))
    member = st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error", "extra"])
    inner = st.dictionaries(st.sampled_from(["code", "message", "data", "progressToken", "progress", "requestId", "_meta", "protocolVersion"]), scalars, max_size=3)
    messages = st.dictionaries(member, st.one_of(scalars, ids, inner), max_size=5)
    traffic = st.lists(st.one_of(messages, st.lists(messages, max_size=3), scalars), max_size=12)

    def valid(payloads: list[bytes]) -> None:
        for payload in payloads:
            msg = json.loads(payload)
            for m in msg if type(msg) is list else [msg]:
                assert type(m) is dict
                if "method" in m:
                    assert message_problems(m) == [], m
                else:
                    assert response_problems(m, id_may_be_omitted=True) == [], m

    @given(traffic, traffic, st.sampled_from(["auto", "mcp", "jsonrpc"]))
    def run(client: list[Any], server: list[Any], protocol: Any) -> None:
        g = GuardCore(deadline=1.0, max_in_flight=2, protocol=protocol)
        now = 0.0
        for c, s in zip(client, server, strict=False):
            now += 0.3
            out = g.from_client(b(c), now)
            valid(out.to_server)
            out = g.from_server(b(s), now)
            out.extend(g.tick(now))
            valid(out.to_client)
        g.server_gone(1)
        assert g.open == 0
        g.monitor.summary(now + 1)

    run()
