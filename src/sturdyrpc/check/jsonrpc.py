"""JSON-RPC 2.0 checks: framing, messages, ids, batches and errors (robustness, concurrency and
lifecycle are in :mod:`.robustness`).

Most need nothing from the server but its ``-32601`` reply to an unknown method. Section
numbers refer to https://www.jsonrpc.org/specification.
"""

from __future__ import annotations

import time
from typing import Any

from .config import SENTINEL_METHOD, Config, same_id
from .model import CheckFailed, Level
from .probe import Probe
from .rules import (
    ANY,
    ANY_ERROR,
    NULL,
    check,
    expect_error,
    expect_id,
    expect_result,
    leaks,
    response_problems,
    show,
    values_equal,
)
from .verdicts import spec_args

MUST, SHOULD, QUALITY = Level.MUST, Level.SHOULD, Level.QUALITY
UNKNOWN = "sturdyrpc.check/unknown-method"
PARSE, INVALID, NOT_FOUND = -32700, -32600, -32601

S4 = "JSON-RPC 2.0 §4 (Request object)"
S41 = "JSON-RPC 2.0 §4.1 (Notification)"
S42 = "JSON-RPC 2.0 §4.2 (Parameter Structures)"
S5 = "JSON-RPC 2.0 §5 (Response object)"
S51 = "JSON-RPC 2.0 §5.1 (Error object)"
S6 = "JSON-RPC 2.0 §6 (Batch)"


# -- applicability ----------------------------------------------------------------------------


def _plain_batches(cfg: Config) -> str | None:
    if cfg.is_mcp and cfg.version != "2025-03-26":
        return f"MCP {cfg.version} has no batches (see mcp.batch)"
    return None


def _not_mcp(cfg: Config) -> str | None:
    return "MCP refuses id null (see mcp.id-null)" if cfg.is_mcp else None


def _needs_echo(cfg: Config) -> str | None:
    if cfg.is_mcp:
        return "MCP servers are checked through tools/list instead of an echo method"
    return None if cfg.echo_method else "needs --echo-method NAME"


def _needs_slow(cfg: Config) -> str | None:
    return None if cfg.slow else "needs --slow NAME (a method, or MCP tool, taking {\"seconds\": S} that waits that long)"


def _slow_call(s: Probe, seconds: float, id: Any) -> dict[str, Any]:
    """A request that takes ``seconds``: the ``--slow`` method, or for MCP a ``tools/call`` of that tool."""
    slow = s.cfg.slow or ""
    if s.cfg.is_mcp:
        return s.request("tools/call", {"name": slow, "arguments": {"seconds": seconds}}, id=id)
    return s.request(slow, {"seconds": seconds}, id=id)


def _needs_leak_probe(cfg: Config) -> str | None:
    if cfg.is_mcp:
        return "for MCP servers the probe is a tool (see mcp.tool-fail-no-leak)"
    return None if cfg.leak_probe else "needs --leak-probe METHOD (a method that fails)"


def _unknown(s: Probe, id: Any) -> dict[str, Any]:
    return s.request(UNKNOWN, id=id)


def _with_raw_param(s: Probe, id: str, raw: bytes) -> bytes:
    """A request for the unknown method whose params object holds ``raw`` (JSON text, valid or not)
    under "p"; in MCP 2026-07-28 mode it also carries the required ``_meta``."""
    encoded = _raw(s.request(UNKNOWN, {"p": 0}, id=id))
    return encoded.replace(b'"p":0', b'"p":' + raw, 1)


def _raw(obj: dict[str, Any]) -> bytes:
    import msgspec

    return msgspec.json.encode(obj) + b"\n"


# -- framing ---------------------------------------------------------------------------------


