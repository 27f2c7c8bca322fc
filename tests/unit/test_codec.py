"""The strict JSON codec, and what the dispatcher makes of what it refuses."""

from __future__ import annotations

import math

import msgspec
import pytest

from sturdyrpc import codec
from sturdyrpc.demos.jsonrpc import make_demo
from sturdyrpc.dispatch import Call, Dispatcher
from sturdyrpc.limits import Limits
from sturdyrpc.mcp.profile import MCPProfile
from sturdyrpc.messages import InvalidMessage

REJECTED = {
    "nan-literal": b'{"x": NaN}',
    "infinity-literal": b'{"x": Infinity}',
    "minus-infinity-literal": b'{"x": -Infinity}',
    "invalid-utf8": b'{"x": "\xff\xfe"}',
    "truncated-utf8": b'{"x": "\xe2\x82"}',
    "overlong-utf8": b'{"x": "\xc0\xaf"}',
    "lone-high-surrogate-escape": b'{"x": "\\ud800"}',
    "lone-low-surrogate-escape": b'{"x": "\\udc00"}',
    "trailing-garbage": b'{"x": 1} x',
    "two-documents": b'{"x": 1}{"x": 2}',
    "bom": b'\xef\xbb\xbf{"x": 1}',
    "single-quotes": b"{'x': 1}",
    "trailing-comma": b'{"x": 1,}',
    "empty": b"",
    "leading-zero": b"01",
}


@pytest.mark.parametrize("data", REJECTED.values(), ids=REJECTED.keys())
def test_codec_rejects(data: bytes) -> None:
    with pytest.raises(codec.DecodeFailure) as info:
        codec.decode(data)
    assert isinstance(info.value.reason, str) and info.value.reason
    assert not info.value.too_deep


@pytest.mark.parametrize("data", REJECTED.values(), ids=REJECTED.keys())
def test_dispatcher_answers_rejected_input_with_parse_error(data: bytes) -> None:
    # Inside a request, too: a NaN param or a bad byte makes the whole message unparsable.
    reply = make_demo().handle_sync(data)
    assert reply == b'{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}'


def test_valid_surrogate_pair_accepted() -> None:
    assert codec.decode(b'"\\ud83d\\ude00"') == "\U0001f600"


@pytest.mark.parametrize(
    "text",
    [
        "18446744073709551616",  # 2^64
        "18446744073709551617",  # 2^64 + 1
        "-18446744073709551617",
        "123456789012345678901234567890",
        "9" * 200,
        "9007199254740993",  # 2^53 + 1: a double would round it
    ],
)
def test_big_integers_round_trip_exactly(text: str) -> None:
    value = codec.decode(text.encode())
    assert type(value) is int and value == int(text)
    assert codec.encode(value) == text.encode()


def test_big_integer_id_round_trips_through_dispatch() -> None:
    big = 2**64 + 1
    reply = make_demo().handle_sync(b'{"jsonrpc":"2.0","method":"echo","params":[%d],"id":%d}' % (big * 3, big))
    assert reply == b'{"jsonrpc":"2.0","result":%d,"id":%d}' % (big * 3, big)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, [1, {"a": [math.inf]}], {"k": math.nan}])
def test_encode_refuses_non_finite(value: object) -> None:
    with pytest.raises(codec.NonFiniteFloat):
        codec.encode(value)


def test_encode_does_not_confuse_null_with_nan() -> None:
    assert codec.encode([None, 1.5, "null"]) == b'[null,1.5,"null"]'


def test_encode_unencodable_is_type_error() -> None:
    with pytest.raises(TypeError):
        codec.encode(object())


def _assert_internal_error(reply: bytes | None, id_: bytes) -> None:
    assert reply is not None
    assert b"Infinity" not in reply and b"NaN" not in reply
    obj = msgspec.json.decode(reply)
    assert obj["error"]["code"] == -32603
    assert obj["error"]["message"] == "Internal error"
    assert "result" not in obj
    assert reply.endswith(b'"id":' + id_ + b"}")


def test_sum_overflow_is_internal_error_not_infinity() -> None:
    reply = make_demo().handle_sync(b'{"jsonrpc":"2.0","method":"sum","params":[1e308,1e308],"id":1}')
    _assert_internal_error(reply, b"1")


