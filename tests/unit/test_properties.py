"""Property-based: whatever arrives, the dispatcher never raises and only writes valid JSON-RPC 2.0."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sturdyrpc.demos.jsonrpc import make_demo

RPC = make_demo()  # shared: handlers are pure except record, which is harmless here
# How many examples, and whether they are random, is the profile's (tests/conftest.py): the
# same examples on every CI run, many more random ones under `make fuzz`.
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

_ERROR_KEYS = {"code", "message", "data"}


def check_response(resp: Any, ids_in: list[Any]) -> None:
    assert type(resp) is dict, resp
    assert resp.get("jsonrpc") == "2.0"
    assert "id" in resp
    assert set(resp) in ({"jsonrpc", "result", "id"}, {"jsonrpc", "error", "id"}), resp
    if "error" in resp:
        err = resp["error"]
        assert type(err) is dict and set(err) <= _ERROR_KEYS
        assert type(err["code"]) is int and type(err["message"]) is str
    id_ = resp["id"]
    if id_ is not None:
        # Same value AND same type as an id of the input.
        assert any(type(i) is type(id_) and i == id_ for i in ids_in), (id_, ids_in)


def collect_ids(value: Any) -> list[Any]:
    """Every value held under an "id" key at the top level or in a top-level array."""
    items = value if type(value) is list else [value]
    return [v["id"] for v in items if type(v) is dict and "id" in v]


def check_output(data: bytes, out: bytes | None, ids_in: list[Any]) -> None:
    if out is None:
        return
    assert type(out) is bytes
    assert b"\n" not in out
    value = msgspec.json.decode(out)  # valid JSON, strictly
    if type(value) is list:
        assert value, "never an empty array"
        for resp in value:
            check_response(resp, ids_in)
    else:
        check_response(value, ids_in)


def run(data: bytes) -> None:
    try:
        decoded = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        decoded = None
    out = RPC.handle_sync(data)
    check_output(data, out, collect_ids(decoded))


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
json_value = st.recursive(
    json_leaf,
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=6), kids, max_size=4)),
    max_leaves=12,
)
ids = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)
methods = st.one_of(
    st.sampled_from(["echo", "subtract", "sum", "update", "notify_hello", "get_data", "fail", "recorded", "nope", "rpc.x"]),
    st.text(max_size=6),
    json_leaf,
)
params = st.one_of(
    st.lists(json_value, max_size=3),
    st.dictionaries(st.sampled_from(["value", "minuend", "subtrahend", "x", "seconds"]), json_value, max_size=3),
    json_leaf,
)


@st.composite
def request_like(draw: st.DrawFn) -> dict[str, Any]:
    msg: dict[str, Any] = {}
    if draw(st.integers(0, 9)):
        msg["jsonrpc"] = draw(st.sampled_from(["2.0", "2.0", "2.0", "1.0", 2.0, None]))
    if draw(st.integers(0, 9)):
        msg["method"] = draw(methods)
    if draw(st.booleans()):
        msg["params"] = draw(params)
    if draw(st.integers(0, 3)):
        msg["id"] = draw(ids)
    if not draw(st.integers(0, 9)):
        msg[draw(st.sampled_from(["result", "error"]))] = draw(json_value)
    if not draw(st.integers(0, 9)):
        msg[draw(st.text(max_size=4))] = draw(json_leaf)
    return msg


@SETTINGS
@given(st.binary(max_size=200))
def test_arbitrary_bytes(data: bytes) -> None:
    run(data)


@SETTINGS
@given(st.binary(max_size=60).map(lambda b: b'{"jsonrpc":"2.0","method":"echo","params":[' + b + b'],"id":1}'))
def test_arbitrary_bytes_inside_a_request(data: bytes) -> None:
    run(data)


@SETTINGS
@given(json_value)
def test_arbitrary_json_values(value: Any) -> None:
    run(msgspec.json.encode(value))


@SETTINGS
@given(request_like())
def test_request_like_objects(msg: dict[str, Any]) -> None:
    run(msgspec.json.encode(msg))


@SETTINGS
@given(st.lists(st.one_of(request_like(), json_value), max_size=6))
def test_request_like_batches(batch: list[Any]) -> None:
    data = msgspec.json.encode(batch)
    out = RPC.handle_sync(data)
    check_output(data, out, collect_ids(batch))
    if out is not None and batch:
        # One answer per element that is not a notification or a response.
        assert type(msgspec.json.decode(out)) is list


@SETTINGS
@given(request_like())
def test_well_formed_requests_get_exactly_one_answer_with_their_id(msg: dict[str, Any]) -> None:
    msg["jsonrpc"] = "2.0"
    msg["method"] = msg.get("method") if type(msg.get("method")) is str else "echo"
    msg.pop("result", None)
    msg.pop("error", None)
    if "params" in msg and type(msg["params"]) not in (list, dict):
        del msg["params"]
    msg["id"] = msg.get("id") if type(msg.get("id")) in (str, int) else 5
    out = RPC.handle_sync(msgspec.json.encode(msg))
    assert out is not None
    resp = msgspec.json.decode(out)
    assert type(resp) is dict
    assert resp["id"] == msg["id"] and type(resp["id"]) is type(msg["id"])
    if "error" in resp and resp["error"]["code"] == -32603:
        for needle in ("SECRET", "RuntimeError", "Traceback"):
            assert needle not in out.decode()


# ------------------------------------------------------------------------------------------
# Differential: whatever shortcuts the hot path takes, handle_sync answers exactly as the
# general path does (receive() + run_inline(), the documented building blocks).

def _make_signatures_rpc() -> Any:
    from sturdyrpc import Dispatcher

    rpc = Dispatcher()

    def plain(a, b=2):  # type: ignore[no-untyped-def]
        return [a, b]

    def posonly(a, /, b):  # type: ignore[no-untyped-def]
        return [a, b]

    def kwonly(a, *, b):  # type: ignore[no-untyped-def]
        return [a, b]

    def kwonly_default(a, *, b=0):  # type: ignore[no-untyped-def]
        return [a, b]

    def star(a, *rest):  # type: ignore[no-untyped-def]
        return [a, list(rest)]

    def starstar(a, **kw):  # type: ignore[no-untyped-def]
        return [a, kw]

    def typed(a: int, b: str = "x") -> list[Any]:
        return [a, b]

    def nothing():  # type: ignore[no-untyped-def]
        return "nothing"

    def floaty(x):  # type: ignore[no-untyped-def]
        return x * 1e308 if isinstance(x, (int, float)) and not isinstance(x, bool) else x

    def raises(x=None):  # type: ignore[no-untyped-def]
        raise KeyError(x)

    for fn in (plain, posonly, kwonly, kwonly_default, star, starstar, typed, nothing, floaty, raises):
        rpc.add_method(fn, blocking=False)
    return rpc


SIG_RPC = _make_signatures_rpc()
_SIG_NAMES = ["plain", "posonly", "kwonly", "kwonly_default", "star", "starstar", "typed", "nothing", "floaty", "raises", "missing"]


def _reference(rpc: Any, data: bytes) -> bytes | None:
    from sturdyrpc.dispatch import BatchJob, Call

    todo = rpc.receive(data)
    if todo is None or type(todo) is bytes:
        return todo  # type: ignore[no-any-return]
    if type(todo) is Call:
        return rpc.run_inline(todo)  # type: ignore[no-any-return]
    assert isinstance(todo, BatchJob)
    for c in todo.calls:
        rpc.run_inline(c)
    return todo.finish()


def _normalise(out: bytes | None) -> Any:
    if out is None:
        return None
    value = msgspec.json.decode(out)
    items = value if type(value) is list else [value]
    for v in items:
        if type(v) is dict and type(v.get("error")) is dict and type(v["error"].get("data")) is dict and "incident" in v["error"]["data"]:
            v["error"]["data"]["incident"] = "*"
    return value


sig_params = st.one_of(
    st.lists(st.one_of(st.integers(-3, 3), st.text(max_size=2), st.booleans(), st.none(), st.floats(-2, 2)), max_size=4),
    st.dictionaries(st.sampled_from(["a", "b", "c", "kw", "x", "rest"]), st.one_of(st.integers(-3, 3), st.text(max_size=2), st.none()), max_size=4),
)


@st.composite
def sig_requests(draw: st.DrawFn) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": draw(st.sampled_from(_SIG_NAMES))}
    if draw(st.integers(0, 4)):
        msg["params"] = draw(sig_params)
    if draw(st.integers(0, 4)):
        msg["id"] = draw(st.one_of(st.integers(-5, 5), st.text(max_size=3), st.none(), st.floats(-2, 2), st.booleans()))
    return msg


@SETTINGS
@given(st.one_of(sig_requests(), st.lists(sig_requests(), min_size=1, max_size=4)))
def test_hot_path_answers_like_the_general_path(msg: Any) -> None:
    data = msgspec.json.encode(msg)
    assert _normalise(SIG_RPC.handle_sync(data)) == _normalise(_reference(SIG_RPC, data))


def test_property_tests_are_derandomized_unless_fuzzing() -> None:
    # CI must not go red on an example nobody can reproduce: the "ci" profile (tests/conftest.py)
    # is the default; `make fuzz` (HYPOTHESIS_PROFILE=fuzz) explores with random examples.
    import os

    if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci":
        assert settings.default.derandomize and settings.default.database is None
    else:
        assert not settings.default.derandomize