@check(
    "framing.parse-error", "framing", MUST, "invalid JSON gets -32700 with id null",
    f"{S51}; §7 'rpc call with invalid JSON'",
    "catch the decoder's exception and answer {\"code\":-32700} with \"id\": null; never drop the line",
)
def parse_error(s: Probe) -> None:
    replies = s.exchange(b'{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]\n')
    if not replies:
        raise CheckFailed("no reply to invalid JSON (a client waits forever)")
    expect_error(replies[0], PARSE, NULL, id_may_be_omitted=s.cfg.is_mcp)
    if len(replies) > 1:
        raise CheckFailed(f"{len(replies)} replies to one invalid line")


@check(
    "framing.invalid-utf8", "framing", MUST, "invalid UTF-8 gets -32700 and the server survives",
    "RFC 8259 §8.1 (JSON text is UTF-8); JSON-RPC 2.0 §5.1 (-32700)",
    "decode stdin bytes inside the same try as the JSON parser (or with errors='replace'); answer -32700",
)
def invalid_utf8(s: Probe) -> None:
    replies = s.exchange(b'{"jsonrpc":"2.0","method":"\xff\xfe\xc3(","id":"u8"}\n')
    if not replies:
        raise CheckFailed("no reply to a line of invalid UTF-8")
    reply = replies[0]
    if type(reply) is dict and reply.get("id") == "u8":
        # The bytes were replaced (errors="replace") and the request was handled: the server
        # survives, but a corrupted method name or argument is acted upon.
        raise CheckFailed(f"invalid UTF-8 was accepted as text and the request handled ({show(reply, 120)}); it should be -32700", level=SHOULD)
    expect_error(reply, PARSE, NULL, id_may_be_omitted=s.cfg.is_mcp)


@check(
    "framing.nonfinite-literal", "framing", MUST, "NaN / Infinity literals get -32700",
    "RFC 8259 §6 (NaN and Infinity are not JSON); JSON-RPC 2.0 §5.1 (-32700)",
    "use a strict decoder (Python: json.loads(..., parse_constant=reject) or msgspec/orjson)",
)
def nonfinite(s: Probe) -> None:
    for lit in ("NaN", "-Infinity"):
        line = _with_raw_param(s, "nf", lit.encode())
        replies = s.exchange(line)
        if not replies:
            raise CheckFailed(f"no reply to a request holding {lit}")
        reply = replies[0]
        if type(reply) is dict and "error" in reply and reply["error"].get("code") == NOT_FOUND:
            raise CheckFailed(f"{lit} was accepted as JSON (answered -32601 for the method instead of -32700)")
        expect_error(reply, PARSE, NULL, id_may_be_omitted=s.cfg.is_mcp)


@check(
    "framing.trailing-garbage", "framing", MUST, "trailing garbage after a JSON value gets -32700",
    "RFC 8259 §2 (one value per text); JSON-RPC 2.0 §5.1 (-32700)",
    "parse the whole line as one JSON value; do not ignore what follows it",
)
def trailing_garbage(s: Probe) -> None:
    replies = s.exchange(f'{{"jsonrpc":"2.0","method":"{UNKNOWN}","id":"tg"}} xyz\n'.encode())
    if not replies:
        raise CheckFailed("no reply to a line with trailing garbage")
    reply = replies[0]
    if type(reply) is dict and reply.get("error", {}).get("code") == NOT_FOUND:
        raise CheckFailed("trailing garbage was ignored (answered -32601 for the method instead of -32700)")
    expect_error(reply, PARSE, NULL, id_may_be_omitted=s.cfg.is_mcp)


@check(
    "framing.crlf", "framing", MUST, "a line ending in CRLF is read normally",
    "RFC 8259 §2 (CR is insignificant whitespace); newline-delimited JSON framing",
    "strip trailing whitespace (\\r) before decoding, or let the JSON parser skip it",
)
def crlf(s: Probe) -> None:
    line = _raw(_unknown(s, "crlf-1"))[:-1] + b"\r\n"
    replies = s.exchange(line)
    if not replies:
        raise CheckFailed("no reply to a request whose line ends in \\r\\n")
    expect_error(replies[0], ANY_ERROR, "crlf-1")