def test_non_finite_result_in_batch_is_internal_error_for_that_element_only() -> None:
    reply = make_demo().handle_sync(
        b'[{"jsonrpc":"2.0","method":"sum","params":[1e308,1e308],"id":1},{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":2}]'
    )
    assert reply is not None and b"Infinity" not in reply and b"null," not in reply.replace(b'"id":null', b"")
    items = {e["id"]: e for e in msgspec.json.decode(reply)}
    assert items[1]["error"]["code"] == -32603
    assert items[2] == {"jsonrpc": "2.0", "result": 3, "id": 2}


def test_nan_and_unencodable_results() -> None:
    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def nan() -> list[float]:
        return [1.0, math.nan]

    @rpc.method(blocking=False)
    def obj() -> object:
        return object()

    _assert_internal_error(rpc.handle_sync(b'{"jsonrpc":"2.0","method":"nan","id":"a"}'), b'"a"')
    _assert_internal_error(rpc.handle_sync(b'{"jsonrpc":"2.0","method":"obj","id":2}'), b"2")


def test_depth_limit_in_codec() -> None:
    ok = b"[" * 10 + b"]" * 10
    assert codec.decode_bounded(ok, 10) is not None
    with pytest.raises(codec.DecodeFailure) as info:
        codec.decode_bounded(b"[" * 11 + b"]" * 11, 10)
    assert info.value.too_deep
    # Brackets inside strings do not count.
    assert codec.decode_bounded(b'["' + b"[" * 100 + b'"]', 10) == ["[" * 100]
    # Objects count too.
    with pytest.raises(codec.DecodeFailure):
        codec.decode_bounded(b'{"a":' * 11 + b"1" + b"}" * 11, 10)


def test_extreme_nesting_is_clean_failure_not_recursion_error() -> None:
    for data in (b"[" * 100_000, b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 50_000):
        with pytest.raises(codec.DecodeFailure):
            codec.decode_bounded(data, 256)


def test_dispatcher_depth_limit() -> None:
    rpc = make_demo(Limits(max_depth=8))
    shallow = b'{"jsonrpc":"2.0","method":"echo","params":[' + b"[" * 6 + b"]" * 6 + b'],"id":1}'
    assert msgspec.json.decode(rpc.handle_sync(shallow) or b"")["id"] == 1
    assert "result" in msgspec.json.decode(rpc.handle_sync(shallow) or b"")
    deep = b'{"jsonrpc":"2.0","method":"echo","params":[' + b"[" * 20 + b"]" * 20 + b'],"id":1}'
    reply = msgspec.json.decode(rpc.handle_sync(deep) or b"")
    assert reply["error"]["code"] == -32600 and reply["id"] is None
    for data in (b"[" * 100_000, b"{" * 100_000):
        reply = msgspec.json.decode(make_demo().handle_sync(data) or b"")
        assert reply["error"]["code"] in (-32600, -32700) and reply["id"] is None


# ------------------------------------------------ ids that cannot be read or echoed exactly

def _req(id_literal: bytes, params: bytes = b"[1]") -> bytes:
    return b'{"jsonrpc":"2.0","method":"echo","params":' + params + b',"id":' + id_literal + b"}"


LONG_INT = b"7" * 4301


def _answer(reply: bytes | None) -> dict[str, object]:
    assert reply is not None
    obj = msgspec.json.decode(reply)
    assert isinstance(obj, dict)
    return obj


def test_integer_id_longer_than_4300_digits_gets_invalid_request_naming_the_bound() -> None:
    for literal in (LONG_INT, b"-" + LONG_INT[1:]):
        for reply in (make_demo().handle_sync(_req(literal)), make_demo().receive(_req(literal))):
            answer = _answer(reply)  # type: ignore[arg-type]
            assert answer["id"] is None
            error = answer["error"]
            assert isinstance(error, dict) and error["code"] == -32600
            assert "4300" in error["message"] and "integer" in error["message"]
            assert error["data"] == {"limit": "integer_chars", "max": 4300}


def test_integer_id_of_exactly_4300_characters_round_trips() -> None:
    for literal in (b"7" * 4300, b"-" + b"7" * 4299):
        assert make_demo().handle_sync(_req(literal)) == b'{"jsonrpc":"2.0","result":1,"id":' + literal + b"}"


