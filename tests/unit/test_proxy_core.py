"""The sans-I/O cores of trace, guard and replay, fed with messages and clock values."""

from __future__ import annotations

import json
from typing import Any

from support.frames import b, err, note, req, res

from sturdyrpc.check.engine import all_checks
from sturdyrpc.check.verdicts import SPECS
from sturdyrpc.proxy.monitor import C2S, EVENTFUL, NAMED, S2C, Monitor, Pending
from sturdyrpc.proxy.replay import Record, Replay, load_session, strip_ignored


def rules(ev: Any) -> list[str]:
    return [v.spec.id for v in ev.all_violations()]


# -- one home for the rules ---------------------------------------------------------------------


def test_checks_take_the_shared_rule_texts_from_verdicts() -> None:
    registered = {c.spec.id: c.spec for c in all_checks()}
    shared = [i for i in SPECS if i in registered]
    assert len(shared) >= 6
    for i in shared:
        assert registered[i] == SPECS[i]


# -- monitor ------------------------------------------------------------------------------------


def test_a_matched_reply_settles_its_request_with_its_duration() -> None:
    m = Monitor()
    m.feed(C2S, req(1, "echo"), 10.0)
    ev = m.feed(S2C, res(1), 10.25)
    assert ev.settled is not None and ev.settled.method == "echo" and ev.duration == 0.25
    assert rules(ev) == [] and not m.pending[C2S]
    assert m.summary(11.0).by_method == {"echo": {"requests": 1}}


def test_id_types_are_told_apart() -> None:
    m = Monitor()
    m.feed(C2S, req(7), 0.0)
    ev = m.feed(S2C, res("7"), 0.1)  # "7" is not 7
    assert rules(ev) == ["ids.unknown-reply"]
    assert len(m.summary(1.0).unanswered) == 1


def test_duplicate_unknown_and_notification_replies_are_flagged() -> None:
    m = Monitor()
    m.feed(C2S, req(1), 0.0)
    assert rules(m.feed(S2C, res(1), 0.1)) == []
    assert rules(m.feed(S2C, res(1), 0.2)) == ["ids.duplicate-reply"]
    assert rules(m.feed(S2C, res(99), 0.3)) == ["ids.unknown-reply"]
    m.feed(C2S, note("ping"), 0.4)
    ev = m.feed(S2C, b({"jsonrpc": "2.0", "id": None, "result": "pong"}), 0.5)
    assert rules(ev) == ["messages.notification-silent"] and ev.unmatched


def test_a_null_id_error_after_unreadable_input_is_expected() -> None:
    m = Monitor()
    ev = m.feed(C2S, b"{not json", 0.0)
    assert ev.kind == "junk" and rules(ev) == []  # the client's junk is the server's to answer
    ev = m.feed(S2C, err(None, -32700), 0.1)
    assert rules(ev) == [] and not ev.unmatched


def test_junk_on_the_servers_stdout_is_flagged_and_shown() -> None:
    m = Monitor()
    ev = m.feed(S2C, b"Loading model... 42%", 0.0)
    assert ev.kind == "junk" and rules(ev) == ["framing.stdout-only-jsonrpc"]
    assert "Loading model" in ev.violations[0].detail


def test_malformed_responses_and_reserved_codes() -> None:
    m = Monitor()
    m.feed(C2S, req(1), 0.0)
    ev = m.feed(S2C, b({"jsonrpc": "2.0", "id": 1, "result": 1, "error": {"code": 1, "message": "m"}}), 0.1)
    assert "messages.response-shape" in rules(ev)
    m.feed(C2S, req(2), 0.2)
    assert rules(m.feed(S2C, err(2, -32100), 0.3)) == ["errors.code-range"]
    m.feed(C2S, req(3), 0.2)
    assert rules(m.feed(S2C, err(3, -32050), 0.3)) == []  # the server-error range is free to use


def test_invalid_requests_from_the_server() -> None:
    m = Monitor()
    ev = m.feed(S2C, b({"jsonrpc": "1.0", "id": 1, "method": 5}), 0.0)
    assert rules(ev) == ["messages.invalid-message"]
    assert rules(m.feed(S2C, b"42", 0.0)) == ["messages.invalid-message"]


