"""The strict JSON codec, and what the dispatcher makes of what it refuses."""

from __future__ import annotations

import math

import msgspec
import pytest

from sturdyrpc import codec
from sturdyrpc.demo import make_demo
from sturdyrpc.dispatch import Dispatcher
from sturdyrpc.limits import Limits

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