@check(
    "framing.chunked", "framing", MUST, "a message written in pieces is read as one",
    "newline-delimited JSON: a message ends at the newline, not at a read() boundary",
    "buffer partial reads until the newline arrives; never parse each read() separately",
    stdio_only="over HTTP a body arrives whole",
)
def chunked(s: Probe) -> None:
    line = _raw(_unknown(s, "chunk-1"))
    third = len(line) // 3
    s.send(line[:third])
    time.sleep(0.05)
    s.send(line[third : 2 * third])
    time.sleep(0.05)
    replies = s.exchange(line[2 * third :])
    if not replies:
        raise CheckFailed("no reply to a request sent in three pieces")
    expect_error(replies[0], ANY_ERROR, "chunk-1")


@check(
    "framing.pipelined", "framing", MUST, "two messages in one write get two replies",
    "newline-delimited JSON: each line is a message",
    "split every read on newlines and handle each line; keep the remainder for the next read",
    stdio_only="over HTTP each message is its own POST",
)
def pipelined(s: Probe) -> None:
    data = _raw(_unknown(s, "pipe-1")) + _raw(_unknown(s, "pipe-2"))
    replies = s.exchange(data, expect=2)
    got = sorted(str(r.get("id")) for r in replies if type(r) is dict)
    if got != ["pipe-1", "pipe-2"]:
        raise CheckFailed(f"expected replies to pipe-1 and pipe-2, got ids {got}")
    for r in replies:
        expect_error(r, ANY_ERROR, ANY)


# -- messages --------------------------------------------------------------------------------


@check(*spec_args("messages.response-shape"))
def response_shape(s: Probe) -> None:
    replies = s.exchange(_unknown(s, "shape-1"))
    if not replies:
        raise CheckFailed("no reply to a request for an unknown method")
    problems = response_problems(replies[0])
    if problems:
        raise CheckFailed("; ".join(problems))


@check(*spec_args("messages.notification-silent"))
def notification_silent(s: Probe) -> None:
    replies = s.exchange(s.notification(UNKNOWN, {"x": 1}), expect=0)
    if replies:
        raise CheckFailed(f"the server answered a notification: {show(replies[0])}")


@check(
    "messages.notification-no-params", "messages", MUST, "a notification without params gets no reply",
    S41,
    "treat a missing \"id\" as a notification whatever else the message holds",
)
def notification_no_params(s: Probe) -> None:
    replies = s.exchange({"jsonrpc": "2.0", "method": UNKNOWN}, expect=0)
    if replies:
        raise CheckFailed(f"the server answered a notification: {show(replies[0])}")


@check(
    "messages.response-not-answered", "messages", SHOULD, "a response sent to the server is not answered",
    f"{S5} (responses answer requests; a reply to a reply can loop on a two-way link)",
    "recognise objects with \"result\"/\"error\" and no \"method\" as responses and never answer them",
)
def response_not_answered(s: Probe) -> None:
    items = [
        {"jsonrpc": "2.0", "result": {"ok": True}, "id": "resp-1"},
        {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "resp-2"},
    ]
    replies = s.exchange_many(items, expect=0, ids=["resp-1", "resp-2"])
    if s.cfg.url:
        # Over HTTP an HTTP error for a body the transport does not take (MCP 2026-07-28: no
        # responses in a POST) may carry a JSON-RPC error without id: a refusal, not an answer.
        replies = [r for r in replies if not (type(r) is dict and "error" in r and r.get("id") is None)]
    if replies:
        raise CheckFailed(f"the server answered a response object: {show(replies[0])}")