def test_mcp_progress_must_increase_and_stop_at_the_reply() -> None:
    m = Monitor()
    m.feed(C2S, req(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}), 0.0)
    m.feed(S2C, res(0, {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "s", "version": "1"}}), 0.1)
    m.feed(C2S, note("notifications/initialized"), 0.2)
    assert m.mcp and m.version == "2025-11-25"
    m.feed(C2S, req(5, "tools/call", {"name": "t", "_meta": {"progressToken": "tok"}}), 1.0)
    prog = lambda v: note("notifications/progress", {"progressToken": "tok", "progress": v})  # noqa: E731
    assert rules(m.feed(S2C, prog(1), 1.1)) == []
    assert rules(m.feed(S2C, prog(1), 1.2)) == ["mcp.progress"]
    m.feed(S2C, res(5, {}), 1.3)
    ev = m.feed(S2C, prog(3), 1.4)
    assert rules(ev) == ["mcp.progress"] and "after the reply" in ev.violations[0].detail


def test_mcp_initialize_result_and_lifecycle() -> None:
    m = Monitor()
    m.feed(C2S, req(0, "initialize", {"protocolVersion": "2025-06-18"}), 0.0)
    ev = m.feed(S2C, res(0, {"protocolVersion": "2025-06-18", "capabilities": {}}), 0.1)
    assert rules(ev) == ["mcp.initialize"] and "serverInfo" in ev.violations[0].detail
    # a server request before notifications/initialized
    assert rules(m.feed(S2C, req("s1", "roots/list", {}), 0.2)) == ["mcp.lifecycle"]
    assert rules(m.feed(S2C, req("s2", "ping"), 0.2)) == []  # ping is allowed


def test_mcp_modern_servers_send_no_requests_and_code_policy() -> None:
    m = Monitor()
    meta = {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}}
    m.feed(C2S, req(1, "tools/list", meta), 0.0)
    assert m.mcp and m.version == "2026-07-28"
    assert rules(m.feed(S2C, err(1, -32002), 0.1)) == ["mcp.error-codes", "mcp.error-codes"]
    assert rules(m.feed(S2C, req("x", "sampling/createMessage", {}), 0.2)) == ["mcp.lifecycle"]


def test_batches_are_judged_element_by_element() -> None:
    m = Monitor()
    m.feed(C2S, b"[" + req(1) + b"," + note("n") + b"," + req(2) + b"]", 0.0)
    ev = m.feed(S2C, b"[" + res(1) + b"," + res(2) + b"," + res(3) + b"]", 0.1)
    assert ev.kind == "batch" and [p.settled is not None for p in ev.parts] == [True, True, False]
    assert rules(ev) == ["ids.unknown-reply"]


def test_summary_lists_unanswered_slowest_and_violations() -> None:
    m = Monitor()
    m.feed(C2S, req(1, "fast"), 0.0)
    m.feed(C2S, req(2, "slow"), 0.0)
    m.feed(C2S, req(3, "never"), 0.0)
    m.feed(S2C, res(1), 0.01)
    m.feed(S2C, res(2), 2.0)
    m.feed(S2C, b"junk", 2.0)
    s = m.summary(5.0)
    assert [(p.method, age) for p, age in s.unanswered] == [("never", 5.0)]
    assert [x[1] for x in s.slowest] == ["slow", "fast"]
    assert s.violation_count == 1


# -- guard --------------------------------------------------------------------------------------


# -- replay -------------------------------------------------------------------------------------


def _records(*items: tuple[str, bytes]) -> list[Record]:
    return [Record(d, json.loads(m), float(i)) for i, (d, m) in enumerate(items)]


def test_replay_sends_one_request_at_a_time_and_compares_without_ids() -> None:
    rec = _records((C2S, req(1, "a")), (C2S, note("n")), (C2S, req(2, "b")), (S2C, res(1, "A")), (S2C, res(2, "B")))
    r = Replay(rec)
    assert r.next_messages() == [req(1, "a")]
    assert r.next_messages() == []  # waits for the reply to 1
    r.from_server(json.loads(res(1, "A")))
    assert r.next_messages() == [note("n"), req(2, "b")]
    r.from_server(json.loads(res(2, "other")))
    assert r.done and r.compared == 2
    (d,) = r.differences
    assert d.method == "b" and '-  "result": "B"' in d.diff and '+  "result": "other"' in d.diff


