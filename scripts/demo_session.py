"""``make demo``: a scripted session with ``sturdyrpc demo`` over real pipes.

Starts the demo server as a subprocess, sends each step's messages on its stdin, reads
the replies from its stdout and prints both (``-->`` sent, ``<--`` received). Every
reply is checked: the script exits 0 only if all of them were as expected, so it
doubles as a smoke test. Uses ``rich`` when stdout is a terminal, plain text otherwise.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

REPLY_TIMEOUT = 5.0
NO_REPLY = object()  # expectation: the server must not answer

Expect = Any  # a JSON value, a predicate, a list of them (batch, any order) or NO_REPLY


class Server:
    """``sturdyrpc demo`` over pipes; stdout and stderr read by threads."""

    def __init__(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sturdyrpc", "demo"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            bufsize=0,
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stderr = bytearray()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        buf = b""
        while chunk := os.read(self.proc.stdout.fileno(), 65536):
            buf += chunk
            *done, buf = buf.split(b"\n")
            for line in done:
                self.lines.put(line)
        self.lines.put(None)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        while chunk := os.read(self.proc.stderr.fileno(), 65536):
            self.stderr += chunk

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def recv(self, timeout: float = REPLY_TIMEOUT) -> bytes | None:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()


class Printer:
    def __init__(self) -> None:
        self.console: Any = None
        if sys.stdout.isatty():
            try:
                from rich.console import Console

                self.console = Console(highlight=False, soft_wrap=True)
            except ImportError:
                pass

    def _out(self, text: str, style: str) -> None:
        if self.console is not None:
            from rich.text import Text

            self.console.print(Text(text, style=style))
        else:
            print(text, flush=True)

    def title(self, text: str) -> None:
        self._out(f"\n# {text}", "bold cyan")

    def sent(self, line: bytes) -> None:
        self._out(f"--> {line.decode('utf-8', 'replace')}", "green")

    def received(self, line: bytes) -> None:
        self._out(f"<-- {line.decode('utf-8', 'replace')}", "magenta")

    def note(self, text: str) -> None:
        self._out(f"    {text}", "dim")

    def verdict(self, ok: bool, why: str = "") -> None:
        if ok:
            self._out("    ok", "bold green")
        else:
            self._out(f"    FAILED: {why}", "bold red")


def matches(expect: Any, value: Any) -> bool:
    if callable(expect):
        return bool(expect(value))
    if isinstance(expect, dict):
        return (
            isinstance(value, dict)
            and set(expect) == set(value)
            and all(matches(expect[k], value[k]) for k in expect)
        )
    if isinstance(expect, list):
        return isinstance(value, list) and len(expect) == len(value) and all(matches(e, v) for e, v in zip(expect, value, strict=True))
    return type(expect) is type(value) and expect == value


def batch_matches(expect: list[Any], value: Any) -> bool:
    """The same answers in any order (a batch reply's order is free)."""
    if not isinstance(value, list) or len(value) != len(expect):
        return False
    left = list(value)
    for e in expect:
        for i, v in enumerate(left):
            if matches(e, v):
                del left[i]
                break
        else:
            return False
    return True


class Session:
    def __init__(self) -> None:
        self.server = Server()
        self.out = Printer()
        self.passed = 0
        self.failed: list[str] = []

    def check(self, title: str, ok: bool, why: str) -> None:
        self.out.verdict(ok, why)
        if ok:
            self.passed += 1
        else:
            self.failed.append(title)

    def step(self, title: str, send: list[bytes], expect: list[Expect], *, batch: bool = False, note: str = "") -> list[Any]:
        """Send ``send`` (one line each), then read one reply per element of ``expect``, in order."""
        self.out.title(title)
        for line in send:
            self.out.sent(line)
            self.server.send(line)
        got: list[Any] = []
        for e in expect:
            line = self.server.recv()
            if line is None:
                self.check(title, False, f"no reply within {REPLY_TIMEOUT:.0f} s")
                return got
            self.out.received(line)
            try:
                value = json.loads(line)
            except ValueError:
                self.check(title, False, "reply is not JSON")
                return got
            got.append(value)
            ok = batch_matches(e, value) if batch and isinstance(e, list) else matches(e, value)
            if not ok:
                self.check(title, False, f"expected {e!r}")
                return got
        if note:
            self.out.note(note)
        self.check(title, True, "")
        return got

    def expect_silence(self, title: str, send: list[bytes], follow_up: bytes, follow_expect: Any, note: str) -> None:
        """Send messages that must get no reply, then a request whose reply must be the next line."""
        self.out.title(title)
        for line in send:
            self.out.sent(line)
            self.server.send(line)
        self.out.note("(no reply: the next line on stdout answers the follow-up request)")
        self.out.sent(follow_up)
        self.server.send(follow_up)
        line = self.server.recv()
        if line is None:
            self.check(title, False, "no reply to the follow-up")
            return
        self.out.received(line)
        self.out.note(note)
        self.check(title, matches(follow_expect, json.loads(line)), f"expected {follow_expect!r} first")


def err(code: int, message: str, id_: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": id_}


def ok(result: Any, id_: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "result": result, "id": id_}


def is_internal_error_without_leak(id_: Any) -> Callable[[Any], bool]:
    def check(v: Any) -> bool:
        text = json.dumps(v)
        return (
            v.get("id") == id_
            and v.get("error", {}).get("code") == -32603
            and v["error"].get("message") == "Internal error"
            and all(s not in text for s in ("SECRET", "shadow", "RuntimeError", "Traceback", "/", ".py"))
        )

    return check


def run() -> int:
    t0 = time.monotonic()
    s = Session()
    out = s.out
    out.note(f"server: {sys.executable} -m sturdyrpc demo (pid {s.server.proc.pid}), newline-delimited JSON over pipes")

    s.step(
        "Positional params (spec example)",
        [b'{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}'],
        [ok(19, 1)],
    )
    s.step(
        "Named params, any order (spec example)",
        [b'{"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3}'],
        [ok(19, 3)],
    )
    s.step(
        "Non-existent method (spec example)",
        [b'{"jsonrpc": "2.0", "method": "foobar", "id": "1"}'],
        [err(-32601, "Method not found", "1")],
    )
    s.step(
        "Invalid Request object (spec example)",
        [b'{"jsonrpc": "2.0", "method": 1, "params": "bar"}'],
        [err(-32600, "Invalid Request", None)],
    )
    s.step(
        "Wrong params are refused before the handler runs; the message names the parameter",
        [b'{"jsonrpc": "2.0", "method": "subtract", "params": {"minuend": 42}, "id": 5}'],
        [lambda v: v["id"] == 5 and v["error"]["code"] == -32602 and "'subtrahend'" in v["error"]["message"]],
    )
    s.expect_silence(
        "A notification is executed but never answered",
        [b'{"jsonrpc": "2.0", "method": "record", "params": ["hello"]}', b'{"jsonrpc": "2.0", "method": "foobar"}'],
        b'{"jsonrpc": "2.0", "method": "recorded", "id": 6}',
        ok(["hello"], 6),
        "record ran (the list holds \"hello\"); neither notification got a reply, not even the unknown method",
    )
    s.step(
        "Batch (spec example): one array back, answers in any order, notifications left out",
        [
            b'[{"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"}, '
            b'{"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}, '
            b'{"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"}, '
            b'{"foo": "boo"}, '
            b'{"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"}, '
            b'{"jsonrpc": "2.0", "method": "get_data", "id": "9"}]'
        ],
        [
            [
                ok(7, "1"),
                ok(19, "2"),
                err(-32600, "Invalid Request", None),
                err(-32601, "Method not found", "5"),
                ok(["hello", 5], "9"),
            ]
        ],
        batch=True,
    )
    s.expect_silence(
        "A batch of notifications only: nothing at all is written",
        [b'[{"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]}, {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}]'],
        b'{"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 0.05, "value": "after"}, "id": 8}',
        ok("after", 8),
        "the batch produced no output",
    )
    big = 2**64 + 1
    s.step(
        "Ids are echoed exactly: an integer beyond 64 bits, and \"7\" stays a string",
        [
            b'{"jsonrpc": "2.0", "method": "echo", "params": {"value": "big"}, "id": %d}' % big,
            b'{"jsonrpc": "2.0", "method": "echo", "params": ["str"], "id": "7"}',
        ],
        [ok("big", big), ok("str", "7")],
    )
    s.step(
        "Out-of-order replies: a slow request does not hold back a fast one",
        [
            b'{"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 0.5, "value": "slow"}, "id": "slow"}',
            b'{"jsonrpc": "2.0", "method": "echo", "params": ["fast"], "id": "fast"}',
        ],
        [ok("fast", "fast"), ok("slow", "slow")],
        note="sent slow first; fast came back first",
    )
    got = s.step(
        "A handler that raises RuntimeError(\"SECRET-TOKEN-42 /etc/shadow\"): nothing leaks",
        [b'{"jsonrpc": "2.0", "method": "fail", "id": 11}'],
        [is_internal_error_without_leak(11)],
    )
    if got and isinstance(got[0].get("error", {}).get("data"), dict):
        incident = str(got[0]["error"]["data"].get("incident"))
        deadline = time.monotonic() + 2
        while incident.encode() not in s.server.stderr and time.monotonic() < deadline:
            time.sleep(0.02)
        in_log = incident.encode() in s.server.stderr and b"Traceback" in s.server.stderr
        out.note(f"the traceback is in the server's log (stderr) under incident {incident}: {'yes' if in_log else 'NO'}")
        s.check("incident in the log", in_log, "incident id not found in stderr")
    s.step(
        "Sum that overflows to infinity: -32603, never an Infinity literal on the wire",
        [b'{"jsonrpc": "2.0", "method": "sum", "params": [1e308, 1e308], "id": 12}'],
        [lambda v: v["id"] == 12 and v["error"]["code"] == -32603],
    )
    s.step(
        "Invalid JSON (spec example): parse error, id null, and the server keeps serving",
        [
            b'{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]',
            b'{"jsonrpc": "2.0", "method": "echo", "params": ["still here"], "id": 13}',
        ],
        [err(-32700, "Parse error", None), ok("still here", 13)],
    )

    out.title("End of input: close stdin; running requests finish, then the server exits")
    s.server.send(b'{"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 0.2, "value": "drained"}, "id": 14}')
    out.sent(b'{"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 0.2, "value": "drained"}, "id": 14}')
    s.server.close_stdin()
    out.note("(stdin closed)")
    line = s.server.recv()
    if line is not None:
        out.received(line)
    drained = line is not None and matches(ok("drained", 14), json.loads(line))
    try:
        code: int | None = s.server.proc.wait(5)
    except subprocess.TimeoutExpired:
        s.server.proc.kill()
        code = None
    eof = s.server.recv(1.0) is None
    out.note(f"server exit code: {code}")
    s.check("clean exit", drained and code == 0 and eof, f"drained={drained} exit code={code} stdout closed={eof}")

    total = s.passed + len(s.failed)
    elapsed = time.monotonic() - t0
    if s.failed:
        out._out(f"\n{len(s.failed)} of {total} checks FAILED ({elapsed:.1f} s): {', '.join(s.failed)}", "bold red")
        tail = bytes(s.server.stderr[-2000:]).decode("utf-8", "replace")
        if tail:
            out._out("server stderr (last lines):\n" + tail, "dim")
        return 1
    out._out(f"\nall {total} checks passed ({elapsed:.1f} s)", "bold green")
    return 0


def main() -> int:
    try:
        return run()
    except BrokenPipeError:
        print("the server closed its stdin unexpectedly", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
