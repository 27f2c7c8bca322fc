"""Binding params to a handler's signature, checked before the handler runs."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

import msgspec
import pytest

from sturdyrpc import Context, Dispatcher, InvalidParams
from sturdyrpc.params import compile_binder


class Point(msgspec.Struct):
    x: int
    y: int


def make() -> tuple[Dispatcher, list[Any]]:
    rpc = Dispatcher()
    calls: list[Any] = []

    @rpc.method(blocking=False)
    def add(a: int, b: int) -> int:
        calls.append(("add", a, b))
        return a + b

    @rpc.method(blocking=False)
    def greet(name: str, punctuation: str = "!") -> str:
        calls.append(("greet", name))
        return f"hello {name}{punctuation}"

    @rpc.method(blocking=False)
    def posonly(a: int, /, b: int = 0) -> list[int]:
        calls.append("posonly")
        return [a, b]

    @rpc.method(blocking=False)
    def varargs(first: str, *rest: int) -> list[Any]:
        calls.append("varargs")
        return [first, list(rest)]

    @rpc.method(blocking=False)
    def kwargs(a: int, **extra: str) -> dict[str, Any]:
        calls.append("kwargs")
        return {"a": a, "extra": extra}

    @rpc.method(blocking=False)
    def kwonly(*, flag: bool) -> bool:
        calls.append("kwonly")
        return flag

    @rpc.method(blocking=False)
    def optional(x: Optional[int] = None) -> Any:  # noqa: UP045 (testing the old spelling)
        calls.append("optional")
        return x

    @rpc.method(blocking=False)
    def union(x: Union[int, str]) -> Any:  # noqa: UP007
        calls.append("union")
        return x

    @rpc.method(blocking=False)
    def pipe_union(x: int | None) -> Any:
        calls.append("pipe_union")
        return x

    @rpc.method(blocking=False)
    def ints(xs: list[int]) -> int:
        calls.append("ints")
        return sum(xs)

    @rpc.method(blocking=False)
    def mode(m: Literal["fast", "slow"]) -> str:
        calls.append("mode")
        return m

    @rpc.method(blocking=False)
    def point(p: Point) -> int:
        calls.append(("point", type(p)))
        return p.x + p.y

    @rpc.method(blocking=False)
    def number(x: float) -> float:
        calls.append("number")
        return x

    @rpc.method(blocking=False)
    def anything(x: Any) -> Any:
        calls.append("anything")
        return x

    @rpc.method(blocking=False)
    def with_ctx(x: int, ctx: Context) -> list[Any]:
        calls.append("with_ctx")
        return [x, ctx.id, ctx.method]

    return rpc, calls


def call(rpc: Dispatcher, method: str, params: Any = None, *, omit: bool = False) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": 1}
    if not omit:
        msg["params"] = params
    reply = rpc.handle_sync(msgspec.json.encode(msg))
    assert reply is not None
    out: dict[str, Any] = msgspec.json.decode(reply)
    assert out["jsonrpc"] == "2.0" and out["id"] == 1
    return out


GOOD = [
    ("add", [1, 2], 3),
    ("add", {"a": 1, "b": 2}, 3),
    ("add", {"b": 2, "a": 1}, 3),
    ("greet", ["x"], "hello x!"),
    ("greet", {"name": "x", "punctuation": "?"}, "hello x?"),
    ("posonly", [1], [1, 0]),
    ("posonly", [1, 2], [1, 2]),
    ("varargs", ["a"], ["a", []]),
    ("varargs", ["a", 1, 2, 3], ["a", [1, 2, 3]]),
    ("kwargs", {"a": 1, "x": "y", "z": "w"}, {"a": 1, "extra": {"x": "y", "z": "w"}}),
    ("kwonly", {"flag": True}, True),
    ("optional", [None], None),
    ("optional", [5], 5),
    ("optional", [], None),
    ("union", [5], 5),
    ("union", ["s"], "s"),
    ("pipe_union", [None], None),
    ("ints", [[1, 2, 3]], 6),
    ("ints", {"xs": []}, 0),
    ("mode", ["fast"], "fast"),
    ("point", [{"x": 1, "y": 2}], 3),
    ("number", [1], 1),
    ("number", [1.5], 1.5),
    ("anything", [{"deep": [None, True]}], {"deep": [None, True]}),
    ("with_ctx", [7], [7, 1, "with_ctx"]),
    ("with_ctx", {"x": 7}, [7, 1, "with_ctx"]),
]


@pytest.mark.parametrize(("method", "params", "result"), GOOD, ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(GOOD)])
def test_good_params(method: str, params: Any, result: Any) -> None:
    rpc, calls = make()
    out = call(rpc, method, params)
    assert out == {"jsonrpc": "2.0", "result": result, "id": 1}
    assert len(calls) == 1


def test_struct_param_is_converted() -> None:
    rpc, calls = make()
    call(rpc, "point", {"p": {"x": 1, "y": 2}})
    assert calls == [("point", Point)]


# (method, params, name the message must contain)
BAD = [
    ("add", [1], "b"),  # too few
    ("add", [], "a"),
    ("add", {"a": 1}, "b"),
    ("add", [1, 2, 3], "too many"),
    ("add", {"a": 1, "b": 2, "c": 3}, "c"),  # unknown
    ("add", [1, "2"], "b"),  # wrong type
    ("add", {"a": "1", "b": 2}, "a"),
    ("add", [1, 2.5], "b"),
    ("add", [True, 2], "a"),  # bool is not int
    ("add", [1, None], "b"),
    ("greet", [5], "name"),
    ("greet", {}, "name"),
    ("posonly", {"a": 1}, "a"),  # positional-only by name
    ("varargs", ["a", 1, "x"], "rest[1]"),
    ("varargs", [], "first"),
    ("kwargs", {"a": 1, "x": 5}, "x"),  # **extra: str
    ("kwonly", [True], "too many"),  # keyword-only cannot come from an array
    ("kwonly", {}, "flag"),
    ("kwonly", {"flag": 1}, "flag"),  # int is not bool
    ("optional", ["x"], "x"),
    ("union", [1.5], "x"),
    ("union", [None], "x"),
    ("pipe_union", ["s"], "x"),
    ("ints", [[1, "2"]], "xs"),
    ("ints", [[1, True]], "xs"),
    ("ints", [{"a": 1}], "xs"),
    ("mode", ["medium"], "m"),
    ("mode", [1], "m"),
    ("point", [{"x": 1}], "p"),
    ("point", [{"x": 1, "y": "2"}], "p"),
    ("point", [[1, 2]], "p"),
    ("number", ["1"], "x"),
    ("number", [True], "x"),
    ("with_ctx", {"x": 1, "ctx": {}}, "ctx"),  # the context is never bound from params
    ("with_ctx", [1, {}], "too many"),
]


@pytest.mark.parametrize(("method", "params", "needle"), BAD, ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(BAD)])
def test_bad_params_rejected_before_handler_runs(method: str, params: Any, needle: str) -> None:
    rpc, calls = make()
    out = call(rpc, method, params)
    assert "result" not in out
    assert out["error"]["code"] == -32602
    message = out["error"]["message"]
    assert isinstance(message, str)
    assert needle in message, message
    if needle not in ("too many",) and not needle.startswith("#"):
        assert f"'{needle}'" in message
    assert calls == [], "the handler ran although its params were invalid"


def test_missing_params_member_means_no_params() -> None:
    rpc, calls = make()
    out = call(rpc, "add", omit=True)
    assert out["error"]["code"] == -32602 and "'a'" in out["error"]["message"]
    assert calls == []
    out = call(rpc, "optional", omit=True)
    assert out["result"] is None


def test_invalid_params_reply_says_what_was_expected() -> None:
    rpc, _ = make()
    err = call(rpc, "add", [1, "x"])["error"]
    assert err["message"] == "Invalid params: parameter 'b' must be an integer, got a string"
    assert err["data"]["param"] == "b"


def test_bad_params_in_notification_do_not_run_and_are_not_answered() -> None:
    rpc, calls = make()
    assert rpc.handle_sync(b'{"jsonrpc":"2.0","method":"add","params":[1,"x"]}') is None
    assert calls == []


def test_handler_raising_invalid_params_goes_out_as_is() -> None:
    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def positive(n: int) -> int:
        if n <= 0:
            raise InvalidParams("Invalid params: parameter 'n' must be positive", {"param": "n"})
        return n

    out = msgspec.json.decode(rpc.handle_sync(b'{"jsonrpc":"2.0","method":"positive","params":[-1],"id":1}') or b"")
    assert out["error"] == {"code": -32602, "message": "Invalid params: parameter 'n' must be positive", "data": {"param": "n"}}


def test_signature_inspected_once_at_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    import inspect

    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def f(a: int) -> int:
        return a

    def boom(*a: Any, **k: Any) -> Any:
        raise AssertionError("signature inspected per call")

    monkeypatch.setattr(inspect, "signature", boom)
    for i in range(3):
        assert rpc.handle_sync(b'{"jsonrpc":"2.0","method":"f","params":[%d],"id":1}' % i) == b'{"jsonrpc":"2.0","result":%d,"id":1}' % i


def test_binder_directly() -> None:
    def f(a: int, b: str = "x", *, c: bool = False) -> None: ...

    b = compile_binder(f)
    assert b.bind([1]) == ((1,), {})
    assert b.bind({"a": 1, "c": True}) == ((), {"a": 1, "c": True})
    with pytest.raises(InvalidParams, match="'c'"):
        b.bind({"a": 1, "c": "yes"})
    with pytest.raises(InvalidParams, match="'a'"):
        b.bind(None)


def test_unannotated_handlers_still_checked_by_name_and_arity() -> None:
    rpc = Dispatcher()
    ran: list[Any] = []

    @rpc.method(blocking=False)
    def raw(a, /, b, *, c=0):  # type: ignore[no-untyped-def]
        ran.append((a, b, c))
        return [a, b, c]

    for params, needle in (({"a": 1, "b": 2}, "'a'"), ({"b": 2}, "'a'"), ([1], "'b'"), ([1, 2, 3], "too many"), ({"b": 1, "d": 2}, "'d'")):
        out = call(rpc, "raw", params)
        assert out["error"]["code"] == -32602 and needle in out["error"]["message"], (params, out)
    assert ran == []
    assert call(rpc, "raw", [1, 2])["result"] == [1, 2, 0]


def test_named_params_go_by_position_only_where_the_order_is_the_functions() -> None:
    """Every name of a context-free signature given: the arguments go by position (a cheaper call)
    and land where their names say; with a context parameter, or a signature that stands for a
    function with one more parameter, they go by name (the context may come first)."""

    def one(value: Any) -> None: ...

    def two(b: Any, a: Any = 0) -> None: ...

    assert compile_binder(one).bind({"value": 5}) == ((5,), {})
    assert compile_binder(two).bind({"a": 1, "b": 2}) == ((2, 1), {})
    assert compile_binder(two).bind({"b": 2}) == ((), {"b": 2})  # not every name: by name
    assert compile_binder(one, by_position=False).bind({"value": 5}) == ((), {"value": 5})

    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def first_ctx(ctx: Context, value: int) -> list[Any]:
        return [type(ctx).__name__, value]

    @rpc.method(blocking=False)
    def ordered(b: int, a: int) -> list[int]:
        return [b, a]

    assert call(rpc, "first_ctx", {"value": 3})["result"] == ["Context", 3]
    assert call(rpc, "ordered", {"a": 1, "b": 2})["result"] == [2, 1]
    # the shared empty kwargs of a call by position is never added to
    assert call(rpc, "first_ctx", {"value": 4})["result"] == ["Context", 4]
    assert call(rpc, "ordered", {"b": 5, "a": 6})["result"] == [5, 6]