def _invalid_requests(s: Probe, cases: list[tuple[str, bytes]], codes: tuple[int, ...] = (INVALID,)) -> None:
    for what, line in cases:
        replies = s.exchange(line)
        if not replies:
            raise CheckFailed(f"no reply to a request with {what}")
        try:
            expect_error(replies[0], codes, NULL, also_ids=("bad",), id_may_be_omitted=s.cfg.is_mcp)
        except CheckFailed as exc:
            raise CheckFailed(f"{what}: {exc.detail}") from None


@check(
    "messages.invalid-jsonrpc", "messages", MUST, "missing or wrong \"jsonrpc\" gets -32600",
    f"{S4} (jsonrpc MUST be exactly \"2.0\"); {S51}",
    'reject any request whose "jsonrpc" is not the string "2.0" with -32600',
)
def invalid_jsonrpc(s: Probe) -> None:
    _invalid_requests(s, [
        ('no "jsonrpc"', f'{{"method":"{UNKNOWN}","id":"bad"}}\n'.encode()),
        ('"jsonrpc": "1.0"', f'{{"jsonrpc":"1.0","method":"{UNKNOWN}","id":"bad"}}\n'.encode()),
        ('"jsonrpc": 2.0 (a number)', f'{{"jsonrpc":2.0,"method":"{UNKNOWN}","id":"bad"}}\n'.encode()),
    ])


@check(
    "messages.invalid-method", "messages", MUST, "a method that is not a string gets -32600",
    f"{S4}; §7 'rpc call with invalid Request object'",
    'check that "method" is a string before dispatching; answer -32600',
)
def invalid_method(s: Probe) -> None:
    _invalid_requests(s, [
        ('"method": 1', b'{"jsonrpc":"2.0","method":1,"params":"bar","id":"bad"}\n'),
        ('"method": null', b'{"jsonrpc":"2.0","method":null,"id":"bad"}\n'),
        ("no method, no result", b'{"jsonrpc":"2.0","id":"bad"}\n'),
    ])


@check(
    "messages.invalid-params", "messages", MUST, "params that are not an array or object get -32600",
    f"{S42} (params MUST be an Array or an Object); {S51}",
    'reject "params" of any other type (string, number, null, true) with -32600 before dispatch',
)
def invalid_params(s: Probe) -> None:
    _invalid_requests(s, [
        ('"params": "bar"', f'{{"jsonrpc":"2.0","method":"{UNKNOWN}","params":"bar","id":"bad"}}\n'.encode()),
        ('"params": 1', f'{{"jsonrpc":"2.0","method":"{UNKNOWN}","params":1,"id":"bad"}}\n'.encode()),
        ('"params": null', f'{{"jsonrpc":"2.0","method":"{UNKNOWN}","params":null,"id":"bad"}}\n'.encode()),
    ], (INVALID, -32602) if s.cfg.modern else (INVALID,))  # 2026-07-28: no params._meta is -32602 too


@check(
    "messages.not-an-object", "messages", MUST, "a message that is not an object gets one -32600",
    f"{S4}; {S6} (only objects and arrays of objects are requests)",
    "answer a top-level string/number/null with a single -32600 (id null); do not iterate over a string",
)
def not_an_object(s: Probe) -> None:
    for line in (b'"ab"\n', b"42\n", b"null\n"):
        replies = s.exchange(line)
        if not replies:
            raise CheckFailed(f"no reply to the message {line.strip().decode()}")
        if len(replies) > 1 or type(replies[0]) is list:
            raise CheckFailed(f"{line.strip().decode()} was answered as if it were a batch: {show(replies)}")
        expect_error(replies[0], INVALID, NULL, id_may_be_omitted=s.cfg.is_mcp)