@pytest.mark.parametrize("literal", [b"1e-400", b"-2.5e-330", b"4.9e-324", b"9007199254740993.0", b"0.30000000000000001"])
def test_fractional_id_a_double_would_alter_is_refused_not_silently_changed(literal: bytes) -> None:
    answer = _answer(make_demo().handle_sync(_req(literal)))
    assert answer["id"] is None
    error = answer["error"]
    assert isinstance(error, dict) and error["code"] == -32600
    assert literal.decode() in error["message"] and "cannot be echoed exactly" in error["message"]


@pytest.mark.parametrize("literal", [b"1e400", b"-1e400", b"1" * 400 + b".5"])
def test_fractional_id_beyond_a_double_is_invalid_request_not_parse_error(literal: bytes) -> None:
    answer = _answer(make_demo().handle_sync(_req(literal)))
    assert answer["id"] is None
    error = answer["error"]
    assert isinstance(error, dict) and error["code"] == -32600 and "64-bit float" in error["message"]


@pytest.mark.parametrize(("literal", "echoed"), [(b"1.5", b"1.5"), (b"0.1", b"0.1"), (b"1E2", b"100.0"), (b"-0.0", b"-0.0"), (b"2.5e-300", b"2.5e-300")])
def test_fractional_id_a_double_holds_exactly_is_echoed_as_the_same_number(literal: bytes, echoed: bytes) -> None:
    assert make_demo().handle_sync(_req(literal)) == b'{"jsonrpc":"2.0","result":1,"id":' + echoed + b"}"


def test_unreadable_ids_in_a_batch_are_answered_per_element_and_the_rest_served() -> None:
    batch = b"[" + b",".join([_req(b"1e-400"), _req(b"2"), _req(LONG_INT), _req(b"1e400"), _req(b"0.5")]) + b"]"
    answers = msgspec.json.decode(make_demo().handle_sync(batch) or b"")
    served = sorted((a["id"], a["result"]) for a in answers if "result" in a)
    assert served == [(0.5, 1), (2, 1)]
    refused = [a for a in answers if "error" in a]
    assert len(refused) == 3
    assert all(a["id"] is None and a["error"]["code"] == -32600 for a in refused)


def test_number_beyond_the_bounds_in_params_is_invalid_request_answered_to_the_readable_id() -> None:
    for params in (b"[" + LONG_INT + b"]", b'{"x":[1e400]}'):
        answer = _answer(make_demo().handle_sync(_req(b'"a"', params)))
        assert answer["id"] == "a"
        error = answer["error"]
        assert isinstance(error, dict) and error["code"] == -32600 and 'member "params"' in error["message"]


@pytest.mark.parametrize(
    "data",
    [
        LONG_INT + b" x",  # trailing garbage
        b'{"id":' + LONG_INT + b',"params":["\xff"]}',  # invalid UTF-8 in another member
        b'{"id":1,"params":[' + LONG_INT + b', "\xff"]}',  # ... and in the member holding the number
        b'[{"id":' + LONG_INT + b"}, NaN]",
        b'{"id":' + LONG_INT + b",}",
    ],
)
def test_long_integer_in_malformed_json_is_still_a_parse_error(data: bytes) -> None:
    with pytest.raises(codec.DecodeFailure):
        codec.decode(data)
    assert _answer(make_demo().handle_sync(data))["error"] == {"code": -32700, "message": "Parse error"}


def test_response_whose_result_is_unreadable_goes_to_the_caller_as_invalid_not_as_a_result() -> None:
    seen: list[object] = []
    reply = make_demo().receive(b'{"jsonrpc":"2.0","result":' + LONG_INT + b',"id":7}', seen.append)
    assert reply is None
    [msg] = seen
    assert isinstance(msg, InvalidMessage) and msg.is_response and msg.id == 7 and "4300" in msg.reason