def test_replay_maps_the_ids_of_server_requests() -> None:
    rec = _records(
        (C2S, req(1, "tools/call")),
        (S2C, req(100, "sampling/createMessage", {})),
        (C2S, res(100, {"text": "hi"})),
        (S2C, res(1, "done")),
    )
    r = Replay(rec)
    assert r.next_messages() == [req(1, "tools/call")]
    answer = r.from_server({"jsonrpc": "2.0", "id": 7, "method": "sampling/createMessage", "params": {}})
    assert [json.loads(a) for a in answer] == [{"jsonrpc": "2.0", "id": 7, "result": {"text": "hi"}}]
    r.from_server(json.loads(res(1, "done")))
    assert r.done and r.differences == []


def test_replay_missing_reply_is_a_difference_and_ignore_paths_work() -> None:
    r = Replay(_records((C2S, req(1)), (S2C, res(1))))
    r.next_messages()
    r.missing_reply()
    assert len(r.differences) == 1 and r.differences[0].got is None
    v = {"result": {"a": 1, "time": 5, "items": [{"ts": 1, "k": 2}, {"ts": 3, "k": 4}]}}
    assert strip_ignored(v, ["result.time", "result.items.*.ts"]) == {"result": {"a": 1, "items": [{"k": 2}, {"k": 4}]}}
    assert strip_ignored(v, ["ts"]) == {"result": {"a": 1, "time": 5, "items": [{"k": 2}, {"k": 4}]}}
    r2 = Replay(_records((C2S, req(1)), (S2C, res(1, {"t": 1, "v": 2}))), ignore=("result.t",))
    r2.next_messages()
    r2.from_server(json.loads(res(1, {"t": 9, "v": 2})))
    assert r2.differences == []


def test_load_session_reads_trace_logs() -> None:
    lines = [
        b'{"sturdyrpc":"trace","format":1,"command":["x"],"framing":"line","wall":0}',
        b'{"dir":"c2s","t":1.0,"wall":2.0,"msg":{"jsonrpc":"2.0","id":1,"method":"a"}}',
        b'{"dir":"s2c","t":1.1,"wall":2.1,"raw":"junk"}',
        b'{"dir":"s2c","t":1.2,"wall":2.2,"msg":{"jsonrpc":"2.0","id":1,"result":1}}',
    ]
    recs = load_session(lines)
    assert [r.dir for r in recs] == ["c2s", "s2c"]


def test_slowest_tolerates_ids_of_different_types_with_equal_durations() -> None:
    m = Monitor()
    for i, rid in enumerate([1, "a", 2.5, None, "b", 3, "c"]):
        m.feed(C2S, req(rid, f"m{i}"), 0.0)
        m.feed(S2C, res(rid), 1.0)  # all take exactly 1 s
    s = m.summary(2.0)
    assert len(s.slowest) == 5 and all(d == 1.0 for d, _, _ in s.slowest)


# -- properties: nothing the server writes crashes the proxies, and guard lets only valid replies out


def _values() -> Any:
    from hypothesis import strategies as st

    scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False, allow_infinity=False),
                        st.sampled_from(["2.0", "1.0", "a", "notifications/progress", "notifications/cancelled", "initialize"]))
    ids = st.one_of(st.integers(0, 3), st.sampled_from(["0", "1"]), st.none(), st.floats(0, 2), st.lists(st.integers(0, 1), max_size=1))
    member = st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error", "extra"])
    messages = st.dictionaries(member, st.one_of(scalars, ids, st.dictionaries(st.sampled_from(["code", "message", "data", "progressToken", "progress", "requestId", "_meta"]), scalars, max_size=3)), max_size=5)
    return st.lists(st.one_of(messages, st.lists(messages, max_size=3), scalars), max_size=12)


def test_the_answer_to_an_empty_batch_is_expected() -> None:
    m = Monitor()
    m.feed(C2S, b"[]", 0.0)
    assert rules(m.feed(S2C, err(None, -32600), 0.1)) == []
    assert rules(m.feed(S2C, b"[]", 0.2)) == ["messages.response-shape"]


