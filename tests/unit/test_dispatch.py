"""The dispatcher: ids, notifications, responses, batches, limits and leaks."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import pytest

from sturdyrpc import ApplicationError, Dispatcher, InvalidRequest, Limits, RPCError, ServerError
from sturdyrpc.demos.jsonrpc import make_demo
from sturdyrpc.dispatch import BatchJob, Call


def decode(reply: bytes | None) -> Any:
    assert reply is not None
    return msgspec.json.decode(reply)


# ------------------------------------------------------------------------- ids


@pytest.mark.parametrize(
    "id_text",
    [b'"7"', b"7", b"0", b"-1", b"-9007199254740993", b"9007199254740993", b"18446744073709551617", b'""', b'"\xc3\xa9 x"', b"1.0", b"1.5", b"-0.5"],
)
def test_id_echoed_exactly(id_text: bytes) -> None:
    reply = make_demo().handle_sync(b'{"jsonrpc":"2.0","method":"echo","params":["v"],"id":' + id_text + b"}")
    assert reply == b'{"jsonrpc":"2.0","result":"v","id":' + id_text + b"}"


def test_string_and_int_ids_keep_their_type() -> None:
    rpc = make_demo()
    assert decode(rpc.handle_sync(b'{"jsonrpc":"2.0","method":"echo","params":[1],"id":"7"}'))["id"] == "7"
    out = decode(rpc.handle_sync(b'{"jsonrpc":"2.0","method":"echo","params":[1],"id":7}'))["id"]
    assert out == 7 and type(out) is int


def test_null_id_is_a_request_answered_with_null() -> None:
    calls: list[int] = []
    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def ping() -> str:
        calls.append(1)
        return "pong"

    assert rpc.handle_sync(b'{"jsonrpc":"2.0","method":"ping","id":null}') == b'{"jsonrpc":"2.0","result":"pong","id":null}'
    assert calls == [1]


@pytest.mark.parametrize("id_text", [b"true", b"false", b"[1]", b"{}", b'{"a":1}', b"[]"])
def test_bad_id_types_are_invalid_request_with_null_id(id_text: bytes) -> None:
    calls: list[int] = []
    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def ping() -> str:
        calls.append(1)
        return "pong"

    reply = rpc.handle_sync(b'{"jsonrpc":"2.0","method":"ping","id":' + id_text + b"}")
    assert reply == b'{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null}'
    assert calls == []


@pytest.mark.parametrize(
    "msg",
    [
        b'{"jsonrpc":"1.0","method":"echo","params":[1],"id":3}',
        b'{"jsonrpc":2.0,"method":"echo","params":[1],"id":3}',
        b'{"method":"echo","params":[1],"id":3}',
        b'{"jsonrpc":"2.0","method":"echo","params":"x","id":3}',
        b'{"jsonrpc":"2.0","method":"echo","params":1,"id":3}',
        b'{"jsonrpc":"2.0","method":"echo","params":null,"id":3}',
        b'{"jsonrpc":"2.0","method":null,"id":3}',
        b'{"jsonrpc":"2.0","id":3}',
    ],
)
def test_invalid_request_keeps_a_readable_id(msg: bytes) -> None:
    out = decode(make_demo().handle_sync(msg))
    assert out == {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": 3}


# --------------------------------------------------------------- notifications


def _recording() -> tuple[Dispatcher, list[Any]]:
    rpc = Dispatcher()
    seen: list[Any] = []

    @rpc.method(blocking=False)
    def note(x: int) -> int:
        seen.append(x)
        return x

    @rpc.method(blocking=False)
    def explode() -> None:
        seen.append("explode")
        raise RuntimeError("boom")

    @rpc.method(blocking=False)
    def refuse() -> None:
        seen.append("refuse")
        raise ApplicationError(5, "nope")

    return rpc, seen


@pytest.mark.parametrize(
    "msg",
    [
        b'{"jsonrpc":"2.0","method":"note","params":[1]}',
        b'{"jsonrpc":"2.0","method":"no_such_method","params":[1]}',
        b'{"jsonrpc":"2.0","method":"note","params":["bad"]}',
        b'{"jsonrpc":"2.0","method":"note","params":[1,2]}',
        b'{"jsonrpc":"2.0","method":"explode"}',
        b'{"jsonrpc":"2.0","method":"refuse"}',
        b'[{"jsonrpc":"2.0","method":"explode"},{"jsonrpc":"2.0","method":"nope"},{"jsonrpc":"2.0","method":"note","params":{}}]',
    ],
)
def test_notifications_are_never_answered(msg: bytes) -> None:
    rpc, _ = _recording()
    assert rpc.handle_sync(msg) is None


def test_notifications_are_executed() -> None:
    rpc, seen = _recording()
    rpc.handle_sync(b'{"jsonrpc":"2.0","method":"note","params":[1]}')
    rpc.handle_sync(b'{"jsonrpc":"2.0","method":"explode"}')
    rpc.handle_sync(b'[{"jsonrpc":"2.0","method":"note","params":[2]},{"jsonrpc":"2.0","method":"note","params":{"x":3}}]')
    assert seen == [1, "explode", 2, 3]


# ------------------------------------------------------------------- responses


@pytest.mark.parametrize(
    "msg",
    [
        b'{"jsonrpc":"2.0","result":1,"id":1}',
        b'{"jsonrpc":"2.0","result":null,"id":null}',
        b'{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found"},"id":1}',
        b'{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}',
        b'{"jsonrpc":"2.0","error":"garbage","id":1}',
        b'{"jsonrpc":"2.0","result":1,"error":{"code":1,"message":"x"},"id":1}',
        b'{"jsonrpc":"2.0","result":1}',
        b'[{"jsonrpc":"2.0","result":1,"id":1},{"jsonrpc":"2.0","result":2,"id":2}]',
    ],
)
def test_responses_sent_to_a_server_are_not_answered(msg: bytes) -> None:
    rpc = make_demo()
    assert rpc.handle_sync(msg) is None
    assert rpc.stats["responses_ignored"] >= 1


def test_responses_go_to_on_response_when_given() -> None:
    rpc = make_demo()
    got: list[Any] = []
    assert rpc.receive(b'{"jsonrpc":"2.0","result":5,"id":9}', got.append) is None
    assert len(got) == 1 and got[0].id == 9 and got[0].result == 5


def test_response_inside_mixed_batch_is_dropped() -> None:
    out = decode(make_demo().handle_sync(b'[{"jsonrpc":"2.0","result":1,"id":1},{"jsonrpc":"2.0","method":"echo","params":[2],"id":2}]'))
    assert out == [{"jsonrpc": "2.0", "result": 2, "id": 2}]


# --------------------------------------------------------------------- batches


def test_empty_batch() -> None:
    assert make_demo().handle_sync(b"[]") == b'{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"},"id":null}'


def test_batch_of_one_is_an_array() -> None:
    assert make_demo().handle_sync(b'[{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}]') == b'[{"jsonrpc":"2.0","result":1,"id":1}]'


def test_batch_per_element_errors() -> None:
    msg = (
        b'[{"jsonrpc":"2.0","method":"echo","params":[1],"id":1},'
        b'5,'
        b'{"jsonrpc":"2.0","method":"nope","id":2},'
        b'{"jsonrpc":"2.0","method":"echo","params":[1,2],"id":3},'
        b'{"jsonrpc":"2.0","method":"echo","params":[4]},'
        b'{"jsonrpc":"2.0","method":"fail","id":4},'
        b'{"jsonrpc":"2.0","method":"echo","params":[5],"id":true},'
        b'[]]'
    )
    out = decode(make_demo().handle_sync(msg))
    assert isinstance(out, list) and len(out) == 7
    by_id: dict[Any, list[Any]] = {}
    for e in out:
        by_id.setdefault(e["id"], []).append(e)
    assert by_id[1] == [{"jsonrpc": "2.0", "result": 1, "id": 1}]
    assert by_id[2][0]["error"]["code"] == -32601
    assert by_id[3][0]["error"]["code"] == -32602
    assert by_id[4][0]["error"]["code"] == -32603
    assert [e["error"]["code"] for e in by_id[None]] == [-32600, -32600, -32600]


def test_all_notification_batch_writes_nothing() -> None:
    rpc = make_demo()
    assert rpc.handle_sync(b'[{"jsonrpc":"2.0","method":"record","params":[1]},{"jsonrpc":"2.0","method":"record","params":[2]}]') is None
    assert decode(rpc.handle_sync(b'{"jsonrpc":"2.0","method":"recorded","id":1}'))["result"] == [1, 2]


@pytest.mark.parametrize(
    "msg",
    [
        b'[{"jsonrpc":"2.0","method":"echo","params":[1],"id":1},{"jsonrpc":"2.0","method"]',
        b'[{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}',
        b'[{"jsonrpc":"2.0","method":"echo","params":[NaN],"id":1}]',
        b'[{"jsonrpc":"2.0","method":"record","params":[1]}, x]',
    ],
)
def test_invalid_json_anywhere_in_batch_is_one_parse_error(msg: bytes) -> None:
    rpc = make_demo()
    assert rpc.handle_sync(msg) == b'{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}'
    assert decode(rpc.handle_sync(b'{"jsonrpc":"2.0","method":"recorded","id":1}'))["result"] == []  # nothing ran


def test_batch_over_max_batch_is_one_invalid_request_and_nothing_runs() -> None:
    rpc = make_demo(Limits(max_batch=3))
    ok = b"[" + b",".join(b'{"jsonrpc":"2.0","method":"record","params":[%d],"id":%d}' % (i, i) for i in range(3)) + b"]"
    assert len(decode(rpc.handle_sync(ok))) == 3
    too_many = b"[" + b",".join(b'{"jsonrpc":"2.0","method":"record","params":[%d],"id":%d}' % (i, i) for i in range(4)) + b"]"
    out = decode(rpc.handle_sync(too_many))
    assert isinstance(out, dict)
    assert out["error"]["code"] == -32600 and out["id"] is None
    assert decode(rpc.handle_sync(b'{"jsonrpc":"2.0","method":"recorded","id":1}'))["result"] == [0, 1, 2]


def test_receive_returns_a_batch_job_with_calls() -> None:
    rpc = make_demo()
    job = rpc.receive(b'[{"jsonrpc":"2.0","method":"echo","params":[1],"id":1},{"jsonrpc":"2.0","method":"nope","id":2}]')
    assert isinstance(job, BatchJob) and len(job.calls) == 1
    assert rpc.result(job.calls[0], 1) is None  # collected, not sent alone
    assert len(decode(job.finish())) == 2
    call = rpc.receive(b'{"jsonrpc":"2.0","method":"echo","params":{"value":1},"id":"x"}')
    assert isinstance(call, Call) and call.request_id == "x" and not call.is_notification and call.invoke() == 1


def test_message_too_large() -> None:
    rpc = make_demo(Limits(max_message_bytes=100))
    out = decode(rpc.handle_sync(b'{"jsonrpc":"2.0","method":"echo","params":["' + b"x" * 200 + b'"],"id":1}'))
    assert out["error"]["code"] == -32600 and out["id"] is None


# ----------------------------------------------------------------------- leaks

SECRET = "SECRET-TOKEN-42 /etc/shadow"


def test_unexpected_exception_leaks_nothing_and_logs_incident(caplog: pytest.LogCaptureFixture) -> None:
    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def boom() -> None:
        raise RuntimeError(SECRET)

    with caplog.at_level(logging.ERROR, logger="sturdyrpc"):
        reply = rpc.handle_sync(b'{"jsonrpc":"2.0","method":"boom","id":1}')
    assert reply is not None
    text = reply.decode()
    for needle in ("SECRET-TOKEN-42", "shadow", "RuntimeError", "Traceback", "/", ".py", "boom()"):
        assert needle not in text, f"{needle!r} leaked: {text}"
    out = msgspec.json.decode(reply)
    assert out["error"]["code"] == -32603 and out["error"]["message"] == "Internal error" and out["id"] == 1
    incident = out["error"]["data"]["incident"]
    assert isinstance(incident, str) and 4 <= len(incident) <= 32
    records = [r for r in caplog.records if incident in r.getMessage()]
    assert records, "the incident id is not in the log"
    rec = records[0]
    assert rec.exc_info is not None and isinstance(rec.exc_info[1], RuntimeError)
    formatted = logging.Formatter().format(rec)
    assert "Traceback" in formatted and SECRET in formatted


def test_demo_fail_leaks_nothing_in_a_batch() -> None:
    reply = make_demo().handle_sync(b'[{"jsonrpc":"2.0","method":"fail","id":1},{"jsonrpc":"2.0","method":"fail","id":2}]')
    assert reply is not None
    for needle in (b"SECRET", b"RuntimeError", b"Traceback", b"/", b".py"):
        assert needle not in reply
    incidents = {e["error"]["data"]["incident"] for e in msgspec.json.decode(reply)}
    assert len(incidents) == 2, "each failure gets its own incident id"


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (ApplicationError(42, "Out of stock", {"sku": "A1"}), {"code": 42, "message": "Out of stock", "data": {"sku": "A1"}}),
        (ApplicationError(-1, "no data"), {"code": -1, "message": "no data"}),
        (ServerError("Busy", {"retry": 2}, code=-32001), {"code": -32001, "message": "Busy", "data": {"retry": 2}}),
        (InvalidRequest("Nope"), {"code": -32600, "message": "Nope"}),
        (RPCError("custom", None, code=7), {"code": 7, "message": "custom", "data": None}),
    ],
)
def test_rpc_error_raised_on_purpose_goes_out_as_is(exc: RPCError, expected: dict[str, Any]) -> None:
    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def refuse() -> None:
        raise exc

    @rpc.method
    async def arefuse() -> None:
        raise exc

    for m in (b"refuse", b"arefuse"):
        out = decode(rpc.handle_sync(b'{"jsonrpc":"2.0","method":"' + m + b'","id":"r"}'))
        assert out == {"jsonrpc": "2.0", "error": expected, "id": "r"}


def test_unencodable_error_data_falls_back_cleanly() -> None:
    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def weird() -> None:
        raise ApplicationError(3, "weird", {"x": object()})

    out = decode(rpc.handle_sync(b'{"jsonrpc":"2.0","method":"weird","id":1}'))
    assert out["error"]["code"] == 3 and out["id"] == 1
    assert "object at" not in str(out)


# ---------------------------------------------------------------- registration


def test_registration_names_and_reserved_prefix() -> None:
    rpc = Dispatcher()

    @rpc.method
    def plain() -> int:
        return 1

    @rpc.method(name="other.name")
    def renamed() -> int:
        return 2

    assert set(rpc.methods) == {"plain", "other.name"}
    with pytest.raises(ValueError):
        rpc.add_method(plain, "rpc.discover")


def test_async_handler_via_handle_sync() -> None:
    rpc = Dispatcher()

    @rpc.method
    async def double(x: int) -> int:
        return 2 * x

    assert rpc.handle_sync(b'{"jsonrpc":"2.0","method":"double","params":[21],"id":1}') == b'{"jsonrpc":"2.0","result":42,"id":1}'


def test_sys_exit_in_handler_is_internal_error_not_an_exit() -> None:
    import sys

    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def leave() -> None:
        sys.exit("SECRET-TOKEN-42 /etc/shadow")

    @rpc.method
    async def aleave() -> None:
        sys.exit(3)

    for m in (b"leave", b"aleave"):
        out = decode(rpc.handle_sync(b'{"jsonrpc":"2.0","method":"' + m + b'","id":1}'))
        assert out["error"]["code"] == -32603 and "SECRET" not in str(out)