@check(
    "messages.echo-roundtrip", "messages", MUST, "the echo method returns exact values",
    f"{S5} (the result is the method's value); RFC 8259",
    "decode and encode with a codec that keeps big integers, escapes and non-ASCII text exact",
    applies=_needs_echo,
)
def echo_roundtrip(s: Probe) -> None:
    value = {
        "text": "h\u00e9llo \u2713 \u2028 \U0001f511 \"q\" \\ \t \u0000",
        "big": 123456789012345678901234567890,
        "neg": -9007199254740993,
        "half": -0.5,
        "nested": [[], {}, [None, True, False]],
    }
    reply = s.call(s.cfg.echo_method or "", [value], id="echo-1")
    result = expect_result(reply, "echo-1")
    if not (values_equal(result, value) or values_equal(result, [value])):
        raise CheckFailed(f"the echo changed the value: sent {show(value)}, got {show(result)}")


@check(
    "messages.echo-notification", "messages", MUST, "a notification of a real method gets no reply",
    S41,
    "run the handler but drop its return value (and its errors) when the message has no id",
    applies=_needs_echo,
)
def echo_notification(s: Probe) -> None:
    replies = s.exchange(s.notification(s.cfg.echo_method or "", ["n"]), expect=0)
    if replies:
        raise CheckFailed(f"the server answered a notification: {show(replies[0])}")


# -- ids -------------------------------------------------------------------------------------


def _id_roundtrip(s: Probe, id: Any) -> None:
    replies = s.exchange(_unknown(s, id))
    if not replies:
        raise CheckFailed(f"no reply to a request with id {show(id)}")
    reply = replies[0]
    if type(reply) is not dict:
        raise CheckFailed(f"a single request was answered with {show(reply)}")
    expect_error(reply, ANY_ERROR, id)


def _id_check(name: str, title: str, id: Any, hint: str) -> None:
    def run(s: Probe) -> None:
        _id_roundtrip(s, id)

    run.__name__ = f"ids_{name}"
    check(f"ids.{name}", "ids", MUST, title, f"{S5} (id MUST be the same as the request's)", hint)(run)


_id_check("string", 'a string id comes back as the same string', "abc-\u00e9", "echo the id value you read, unchanged")
_id_check("numeric-string", 'id "7" comes back as "7", not 7', "7", 'do not coerce ids: keep "7" a string (pydantic: strict=True)')
_id_check("integer", "id 7 comes back as 7, not \"7\" or 7.0", 7, "keep integer ids integers")
_id_check("zero", "id 0 is answered (and comes back as 0)", 0, "test for a missing id with `\"id\" in msg`, never with truthiness")
_id_check("empty-string", 'id "" is answered (and comes back as "")', "", "test for a missing id with `\"id\" in msg`, never with truthiness")
_id_check("negative", "a negative id comes back unchanged", -42, "use a signed integer type for ids (not u32/u64)")
_id_check("beyond-2-53", "id 2^53+1 comes back exactly", 9007199254740993, "keep ids as exact integers (not float64); JS: keep the raw token")
_id_check("beyond-2-64", "an id beyond 2^64 comes back exactly", 123456789012345678901234567890, "keep the raw id token, or use arbitrary-precision integers (orjson turns these into floats)")


@check(
    "ids.fractional", "ids", MUST, "a fractional id is echoed exactly or refused with -32600",
    f"{S4} (Numbers SHOULD NOT contain fractional parts); {S5} (same id)",
    "either refuse fractional ids with -32600, or echo 1.5 as 1.5; never truncate to 1",
)
def ids_fractional(s: Probe) -> None:
    replies = s.exchange(f'{{"jsonrpc":"2.0","method":"{UNKNOWN}","id":1.5}}\n'.encode())
    if not replies:
        raise CheckFailed("no reply to a request with id 1.5")
    reply = replies[0]
    if type(reply) is dict and "error" in reply and type(reply["error"]) is dict and reply["error"].get("code") == INVALID:
        expect_error(reply, INVALID, NULL, also_ids=(1.5,), id_may_be_omitted=s.cfg.is_mcp)
        return
    expect_id(reply, 1.5)