def test_an_unreadable_frame_of_the_server_is_flagged() -> None:
    m = Monitor()
    ev = m.feed_unreadable(S2C, "missing Content-Length", 0.0)
    assert rules(ev) == ["framing.stdout-only-jsonrpc"] and "missing Content-Length" in ev.violations[0].detail
    assert rules(m.feed_unreadable(C2S, "invalid Content-Length", 0.0)) == []


def test_labels_name_the_tool() -> None:
    m = Monitor()
    m.feed(C2S, req(1, "tools/call", {"name": "search", "arguments": {}}), 0.0)
    m.feed(C2S, req(2, "resources/read", {"uri": "file:///a"}), 0.0)
    ev = m.feed(S2C, res(1, {}), 0.5)
    assert ev.settled is not None and ev.settled.label == "tools/call search"
    s = m.summary(1.0)
    assert [p.label for p, _ in s.unanswered] == ["resources/read file:///a"] and s.slowest[0][1] == "tools/call search"


def test_live_view_lines_plain_and_coloured() -> None:
    import io

    from sturdyrpc.proxy.view import LiveView

    m = Monitor()
    m.feed(C2S, req(1, "tools/call", {"name": "t"}), 0.0)
    ev = m.feed(S2C, err(1, -32100, "odd"), 0.25)
    plain, coloured = io.StringIO(), io.StringIO()
    LiveView(plain).event(ev)
    LiveView(coloured, colour=True).event(ev)  # through rich when installed
    assert plain.getvalue().startswith('trace: tools/call t id=1 250.0 ms error -32100 "odd"\n')
    assert "errors.code-range" in plain.getvalue()
    assert "tools/call t id=1" in coloured.getvalue() and "errors.code-range" in coloured.getvalue()
    quiet = io.StringIO()
    LiveView(quiet, traffic=False).event(m.feed(S2C, res(5), 0.3))
    assert "ids.unknown-reply" in quiet.getvalue() and "id=5" not in quiet.getvalue().split("VIOLATION")[0]


# -- the fast path: runs of plain frames, judged without an event each, as one frame at a time ------


def _in_runs(m: Monitor, dir: Any, frames: list[Any], now: float) -> list[Any]:
    """What trace does with the frames of one read: runs through feed_plain, the rest through feed."""
    events = []
    i = 0
    while i < len(frames):
        i = m.feed_plain(dir, frames, now, i)
        if i < len(frames):
            events.append(m.feed(dir, frames[i], now))
            i += 1
    return events


def _state(m: Monitor, now: float) -> Any:
    s = m.summary(now)
    return (
        [(p.label, p.id, p.dir, p.token, age) for p, age in s.unanswered],
        s.slowest, s.by_method, s.violation_count, s.mcp_version,
        [(v.spec.id, v.detail, v.side, v.level, v.at) for v in s.violations],
        {d: {k: m._done(d).get(k) for k in ("0", "1", 0, 1, 2, 3)} for d in (C2S, S2C)},
        # what the next frames will be judged against
        (m.mcp, m.version, m._offered, m._initialized, m._init_answered, dict(m._notified), dict(m._unreadable)),
        (sorted(map(repr, m._tokens)), list(m._finished_tokens.items()), list(m._abandoned.items())),
    )


