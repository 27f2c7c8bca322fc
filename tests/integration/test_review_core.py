"""Regression tests from the protocol review of the core, the stdio server, the peer and ``call``.

One test per finding, each named after it; each failed before its fix.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest

from sturdyrpc import Dispatcher
from sturdyrpc.demos.jsonrpc import make_demo
from sturdyrpc.runner import Runner

pytestmark = pytest.mark.timeout(60)

DEMO = [sys.executable, "-m", "sturdyrpc", "demo"]


def test_cyclic_or_too_deep_result_is_answered_internal_error() -> None:
    # msgspec raises RecursionError (a RuntimeError) for a cyclic or very deep result: it escaped
    # Dispatcher.result(), so the request was never answered (and a batch never replied).
    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def cyclic() -> Any:
        a: list[Any] = []
        a.append(a)
        return a

    @rpc.method(blocking=False)
    def deep() -> Any:
        v: list[Any] = []
        for _ in range(100_000):
            v = [v]
        return v

    for name in ("cyclic", "deep"):
        single = rpc.handle_sync(b'{"jsonrpc":"2.0","method":"%s","id":1}' % name.encode())
        assert single is not None
        err = json.loads(single)
        assert err["id"] == 1 and err["error"]["code"] == -32603 and set(err["error"]["data"]) == {"incident"}
        batch = rpc.handle_sync(b'[{"jsonrpc":"2.0","method":"%s","id":2},{"jsonrpc":"2.0","method":"get","id":3}]' % name.encode())
        assert batch is not None
        answers = {a["id"]: a for a in json.loads(batch)}
        assert answers[2]["error"]["code"] == -32603 and answers[3]["error"]["code"] == -32601


def test_stdio_last_line_without_newline_is_answered() -> None:
    # NDJSON whose last line lacks its newline (printf '%s' ... | server): the message was
    # silently dropped at EOF by serve_stdio (the stream transports already handled it).
    req = b'{"jsonrpc":"2.0","method":"echo","params":["x"],"id":1}'
    for data in (req, b'{"jsonrpc":"2.0","method":"get_data","id":0}\n' + req, req + b"\r"):
        p = subprocess.run(DEMO, input=data, capture_output=True, timeout=20)
        assert p.returncode == 0
        lines = [json.loads(line) for line in p.stdout.splitlines()]
        assert {"jsonrpc": "2.0", "result": "x", "id": 1} in lines, p.stdout
    p = subprocess.run(DEMO, input=b"   ", capture_output=True, timeout=20)
    assert p.returncode == 0 and p.stdout == b""


def test_batch_of_inline_notifications_takes_effect_before_next_message() -> None:
    # A batch was always run as a task, so a `recorded` request read in the same chunk right after
    # a batch of `record` notifications answered [] although the batch came first.
    async def main() -> list[bytes]:
        sent: list[bytes] = []
        runner = Runner(make_demo(), sent.append)
        batch = [{"jsonrpc": "2.0", "method": "record", "params": [i]} for i in range(5)]
        runner.feed(json.dumps(batch).encode())
        runner.feed(b'{"jsonrpc":"2.0","method":"recorded","id":"r"}')
        mixed = [
            {"jsonrpc": "2.0", "method": "record", "params": ["m"]},
            {"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 0.01, "value": "s"}, "id": "s"},
            {"jsonrpc": "2.0", "method": "echo", "params": ["e"], "id": "e"},
        ]
        runner.feed(json.dumps(mixed).encode())
        runner.feed(b'{"jsonrpc":"2.0","method":"recorded","id":"r2"}')
        assert await runner.drain(5)
        runner.close()
        return sent

    sent = asyncio.run(main())
    replies = [json.loads(s) for s in sent]
    assert replies[0] == {"jsonrpc": "2.0", "result": [0, 1, 2, 3, 4], "id": "r"}  # nothing sent for the batch
    assert replies[1] == {"jsonrpc": "2.0", "result": [0, 1, 2, 3, 4, "m"], "id": "r2"}
    batch_reply = replies[2]
    assert sorted(batch_reply, key=lambda a: a["id"]) == [
        {"jsonrpc": "2.0", "result": "e", "id": "e"},
        {"jsonrpc": "2.0", "result": "s", "id": "s"},
    ]
    assert len(replies) == 3


def test_call_cli_error_with_null_id_exits_1_instead_of_hanging() -> None:
    # A server that cannot read our request answers -32700/-32600 with id null; `sturdyrpc call`
    # (no --timeout) ignored it as a reply to an unknown id and waited forever.
    server = (
        "import sys, time\n"
        "sys.stdin.readline()\n"
        'sys.stdout.write(\'{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}\\n\')\n'
        "sys.stdout.flush()\n"
        "time.sleep(60)\n"
    )
    cmd = [sys.executable, "-m", "sturdyrpc", "call", "echo", "[1]", "--", sys.executable, "-c", server]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r.stderr
    assert r.stdout == ""
    assert json.loads(r.stderr.strip().splitlines()[-1]) == {"code": -32700, "message": "Parse error"}


def test_keyboardinterrupt_raised_by_handler_is_internal_error_not_a_crash(tmp_path: Any) -> None:
    # Only Exception and SystemExit were caught: a handler raising KeyboardInterrupt (inline, in
    # the thread pool, or async) stopped the whole stdio server (exit 130, later requests lost).
    server = tmp_path / "server.py"
    server.write_text(
        "from sturdyrpc import Dispatcher\n"
        "from sturdyrpc.transports.stdio import run_stdio\n"
        "rpc = Dispatcher()\n"
        "@rpc.method(blocking=False)\n"
        "def kbd_inline(): raise KeyboardInterrupt('x')\n"
        "@rpc.method\n"
        "def kbd_thread(): raise KeyboardInterrupt('x')\n"
        "@rpc.method\n"
        "async def kbd_async(): raise KeyboardInterrupt('x')\n"
        "@rpc.method(blocking=False)\n"
        "def ok(): return 1\n"
        "raise SystemExit(run_stdio(rpc))\n"
    )
    for method in ("kbd_inline", "kbd_thread", "kbd_async"):
        data = b'{"jsonrpc":"2.0","method":"%s","id":1}\n' % method.encode()
        data += b'[{"jsonrpc":"2.0","method":"%s","id":3}]\n' % method.encode()
        p = subprocess.run([sys.executable, str(server)], input=data, capture_output=True, timeout=30)
        assert p.returncode == 0, p.stderr[-500:]
        out = [json.loads(line) for line in p.stdout.splitlines()]
        single = next(o for o in out if type(o) is dict)
        batch = next(o for o in out if type(o) is list)
        assert single["id"] == 1 and single["error"]["code"] == -32603
        assert batch[0]["id"] == 3 and batch[0]["error"]["code"] == -32603


def test_error_message_on_the_wire_is_always_a_string() -> None:
    # An RPCError raised with a non-string message (a dict, an int, bytes) went out as such:
    # the spec says the error's "message" MUST be a String.
    from sturdyrpc.errors import ApplicationError, InvalidParams, RPCError

    rpc = Dispatcher()

    @rpc.method(blocking=False)
    def a() -> None:
        raise InvalidParams({"x": 1})  # type: ignore[arg-type]

    @rpc.method(blocking=False)
    def b() -> None:
        raise ApplicationError(5, 123)  # type: ignore[arg-type]

    @rpc.method(blocking=False)
    def c() -> None:
        raise RPCError(b"raw")  # type: ignore[arg-type]

    for name, code in (("a", -32602), ("b", 5), ("c", -32603)):
        out = rpc.handle_sync(b'{"jsonrpc":"2.0","method":"%s","id":1}' % name.encode())
        assert out is not None
        err = json.loads(out)["error"]
        assert err["code"] == code and type(err["message"]) is str


def test_stdout_closed_from_the_start_is_served_cleanly() -> None:
    # `sturdyrpc demo >&-`: the event loop's own descriptor took fd 1, was claimed as stdout and
    # registered in itself: the server died with an OSError traceback (exit 1).
    cmd = " ".join(f"'{a}'" for a in DEMO) + " >&-"
    data = b'{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}\n{"jsonrpc":"2.0","method":"record","params":[1]}\n'
    p = subprocess.run(["sh", "-c", "exec " + cmd], input=data, capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr[-800:]
    assert b"Traceback" not in p.stderr
