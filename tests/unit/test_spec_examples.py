"""Every example of the JSON-RPC 2.0 specification, section 7, as a table.

The request text is the spec's, byte for byte (multi-line batches joined onto one line);
the expected response is parsed from the spec's text. Each example runs in process
(``Dispatcher.handle_sync`` on the demo) and through ``sturdyrpc demo`` over real pipes.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from support.process import DEMO_CMD, ServerProcess

from sturdyrpc.demos.jsonrpc import make_demo

NO_RESPONSE = None

# (name, request as printed by the spec, response as printed by the spec or NO_RESPONSE)
SPEC_EXAMPLES: list[tuple[str, str, str | None]] = [
    (
        "positional-1",
        '{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}',
        '{"jsonrpc": "2.0", "result": 19, "id": 1}',
    ),
    (
        "positional-2",
        '{"jsonrpc": "2.0", "method": "subtract", "params": [23, 42], "id": 2}',
        '{"jsonrpc": "2.0", "result": -19, "id": 2}',
    ),
    (
        "named-1",
        '{"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3}',
        '{"jsonrpc": "2.0", "result": 19, "id": 3}',
    ),
    (
        "named-2",
        '{"jsonrpc": "2.0", "method": "subtract", "params": {"minuend": 42, "subtrahend": 23}, "id": 4}',
        '{"jsonrpc": "2.0", "result": 19, "id": 4}',
    ),
    ("notification-update", '{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}', NO_RESPONSE),
    ("notification-foobar", '{"jsonrpc": "2.0", "method": "foobar"}', NO_RESPONSE),
    (
        "non-existent-method",
        '{"jsonrpc": "2.0", "method": "foobar", "id": "1"}',
        '{"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "1"}',
    ),
    (
        "invalid-json",
        '{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]',
        '{"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": null}',
    ),
    (
        "invalid-request-object",
        '{"jsonrpc": "2.0", "method": 1, "params": "bar"}',
        '{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}',
    ),
    (
        "batch-invalid-json",
        '[ {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"}, {"jsonrpc": "2.0", "method" ]',
        '{"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": null}',
    ),
    (
        "empty-array",
        "[]",
        '{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null}',
    ),
    (
        "invalid-batch-not-empty",
        "[1]",
        '[ {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null} ]',
    ),
    (
        "invalid-batch",
        "[1,2,3]",
        '[ {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},'
        ' {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},'
        ' {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null} ]',
    ),
    (
        "batch",
        '[ {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},'
        ' {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},'
        ' {"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"},'
        ' {"foo": "boo"},'
        ' {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},'
        ' {"jsonrpc": "2.0", "method": "get_data", "id": "9"} ]',
        '[ {"jsonrpc": "2.0", "result": 7, "id": "1"},'
        ' {"jsonrpc": "2.0", "result": 19, "id": "2"},'
        ' {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": null},'
        ' {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "5"},'
        ' {"jsonrpc": "2.0", "result": ["hello", 5], "id": "9"} ]',
    ),
    (
        "batch-all-notifications",
        '[ {"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]},'
        ' {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]} ]',
        NO_RESPONSE,
    ),
]

IDS = [name for name, _, _ in SPEC_EXAMPLES]


def squeeze(text: str) -> str:
    """``text`` without whitespace outside string literals."""
    out: list[str] = []
    in_str = esc = False
    for ch in text:
        if in_str:
            out.append(ch)
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
            out.append(ch)
        elif not ch.isspace():
            out.append(ch)
    return "".join(out)


def _canon(value: Any) -> str:
    # msgspec keeps key order, so this is the compact form of the value as it was written.
    return msgspec.json.encode(value).decode()


def check_reply(reply: bytes | None, expected_text: str | None) -> None:
    """Compare as parsed JSON (batches as multisets) and byte for byte after whitespace normalisation."""
    if expected_text is None:
        assert reply is None, f"the spec says no response, we sent {reply!r}"
        return
    assert reply is not None, "the spec expects a response, we sent nothing"
    ours = msgspec.json.decode(reply)
    expected = msgspec.json.decode(expected_text)
    if isinstance(expected, list):
        assert isinstance(ours, list), f"a batch reply must be an array: {reply!r}"
        assert collections.Counter(map(_canon, ours)) == collections.Counter(map(_canon, expected))
        # Same elements, byte for byte: every element of ours is an element of the spec's text.
        spec_elements = collections.Counter(squeeze(_canon(e)) for e in expected)
        assert collections.Counter(_canon(e) for e in ours) == spec_elements
        assert squeeze(reply.decode()) == reply.decode(), "a batch reply is compact JSON"
    else:
        assert ours == expected
        # Member order and spelling exactly as the spec prints them (no extra "data").
        assert reply.decode() == squeeze(expected_text)


@pytest.mark.parametrize(("name", "request_text", "response_text"), SPEC_EXAMPLES, ids=IDS)
def test_spec_example_in_process(name: str, request_text: str, response_text: str | None) -> None:
    rpc = make_demo()
    check_reply(rpc.handle_sync(request_text.encode()), response_text)


def test_squeeze_keeps_spaces_inside_strings() -> None:
    assert squeeze('{"a b": [1, 2], "c": "x \\" y"}') == '{"a b":[1,2],"c":"x \\" y"}'


def test_table_covers_every_section_7_example() -> None:
    assert len(SPEC_EXAMPLES) == 15
    assert sum(r is None for _, _, r in SPEC_EXAMPLES) == 3
    for _, request_text, _ in SPEC_EXAMPLES:
        assert "\n" not in request_text


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    p = ServerProcess(DEMO_CMD)
    yield p
    p.stop()


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("name", "request_text", "response_text"), SPEC_EXAMPLES, ids=IDS)
def test_spec_example_over_stdio(server: ServerProcess, name: str, request_text: str, response_text: str | None) -> None:
    server.send_line(request_text)
    # A marker request that finishes after anything the example could cause: every reply the
    # example produces arrives before the marker's, so "no response" is observable.
    marker = f"marker-{name}"
    server.send_line(msgspec.json.encode({"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 0.1, "value": marker}, "id": marker}))
    lines: list[bytes] = []
    while True:
        line = server.recv_line(timeout=10)
        assert line is not None, f"server exited; stderr: {bytes(server.stderr)!r}"
        if msgspec.json.decode(line) == {"jsonrpc": "2.0", "result": marker, "id": marker}:
            break
        lines.append(line)
    assert len(lines) <= 1, f"more than one reply to one message: {lines!r}"
    check_reply(lines[0] if lines else None, response_text)