def _traffic() -> Any:
    """Conversations both ways, mostly well-formed (so runs are long) with every kind of trouble."""
    from hypothesis import strategies as st

    ids = st.one_of(st.integers(0, 3), st.sampled_from(["0", "1"]), st.none(), st.just(1.5), st.just(True))
    methods = st.sampled_from(["echo", "tools/call", "ping", "initialize", "notifications/initialized", "notifications/progress",
                               "notifications/cancelled", "server/discover", "notifications/message"])
    params = st.one_of(st.none(), st.just({}), st.just({"name": "t"}), st.just([1]), st.just(5),
                       st.builds(lambda t: {"_meta": {"progressToken": t}}, st.integers(0, 1)),
                       st.builds(lambda t, p: {"progressToken": t, "progress": p}, st.integers(0, 1), st.integers(0, 3)),
                       st.builds(lambda i: {"requestId": i}, st.integers(0, 3)),
                       st.just({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}))

    def call(i: Any, method: str, p: Any, notify: bool) -> bytes:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if p is not None:
            msg["params"] = p
        if not notify:
            msg["id"] = i
        return b(msg)

    calls = st.builds(call, ids, methods, params, st.booleans())
    init_result = {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "s", "version": "1"}}
    replies = st.one_of(st.builds(res, ids, st.sampled_from(["ok", None, init_result])), st.builds(err, ids, st.sampled_from([-32601, -32050, -32000, -32021, 7])))
    odd = st.sampled_from([b"not json", b"[]", b"7", b'{"jsonrpc":"2.0"}', b'{"jsonrpc":"1.0","id":1,"result":1}',
                           b'{"jsonrpc":"2.0","id":1,"result":1,"extra":1}', b'{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"x"}}',
                           b'[{"jsonrpc":"2.0","id":2,"result":1},{"jsonrpc":"2.0","id":3,"result":1}]', b'{"jsonrpc":"2.0","id":1,"result":1e999}',
                           b'{"jsonrpc":"2.0","method":"m","params":{"v":1e999},"id":2}', b'{"jsonrpc":"2.0","id":1,"result":"\xff"}',
                           b'{"jsonrpc":"2.0","method":"m","id":3,"result":1}', b'{"jsonrpc":"2.0","method":"m","error":{"code":1,"message":"x"}}',
                           b'{"jsonrpc":"2.0","id":2,"result":1,"params":{}}', b'{"jsonrpc":"2.0","id":0}'])
    frame = st.one_of(calls, calls, replies, replies, replies, odd)
    reads = st.tuples(st.sampled_from([C2S, S2C]), st.lists(frame, min_size=1, max_size=12))
    return st.lists(reads, max_size=14)


def test_property_runs_judge_every_frame_as_feed_does() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=400)
    @given(_traffic(), st.booleans())
    def run(reads: list[tuple[Any, list[bytes]]], mcp: bool) -> None:
        one, runs = Monitor(mcp=mcp), Monitor(mcp=mcp)
        now = 0.0
        for dir, frames in reads:
            now += 0.25
            singles = [one.feed(dir, f, now) for f in frames]
            events = _in_runs(runs, dir, list(frames), now)
            flagged = [v for ev in singles for v in ev.all_violations()]
            assert [(v.spec.id, v.detail) for ev in events for v in ev.all_violations()] == [(v.spec.id, v.detail) for v in flagged]
            assert _state(runs, now) == _state(one, now)

    run()


def test_a_violation_inside_a_long_run_is_flagged_where_it_is() -> None:
    reqs = [req(i, "echo", {"value": i}) for i in range(300)]
    replies = [res(i) for i in range(300)]
    replies[40] = res(39)  # a duplicate (and 40 never answered)
    replies[120] = b"Loading model... 42%"
    replies[200] = res(9999)  # an id nobody sent
    replies[250] = err(250, -32500)  # a reserved code nobody defined
    replies.insert(260, note("notifications/message", [1]))  # fine: a notification of the server
    reqs.insert(150, note("notifications/cancelled", {"requestId": 7}))
    m = Monitor()
    assert m.feed_plain(C2S, reqs, 1.0) == 150  # the run stops at the cancel: feed judges it
    _in_runs(m, C2S, reqs[150:], 1.0)
    events = _in_runs(m, S2C, replies, 2.0)
    assert [rules(ev) for ev in events if rules(ev)] == [["ids.duplicate-reply"], ["framing.stdout-only-jsonrpc"], ["ids.unknown-reply"], ["errors.code-range"]]
    s = m.summary(3.0)
    assert [p.id for p, _ in s.unanswered] == [40, 120, 200] and s.by_method["echo"] == {"requests": 300, "errors": 1}
    assert s.by_method["notifications/message"] == {"notifications": 1} and s.violation_count == 4