@check(
    "ids.null", "ids", MUST, "a request with id null is answered (it is not a notification)",
    f"{S4} (id MAY be null; only a missing id makes a notification)",
    "tell \"id\": null apart from a missing id; answer with \"id\": null",
    applies=_not_mcp,
)
def ids_null(s: Probe) -> None:
    replies = s.exchange(f'{{"jsonrpc":"2.0","method":"{UNKNOWN}","id":null}}\n'.encode())
    if not replies:
        raise CheckFailed("a request with \"id\": null got no reply: it was treated as a notification")
    if type(replies[0]) is not dict:
        raise CheckFailed(f"unexpected reply {show(replies[0])}")
    expect_id(replies[0], NULL)


@check(
    "ids.invalid-type", "ids", MUST, "an id that is an object, array or boolean gets -32600",
    f"{S4} (id is a String, Number or Null); {S51}",
    "validate the id's type; answer -32600 with id null",
)
def ids_invalid_type(s: Probe) -> None:
    _invalid_requests(s, [
        ("an object id", f'{{"jsonrpc":"2.0","method":"{UNKNOWN}","id":{{"a":1}}}}\n'.encode()),
        ("an array id", f'{{"jsonrpc":"2.0","method":"{UNKNOWN}","id":[1]}}\n'.encode()),
        ("a boolean id", f'{{"jsonrpc":"2.0","method":"{UNKNOWN}","id":true}}\n'.encode()),
    ])


# -- batches ---------------------------------------------------------------------------------


def _batch_reply(replies: list[Any], what: str) -> list[Any]:
    if not replies:
        raise CheckFailed(f"no reply to {what} (silence on a batch hangs the client)")
    if len(replies) > 1:
        raise CheckFailed(f"{len(replies)} separate messages came back for {what}; a batch gets one array")
    if type(replies[0]) is not list:
        raise CheckFailed(f"{what} must be answered with an array, got {show(replies[0])}")
    return replies[0]


@check(
    "batches.empty", "batches", MUST, "[] gets one -32600 (not [] and not silence)",
    f"{S6}; §7 'rpc call with an empty Array'",
    "answer an empty array with a single error object {\"code\":-32600}, id null",
    applies=_plain_batches,
)
def batch_empty(s: Probe) -> None:
    replies = s.exchange(b"[]\n")
    if not replies:
        raise CheckFailed("no reply to []")
    if type(replies[0]) is list:
        raise CheckFailed(f"[] was answered with an array {show(replies[0])}; it must be one -32600 error object")
    expect_error(replies[0], INVALID, NULL, id_may_be_omitted=s.cfg.is_mcp)


@check(
    "batches.invalid-one", "batches", MUST, "[1] gets an array with one -32600",
    f"{S6}; §7 'rpc call with an invalid Batch (but not empty)'",
    "validate each batch element separately; answer each invalid one with its own -32600",
    applies=_plain_batches,
)
def batch_invalid_one(s: Probe) -> None:
    arr = _batch_reply(s.exchange(b"[1]\n"), "[1]")
    if len(arr) != 1:
        raise CheckFailed(f"expected 1 error in the array, got {len(arr)}: {show(arr)}")
    expect_error(arr[0], INVALID, NULL)


@check(
    "batches.invalid-three", "batches", MUST, "[1,2,3] gets an array of three -32600",
    f"{S6}; §7 'rpc call with invalid Batch'",
    "one error per invalid element, not one error for the whole batch",
    applies=_plain_batches,
)
def batch_invalid_three(s: Probe) -> None:
    arr = _batch_reply(s.exchange(b"[1,2,3]\n"), "[1,2,3]")
    if len(arr) != 3:
        raise CheckFailed(f"expected 3 errors in the array, got {len(arr)}: {show(arr)}")
    for e in arr:
        expect_error(e, INVALID, NULL)