def test_unreadable_ids_on_the_mcp_path_are_invalid_request() -> None:
    d = Dispatcher()
    d.add_method(lambda **kw: {}, "initialize", blocking=False)
    d.add_method(lambda **kw: {}, "ping", blocking=False)
    p = MCPProfile()
    init = b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}'
    assert isinstance(d.receive(init, None, p), Call)
    for literal in (LONG_INT, b"1e-400", b"1e400"):
        answer = _answer(d.receive(b'{"jsonrpc":"2.0","method":"ping","id":' + literal + b"}", None, p))  # type: ignore[arg-type]
        error = answer["error"]
        assert answer["id"] is None and isinstance(error, dict) and error["code"] == -32600
        assert error["message"].startswith("Invalid Request: the id")


def test_unreadable_ids_over_http_are_invalid_request() -> None:
    import asyncio

    import httpx

    from sturdyrpc.transports.http import JSONRPCHTTPApp

    async def go() -> list[dict[str, object]]:
        transport = httpx.ASGITransport(app=JSONRPCHTTPApp(make_demo()))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as c:
            out = []
            for literal in (LONG_INT, b"1e-400", b"1e400"):
                r = await c.post("/", content=_req(literal), headers={"content-type": "application/json"})
                out.append(r.json())
            return out

    for answer in asyncio.run(go()):
        error = answer["error"]
        assert answer["id"] is None and isinstance(error, dict) and error["code"] == -32600


def test_request_with_an_unreadable_id_refused_while_closing_is_answered_with_null_id() -> None:
    import asyncio

    from sturdyrpc.peer import Peer
    from sturdyrpc.transports.memory import memory_pair

    async def go() -> list[bytes]:
        rpc = Dispatcher(Limits(max_in_flight=1))
        gate = asyncio.Event()

        @rpc.method
        async def slow() -> str:
            await gate.wait()
            return "done"

        client, server_end = memory_pair()
        server = Peer(server_end, rpc)
        await server.start()
        await client.send(b'{"jsonrpc":"2.0","method":"slow","id":1}')
        await client.send(_req(b"1e-400").replace(b'"echo","params":[1]', b'"slow"'))  # held: no free slot
        await asyncio.sleep(0.1)
        await server.close(deadline=0.2)  # used to raise TypeError encoding the refusal
        out = []
        while (m := client.receive_nowait()) is not None:
            out.append(m)
        return out

    replies = asyncio.run(go())
    assert b'{"jsonrpc":"2.0","error":{"code":-32000,"message":"Connection closing"},"id":null}' in replies


def test_unreadable_ids_through_an_mcp_server_session_are_invalid_request() -> None:
    import asyncio

    from support.mcp import Wire

    from sturdyrpc.demos.mcp import make_mcp_demo

    async def go() -> list[dict[str, object]]:
        async with Wire(make_mcp_demo()) as w:
            await w.initialize("2025-06-18")
            out = []
            for literal in (LONG_INT, b"1e-400", b"1e400"):
                for body in (b'"method":"ping"', b'"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}'):
                    await w.send(b'{"jsonrpc":"2.0",' + body + b',"id":' + literal + b"}")
                    out.append(await w.recv())
            assert (await w.call("ping", id=5))["result"] == {}  # still serving
            return out

    for answer in asyncio.run(go()):
        error = answer["error"]
        assert answer["id"] is None and isinstance(error, dict) and error["code"] == -32600
        assert str(error["message"]).startswith("Invalid Request: the id")


def test_codec_marks_members_it_cannot_read_exactly_instead_of_refusing_valid_json() -> None:
    for decode in (codec.decode, lambda d: codec.decode_bounded(d, 256)):
        value = decode(b'{"id":' + LONG_INT + b',"params":[1e400],"method":"m"}')
        assert value["method"] == "m"
        assert isinstance(value["id"], codec.UnreadableNumber) and value["id"].member == "id"
        assert value["id"].data == {"limit": "integer_chars", "max": codec.MAX_INT_CHARS}
        assert isinstance(value["params"], codec.UnreadableNumber) and "64-bit float" in value["params"].message
        batch = decode(b'[{"id":1e-400},{"id":0.5},{"id":' + LONG_INT + b'},7]')
        assert [type(m["id"]) for m in batch[:3]] == [codec.UnreadableNumber, float, codec.UnreadableNumber]
        assert batch[3] == 7
    with pytest.raises(TypeError):
        codec.encode({"id": codec.decode(b'{"id":1e-400}')["id"]})  # never echoed by accident