def test_runs_stop_where_the_monitor_learns_something() -> None:
    m = Monitor()
    frames = [req(1, "echo"), req(2, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}}), req(3, "echo")]
    assert m.feed_plain(C2S, frames, 0.0) == 1 and not m.mcp  # initialize: feed notes MCP
    m.feed(C2S, frames[1], 0.0)
    assert m.mcp
    # the client may not send requests before initialize is answered: feed flags it
    assert m.feed_plain(C2S, frames, 0.0, 2) == 2
    assert rules(m.feed(C2S, frames[2], 0.0)) == ["mcp.lifecycle"]
    # a request with a progress token, and its reply, go through feed (token bookkeeping)
    tok = req(4, "tools/call", {"name": "t", "_meta": {"progressToken": "p"}})
    assert m.feed_plain(C2S, [tok], 0.0) == 0
    # max_requests: guard's max-in-flight
    assert Monitor().feed_plain(C2S, [req(1), note("n"), req(2), req(3)], 0.0, 0, 1) == 2
    # the reply to initialize, well-formed as a reply, is judged by feed: its result has rules
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}
    m = Monitor()
    _in_runs(m, C2S, [req(1, "echo"), req(2, "initialize", hello)], 0.0)
    events = _in_runs(m, S2C, [res(1), res(2, {"protocolVersion": "2025-06-18"})], 0.1)
    assert [rules(ev) for ev in events] == [["mcp.initialize"]]
    m = Monitor()
    _in_runs(m, C2S, [req(2, "initialize", hello)], 0.0)
    _in_runs(m, S2C, [res(2, {**hello, "serverInfo": {"name": "s", "version": "1"}})], 0.1)
    assert m.version == "2025-06-18"


def test_envelope_types_are_the_shared_rules_cheaply() -> None:
    # A message the envelope decoder reads, in the shape feed_plain takes as plain, is one the
    # full predicates of check pass: the fast path never hides what they would find.
    import msgspec
    from hypothesis import given, settings

    from sturdyrpc.check.verdicts import UNSET, decode_envelope, message_problems, response_problems

    @settings(max_examples=1500)
    @given(_values())
    def run(values: list[Any]) -> None:
        for v in values:
            try:
                e = decode_envelope(b(v))
            except (msgspec.MsgspecError, RecursionError, ValueError, TypeError):
                continue
            if e.method is not UNSET and e.result is UNSET and e.error is UNSET:
                assert message_problems(v) == []
                if type(e.params) is not list:
                    assert message_problems(v, mcp=True) == []
            elif e.method is UNSET and e.result is not UNSET and e.error is UNSET and e.params is UNSET and e.id is not UNSET:
                assert response_problems(v) == []

    run()