@check(
    "batches.mixed", "batches", MUST, "a mixed batch: one reply per request, none for notifications",
    f"{S6}; §7 'rpc call Batch'",
    "answer each request element (valid or not) and skip notifications; the replies may come in any order",
    applies=_plain_batches,
)
def batch_mixed(s: Probe) -> None:
    batch = [
        s.request(UNKNOWN, id="b-1"),
        s.notification(UNKNOWN, ["n"]),
        {"foo": "boo"},
        s.request(UNKNOWN, id="b-2"),
    ]
    arr = _batch_reply(s.exchange(batch), "a batch of 2 requests, 1 notification and 1 invalid element")
    if len(arr) != 3:
        raise CheckFailed(f"expected 3 replies (2 requests + 1 invalid element), got {len(arr)}: {show(arr)}")
    by_id: dict[str, Any] = {}
    for r in arr:
        if type(r) is dict and type(r.get("id")) is str:
            by_id[r["id"]] = r
    for bid in ("b-1", "b-2"):
        if bid not in by_id:
            raise CheckFailed(f"no reply for request {bid} in {show(arr)}")
        expect_error(by_id[bid], ANY_ERROR, bid)
    nulls = [r for r in arr if type(r) is dict and r.get("id", 0) is None]
    if len(nulls) != 1:
        raise CheckFailed(f"expected one -32600 (id null) for the invalid element, got {show(arr)}")
    expect_error(nulls[0], INVALID, NULL)


@check(
    "batches.notifications-only", "batches", MUST, "a batch of only notifications gets nothing at all",
    f"{S6} (MUST NOT return an empty Array; nothing is returned)",
    "when no element produces a reply, write nothing (not [] and not null)",
    applies=_plain_batches,
)
def batch_notifications_only(s: Probe) -> None:
    replies = s.exchange([s.notification(UNKNOWN, [1]), s.notification(UNKNOWN, [2])], expect=0)
    if replies:
        raise CheckFailed(f"a batch of notifications was answered: {show(replies[0])}")


@check(
    "batches.single", "batches", SHOULD, "a batch of one request gets an array of one",
    f"{S6} (the Server should respond with an Array)",
    "always answer a batch with an array, even when it holds one reply",
    applies=_plain_batches,
)
def batch_single(s: Probe) -> None:
    arr = _batch_reply(s.exchange([s.request(UNKNOWN, id="one-1")]), "a batch of one request")
    if len(arr) != 1:
        raise CheckFailed(f"expected 1 reply in the array, got {len(arr)}")
    expect_error(arr[0], ANY_ERROR, "one-1")


@check(
    "batches.invalid-json", "batches", MUST, "a batch that is not valid JSON gets one -32700",
    f"{S6}; §7 'rpc call Batch, invalid JSON'",
    "a parse failure of the whole line is one -32700 error object, not an array",
    applies=_plain_batches,
)
def batch_invalid_json(s: Probe) -> None:
    line = f'[{{"jsonrpc":"2.0","method":"{UNKNOWN}","params":[1,2,4],"id":"1"}},{{"jsonrpc":"2.0","method"]\n'.encode()
    replies = s.exchange(line)
    if not replies:
        raise CheckFailed("no reply to a batch that is not valid JSON")
    if type(replies[0]) is list:
        raise CheckFailed(f"answered with an array {show(replies[0])}; invalid JSON gets one error object")
    expect_error(replies[0], PARSE, NULL, id_may_be_omitted=s.cfg.is_mcp)