class _Sink:
    """Stands for a pipe writer: keeps what the proxy writes."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write_now(self, data: bytes) -> None:
        self.data += data


def _trace_in_process(framing: str, reads: list[tuple[Any, bytes]]) -> tuple[Any, list[dict[str, Any]], bytes, bytes]:
    """Run TraceProxy's read handling on ``reads`` (without pipes): the monitor, the log records
    (without their wall time) and the bytes passed on each way."""
    import asyncio
    import io

    from sturdyrpc.proxy.trace import TraceProxy
    from sturdyrpc.proxy.view import LiveView

    log = io.BytesIO()
    log.close = lambda: None  # type: ignore[method-assign]  # read it afterwards

    async def go() -> Any:
        p = TraceProxy(["server"], framing=framing, log=log, view=LiveView(io.StringIO(), traffic=False))
        p.to_server, p.to_client = _Sink(), _Sink()  # type: ignore[assignment]
        for k, (dir, data) in enumerate(reads):
            (p.from_client if dir == C2S else p.from_server)(data, float(k))
            if k % 3 == 2:
                await asyncio.sleep(0)  # judged now and then, as between reads
        p._judge(p._backlog_frames)
        p.log.write([])  # type: ignore[union-attr]
        return p

    p = asyncio.run(go())
    records = [json.loads(x) for x in log.getvalue().splitlines()[1:]]
    for r in records:
        del r["wall"]
    return p.monitor, records, bytes(p.to_server.data), bytes(p.to_client.data)


def _records_one_by_one(framing: str, reads: list[tuple[Any, bytes]]) -> tuple[Any, list[dict[str, Any]]]:
    """The reference: the same frames, each through Monitor.feed and TraceLog.message."""
    import io

    from sturdyrpc.proxy.pump import make_framer
    from sturdyrpc.proxy.trace import TraceLog

    m, log = Monitor(), TraceLog(io.BytesIO(), ["server"], framing)
    framers = {C2S: make_framer(framing), S2C: make_framer(framing)}
    out: list[bytes] = []
    for k, (dir, data) in enumerate(reads):
        now = float(k)
        head = log.head(dir, now)
        for frame in framers[dir].feed(data):
            assert type(frame) is bytes
            log.message(out, head, frame, m.feed(dir, frame, now))
    records = [json.loads(x) for x in b"".join(out).splitlines()]
    for r in records:
        del r["wall"]
    return m, records


def test_trace_judges_and_logs_reads_of_many_messages_as_one_by_one() -> None:
    # Many messages a read, a violation in the middle of them, messages cut across reads.
    reqs = b"".join(req(i, "echo", {"value": i}) + b"\n" for i in range(200))
    reps = [res(i) for i in range(200)]
    reps[77] = res(76)  # a duplicate
    reps[150] = b"progress: 50%"  # junk
    reps[151] = b'{"jsonrpc":"2.0",\r"id":151,"result":1}'  # a CR inside: its record is re-encoded
    replies = b"".join(r + b"\n" for r in reps)
    reads = [(C2S, reqs[:5000]), (C2S, reqs[5000:5001]), (C2S, reqs[5001:]),
             (S2C, replies[:3333]), (S2C, replies[3333:7000]), (S2C, replies[7000:])]
    m, records, to_server, to_client = _trace_in_process("line", reads)
    ref, expected = _records_one_by_one("line", reads)
    assert to_server == reqs and to_client == replies  # passed on as they came, in order
    assert records == expected and len(records) == 400
    assert [(v.spec.id, v.detail) for v in m.violations] == [(v.spec.id, v.detail) for v in ref.violations]
    assert [v.spec.id for v in m.violations] == ["ids.duplicate-reply", "framing.stdout-only-jsonrpc"]
    assert m.summary(9.0).by_method == ref.summary(9.0).by_method == {"echo": {"requests": 200}}
    assert [p.id for p, _ in m.summary(9.0).unanswered] == [77, 150] and _state(m, 9.0) == _state(ref, 9.0)


def test_trace_content_length_frames_with_line_breaks_are_logged_one_line_each() -> None:
    def cl(obj: Any, indent: int | None = None) -> bytes:
        body = json.dumps(obj, indent=indent).encode()
        return b"Content-Length: %d\r\n\r\n" % len(body) + body

    reqs = b"".join(cl({"jsonrpc": "2.0", "id": i, "method": "m"}, 2 if i % 2 else None) for i in range(40))
    reps = b"".join(cl({"jsonrpc": "2.0", "id": i, "result": [i]}, 1 if i == 30 else None) for i in [*range(20), 7, *range(20, 40)])
    reads = [(C2S, reqs[:1001]), (C2S, reqs[1001:]), (S2C, reps[:999]), (S2C, reps[999:])]
    m, records, to_server, to_client = _trace_in_process("content-length", reads)
    ref, expected = _records_one_by_one("content-length", reads)
    assert (to_server, to_client) == (reqs, reps) and records == expected and len(records) == 81
    assert [v.spec.id for v in m.violations] == ["ids.duplicate-reply"] == [v.spec.id for v in ref.violations]
    assert _state(m, 9.0) == _state(ref, 9.0) and not m.pending[C2S]


def test_envelopes_a_proxy_holds_are_judged_as_the_bytes_they_encode_to() -> None:
    # guard hands the monitor its own requests as the envelopes it encoded them from, and reads
    # the server's plain replies from the envelopes the monitor decoded (``seen``): the monitor
    # ends in the state the bytes leave, and ``seen`` holds what the frames say.
    import msgspec

    from sturdyrpc.check.verdicts import decode_envelope

    sent = [req(1, "echo", {"value": 1}), req(2, "tools/call", {"name": "t"}), note("n", {}), req(3, "echo", [1]),
            note("notifications/cancelled", {"requestId": 3}), req(4, "echo")]
    replies = [res(2, {"x": 1}), res(1), b"junk", res(9)]
    as_bytes, as_envelopes = Monitor(), Monitor()
    for m, frames in ((as_bytes, sent), (as_envelopes, [decode_envelope(f) for f in sent])):
        assert m.feed_plain(C2S, frames, 0.5) == 4  # the run stops at the cancel, envelopes or not
        i = 4
        while i < len(frames):
            m.feed(C2S, sent[i], 0.5)
            i = m.feed_plain(C2S, frames, 0.5, i + 1)
        seen: list[Any] = []
        end = m.feed_plain(S2C, replies, 1.0, 0, -1, seen)
        assert end == 2 and [msgspec.json.decode(msgspec.json.encode(e)) for e in seen[:end]] == [json.loads(r) for r in replies[:end]]
        for f in replies[end:]:
            m.feed(S2C, f, 1.0)
    assert _state(as_envelopes, 2.0) == _state(as_bytes, 2.0)


def _pending_of(gid: int, method: str, params: Any, now: float) -> Pending:
    # As guard makes it: the name a tools/call, prompts/get or resources/read gives, cut at 80.
    p = Pending(gid, method, C2S, now)
    if method in NAMED and type(params) is dict and type(params.get(NAMED[method])) is str:
        p.name = params[NAMED[method]][:80]
    return p


def test_property_requests_a_proxy_hands_over_leave_the_state_their_bytes_leave() -> None:
    # Monitor.expect against feed: the same traffic, guard's own requests handed over as the
    # Pendings guard makes (fresh ids of its own, params an object without _meta or none, no
    # method that changes the monitor's state) or fed as their bytes, among every kind of other traffic both ways; the replies to
    # some of them come back. The two monitors end in the same state, with the same violations
    # (the lifecycle's, when the handshake is not done, included).
    from hypothesis import given, settings
    from hypothesis import strategies as st

    own = st.tuples(st.sampled_from(["echo", "tools/call", "ping", "prompts/get", "resources/read", "tools/list"]),
                    st.sampled_from([None, {}, {"name": "t" * 90}, {"uri": "u"}, {"name": 7}, [1]]), st.booleans())

    @settings(max_examples=300)
    @given(_traffic(), st.lists(st.lists(own, max_size=4), min_size=14, max_size=14), st.booleans())
    def run(reads: list[tuple[Any, list[bytes]]], owns: list[list[tuple[str, Any, bool]]], mcp: bool) -> None:
        as_bytes, handed = Monitor(mcp=mcp), Monitor(mcp=mcp)
        gid, waiting, now = 100, [], 0.0
        for (dir, frames), mine in zip(reads, owns, strict=False):
            now += 0.25
            if dir == S2C:
                replies = list(frames) + [res(w) for w in waiting[:2]]
                del waiting[:2]
                _in_runs(as_bytes, S2C, replies, now)
                _in_runs(handed, S2C, replies, now)
                continue
            sent: list[bytes] = []
            judged: list[Any] = []
            for k, frame in enumerate(frames):
                sent.append(frame)
                judged.append(frame)
                if k < len(mine):
                    method, params, as_pending = mine[k]
                    if mcp and type(params) is list:
                        params = {}  # guard's gate refuses array params under MCP
                    gid += 1
                    waiting.append(gid)
                    sent.append(req(gid, method, params) if params is not None else b({"jsonrpc": "2.0", "id": gid, "method": method}))
                    handed_over = as_pending and method not in EVENTFUL and type(params) is not list  # as guard decides
                    judged.append(_pending_of(gid, method, params, now) if handed_over else sent[-1])
            _in_runs(as_bytes, C2S, sent, now)
            handed.feed_written(C2S, judged, sent, 0, now)
            assert [(v.spec.id, v.detail, v.level) for v in handed.violations] == [(v.spec.id, v.detail, v.level) for v in as_bytes.violations]
            assert _state(handed, now) == _state(as_bytes, now)

    run()


def test_expect_takes_pendings_until_the_first_that_is_not_one() -> None:
    m = Monitor()
    items: list[Any] = [Pending(1, "echo", C2S, 0.5), Pending(2, "echo", C2S, 0.5), req(3, "echo", {})]
    assert m.expect(C2S, items, 0, 0.5) == 2
    assert m.expect(C2S, items, 2, 0.5) == 2
    assert list(m.pending[C2S]) == [1, 2] and m.counts["echo"] == {"requests": 2}
    assert m.pending[C2S][1] is items[0]  # the object itself is kept