@check(
    "batches.echo", "batches", MUST, "batch results are matched to their requests by id",
    f"{S6} (the Client matches by id; the order may differ)",
    "give each element's reply the element's own id",
    applies=lambda cfg: _plain_batches(cfg) or _needs_echo(cfg),
)
def batch_echo(s: Probe) -> None:
    m = s.cfg.echo_method or ""
    arr = _batch_reply(
        s.exchange([s.request(m, ["first"], id="e-1"), s.notification(m, ["n"]), s.request(m, ["second"], id=2)]),
        "a batch of echo calls",
    )
    if len(arr) != 2:
        raise CheckFailed(f"expected 2 replies, got {len(arr)}: {show(arr)}")
    want = {"e-1": "first", 2: "second"}
    for r in arr:
        rid = r.get("id") if type(r) is dict else None
        key = next((k for k in want if same_id(k, rid)), None)
        if key is None:
            raise CheckFailed(f"a reply with an id that was not sent: {show(r)}")
        result = expect_result(r, key)
        if not (values_equal(result, want[key]) or values_equal(result, [want[key]])):
            raise CheckFailed(f"the reply for id {show(key)} holds {show(result)}, not the echo of {show(want[key])}")


# -- errors ----------------------------------------------------------------------------------


@check(
    "errors.method-not-found", "errors", MUST, "an unknown method gets -32601 with the request's id",
    f"{S51} (-32601 Method not found)",
    "answer unknown methods with -32601, not -32000/-32603 or a custom code",
)
def method_not_found(s: Probe) -> None:
    reply = s.call(UNKNOWN, id="nf-1")
    expect_error(reply, NOT_FOUND, "nf-1")


@check(
    "errors.method-not-found-params", "errors", MUST, "an unknown method with params still gets -32601",
    f"{S51} (-32601 Method not found)",
    "look the method up before validating its params",
)
def method_not_found_params(s: Probe) -> None:
    reply = s.call(UNKNOWN, {"a": [1, 2]}, id="nf-2")
    expect_error(reply, NOT_FOUND, "nf-2")
    reply = s.call(UNKNOWN, [1, "two"] if not s.cfg.is_mcp else {"b": 1}, id="nf-3")
    expect_error(reply, NOT_FOUND, "nf-3")


def _no_leak(reply: Any, what: str) -> None:
    if type(reply) is not dict or type(reply.get("error")) is not dict:
        return
    found = leaks(reply["error"], ignore=(UNKNOWN, SENTINEL_METHOD))
    if found:
        raise CheckFailed(f"the error for {what} reveals the server's insides: " + "; ".join(found))


@check(
    "errors.no-leak-parse", "errors", MUST, "parse errors carry no traceback, path or exception name",
    f"{S51} (message: a short description); OWASP error handling (no stack traces to clients)",
    "answer with a fixed message ('Parse error'); log the exception on the server side only",
)
def no_leak_parse(s: Probe) -> None:
    for line in (b"{not json\n", b'{"jsonrpc":"2.0","method":"x","id":1,}\n'):
        replies = s.exchange(line)
        for r in replies:
            _no_leak(r, "invalid JSON")


@check(
    "errors.no-leak-invalid", "errors", MUST, "invalid-request errors carry no traceback, path or exception name",
    f"{S51}; OWASP error handling",
    "build -32600 replies from fixed text; never str(exception) or a traceback",
)
def no_leak_invalid(s: Probe) -> None:
    for line in (b'{"jsonrpc":"2.0","method":1,"id":"lk"}\n', b'{"jsonrpc":"2.0","id":"lk"}\n', b"[5]\n", b'"x"\n'):
        for r in s.exchange(line):
            for item in r if type(r) is list else [r]:
                _no_leak(item, line.strip().decode())


@check(
    "errors.no-leak-probe", "errors", MUST, "a failing method's error carries no traceback, path or exception name",
    f"{S51} (-32603 Internal error); OWASP error handling",
    "map unexpected exceptions to a bare -32603 (add an incident id); log the traceback on stderr",
    applies=_needs_leak_probe,
)
def no_leak_probe(s: Probe) -> None:
    method = s.cfg.leak_probe or ""
    params: Any
    for params in (None, [], {}):
        reply = s.call(method, params, id=s.new_id("leak"))
        if "error" not in reply:
            continue
        _no_leak(reply, f"{method}")
        if type(reply.get("error")) is dict and type(reply["error"].get("code")) is not int:
            raise CheckFailed("the error code is not an integer")
