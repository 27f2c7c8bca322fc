"""End to end: ``sturdyrpc demo`` in a subprocess over real pipes."""

from __future__ import annotations

import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from support import ROOT
from support.process import DEMO_CMD, ServerProcess, wait_until

pytestmark = pytest.mark.timeout(60)

PARSE_ERROR = {"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": None}


def req(method: str, params: Any = None, id: Any = 1) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": id}
    if params is not None:
        msg["params"] = params
    return msgspec.json.encode(msg)


def assert_alive(p: ServerProcess, id: Any = "alive") -> None:
    """The server still answers a normal request."""
    p.send_line(req("echo", ["still here"], id))
    assert p.recv(timeout=10) == {"jsonrpc": "2.0", "result": "still here", "id": id}


def test_pipelined_requests_all_answered_once(demo_proc: ServerProcess) -> None:
    n = 500
    lines = []
    for i in range(n):
        if i % 5 == 0:
            lines.append(req("sleep", {"seconds": 0, "value": i}, i))
        elif i % 2:
            lines.append(req("echo", [i], str(i)))  # string ids
        else:
            lines.append(req("subtract", [i, 1], i))
    demo_proc.send(b"\n".join(lines) + b"\n")
    got: dict[Any, Any] = {}
    for _ in range(n):
        resp = demo_proc.recv(timeout=10)
        key = (type(resp["id"]), resp["id"])
        assert key not in got, f"answered twice: {resp}"
        got[key] = resp["result"]
    for i in range(n):
        if i % 5 == 0:
            assert got[(int, i)] == i
        elif i % 2:
            assert got[(str, str(i))] == i
        else:
            assert got[(int, i)] == i - 1
    demo_proc.no_more(0.2)


def test_out_of_order_replies(demo_proc: ServerProcess) -> None:
    assert_alive(demo_proc, "warm-up")
    demo_proc.send_line(req("sleep", {"seconds": 0.5, "value": "slow"}, "slow"))
    demo_proc.send_line(req("echo", ["fast"], "fast"))
    assert demo_proc.recv() == {"jsonrpc": "2.0", "result": "fast", "id": "fast"}
    assert demo_proc.recv() == {"jsonrpc": "2.0", "result": "slow", "id": "slow"}


def test_eof_drains_running_requests_then_exits_zero(demo_proc: ServerProcess) -> None:
    demo_proc.send_line(req("sleep", {"seconds": 0.3, "value": "drained"}, 1))
    demo_proc.send_line(b'{"jsonrpc":"2.0","method":"record","params":["n"]}')
    demo_proc.close_stdin()
    assert demo_proc.recv() == {"jsonrpc": "2.0", "result": "drained", "id": 1}
    assert demo_proc.wait(5) == 0
    assert demo_proc.recv_line() is None  # stdout closed, nothing else written


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_long_request_exits_promptly(demo_proc: ServerProcess, sig: signal.Signals) -> None:
    demo_proc.send_line(req("sleep", {"seconds": 60}, 1))
    assert_alive(demo_proc)  # the sleep has been read and started
    t0 = time.monotonic()
    demo_proc.proc.send_signal(sig)
    code = demo_proc.wait(5)
    assert time.monotonic() - t0 < 2
    assert code == 0
    assert b"Traceback" not in demo_proc.stderr


PRINTING_SERVER = textwrap.dedent(
    """
    import os, sys
    from sturdyrpc import Dispatcher, run_stdio

    rpc = Dispatcher()

    @rpc.method
    def chatty(x: int) -> int:
        print("PRINTED-BY-THREADED-HANDLER", x)
        return x

    @rpc.method(blocking=False)
    def chatty_inline(x: int) -> int:
        print("PRINTED-BY-INLINE-HANDLER", x)
        sys.stdout.write("WRITTEN-TO-SYS-STDOUT\\n")
        sys.stdout.flush()
        os.write(1, b"WRITTEN-TO-FD-1\\n")
        return x

    @rpc.method
    async def chatty_async(x: int) -> int:
        print("PRINTED-BY-ASYNC-HANDLER", x)
        return x

    sys.exit(run_stdio(rpc))
    """
)


def test_print_in_handler_cannot_corrupt_stdout(spawn: Any, tmp_path: Path) -> None:
    script = tmp_path / "printing_server.py"
    script.write_text(PRINTING_SERVER)
    p: ServerProcess = spawn([sys.executable, str(script)])
    for i, m in enumerate(["chatty", "chatty_inline", "chatty_async"]):
        p.send_line(req(m, [i], i))
    answers = sorted((p.recv() for _ in range(3)), key=lambda r: r["id"])
    assert answers == [{"jsonrpc": "2.0", "result": i, "id": i} for i in range(3)]
    p.close_stdin()
    assert p.wait(5) == 0
    wait_until(lambda: b"PRINTED-BY-ASYNC-HANDLER" in p.stderr, 2)
    # stdout holds protocol lines and nothing else.
    raw = bytes(p.raw_stdout)
    assert raw.endswith(b"\n")
    for line in raw.splitlines():
        obj = msgspec.json.decode(line)
        assert obj["jsonrpc"] == "2.0" and "id" in obj
    # (prints from the thread pool and the loop may interleave on stderr, so match the markers alone)
    for text in (b"PRINTED-BY-THREADED-HANDLER", b"PRINTED-BY-INLINE-HANDLER", b"WRITTEN-TO-SYS-STDOUT", b"WRITTEN-TO-FD-1", b"PRINTED-BY-ASYNC-HANDLER"):
        assert text not in raw
        assert text in p.stderr


@pytest.mark.parametrize(
    "line",
    [
        b'{"jsonrpc":"2.0","method":"echo","params":["\xff\xfe"],"id":1}',
        b"\xc3\x28\xa0\xa1",
        b'{"jsonrpc":"2.0","method":"echo","params":["\\ud800"],"id":1}',
        b'\xef\xbb\xbf{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}',
        b'{"jsonrpc":"2.0","method":"echo","params":[NaN],"id":1}',
    ],
    ids=["invalid-utf8-in-string", "invalid-utf8-bare", "lone-surrogate", "bom", "nan"],
)
def test_bad_bytes_parse_error_then_next_answered(demo_proc: ServerProcess, line: bytes) -> None:
    demo_proc.send_line(line)
    assert demo_proc.recv() == PARSE_ERROR
    assert_alive(demo_proc)


@pytest.mark.timeout(90)
def test_20mb_line_refused_cleanly_then_next_answered(demo_proc: ServerProcess) -> None:
    big = b'{"jsonrpc":"2.0","method":"echo","params":["' + b"x" * (20 * 1024 * 1024) + b'"],"id":1}\n'
    chunk = 1 << 20
    for i in range(0, len(big), chunk):
        demo_proc.send(big[i : i + chunk])
    resp = demo_proc.recv(timeout=20)
    assert resp["error"]["code"] == -32600 and resp["id"] is None
    assert "result" not in resp
    assert_alive(demo_proc)
    demo_proc.no_more(0.2)  # refused once, not once per chunk
    assert demo_proc.proc.poll() is None


def test_100k_nested_brackets_clean_error_then_next_answered(demo_proc: ServerProcess) -> None:
    demo_proc.send_line(b"[" * 100_000)
    resp = demo_proc.recv(timeout=10)
    assert resp["error"]["code"] in (-32600, -32700) and resp["id"] is None
    demo_proc.send_line(b"[" * 100_000 + b"]" * 100_000)
    resp = demo_proc.recv(timeout=10)
    assert resp["error"]["code"] in (-32600, -32700) and resp["id"] is None
    assert_alive(demo_proc)
    assert b"RecursionError" not in demo_proc.stderr


def test_50k_element_batch_refused_with_one_error_then_next_answered(demo_proc: ServerProcess) -> None:
    batch = b"[" + b",".join(b'{"jsonrpc":"2.0","method":"record","params":[%d],"id":%d}' % (i, i) for i in range(50_000)) + b"]"
    demo_proc.send_line(batch)
    resp = demo_proc.recv(timeout=10)
    assert isinstance(resp, dict), "one error, not an array of 50,000"
    assert resp["error"]["code"] == -32600 and resp["id"] is None
    assert_alive(demo_proc)
    demo_proc.send_line(req("recorded", None, "r"))
    assert demo_proc.recv() == {"jsonrpc": "2.0", "result": [], "id": "r"}  # nothing of it ran


def test_message_in_three_chunks_with_pauses(demo_proc: ServerProcess) -> None:
    msg = req("echo", ["chunked"], 42) + b"\n"
    demo_proc.send(msg[:10])
    time.sleep(0.1)
    demo_proc.send(msg[10:30])
    time.sleep(0.1)
    demo_proc.no_more(0.05)
    demo_proc.send(msg[30:])
    assert demo_proc.recv() == {"jsonrpc": "2.0", "result": "chunked", "id": 42}


def test_crlf_and_blank_lines(demo_proc: ServerProcess) -> None:
    demo_proc.send(b"\n\r\n   \n" + req("echo", ["crlf"], 1) + b"\r\n\r\n\n" + req("echo", ["lf"], 2) + b"\n")
    assert demo_proc.recv() == {"jsonrpc": "2.0", "result": "crlf", "id": 1}
    assert demo_proc.recv() == {"jsonrpc": "2.0", "result": "lf", "id": 2}
    demo_proc.no_more(0.2)  # blank lines are not answered


def test_notifications_and_responses_get_nothing_over_stdio(demo_proc: ServerProcess) -> None:
    demo_proc.send_line(b'{"jsonrpc":"2.0","method":"nope"}')
    demo_proc.send_line(b'{"jsonrpc":"2.0","method":"fail"}')
    demo_proc.send_line(b'{"jsonrpc":"2.0","result":1,"id":1}')
    demo_proc.send_line(b'{"jsonrpc":"2.0","error":{"code":1,"message":"x"},"id":2}')
    assert_alive(demo_proc)
    demo_proc.no_more(0.2)


def test_fail_leaks_nothing_over_stdio(demo_proc: ServerProcess) -> None:
    demo_proc.send_line(req("fail", None, 1))
    line = demo_proc.recv_line()
    assert line is not None
    for needle in (b"SECRET", b"shadow", b"RuntimeError", b"Traceback", b"/", b".py"):
        assert needle not in line
    incident = msgspec.json.decode(line)["error"]["data"]["incident"]
    assert wait_until(lambda: incident.encode() in demo_proc.stderr and b"SECRET-TOKEN-42" in demo_proc.stderr, 3)


def _content_length_frames(raw: bytes) -> list[bytes]:
    frames = []
    while raw:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        assert sep, f"incomplete header: {raw[:80]!r}"
        assert head.lower().startswith(b"content-length: ")
        n = int(head.split(b":", 1)[1])
        assert len(rest) >= n
        frames.append(rest[:n])
        raw = rest[n:]
    return frames


def test_content_length_framing(spawn: Any) -> None:
    p: ServerProcess = spawn([*DEMO_CMD, "--framing", "content-length"])

    def frame(body: bytes) -> bytes:
        return b"Content-Length: %d\r\n\r\n" % len(body) + body

    stream = frame(req("echo", ["\u00e9t\u00e9"], 1)) + b"Content-Length: nope\r\n\r\n" + frame(b"{bad") + frame(req("subtract", [5, 2], 2))
    # Split mid-header and mid-body.
    p.send(stream[:7])
    time.sleep(0.05)
    p.send(stream[7:40])
    time.sleep(0.05)
    p.send(stream[40:])
    assert wait_until(lambda: len(_safe_frames(bytes(p.raw_stdout))) >= 4, 5), bytes(p.raw_stdout)
    replies = [msgspec.json.decode(f) for f in _content_length_frames(bytes(p.raw_stdout))]
    assert replies[0] == {"jsonrpc": "2.0", "result": "\u00e9t\u00e9", "id": 1}
    assert replies[1]["error"]["code"] == -32700 and replies[1]["id"] is None  # bad header
    assert replies[2] == PARSE_ERROR
    assert replies[3] == {"jsonrpc": "2.0", "result": 3, "id": 2}
    assert len(replies) == 4
    p.close_stdin()
    assert p.wait(5) == 0


def _safe_frames(raw: bytes) -> list[bytes]:
    try:
        return _content_length_frames(raw)
    except AssertionError:
        return []


def test_startup_to_first_reply_is_quick(spawn: Any) -> None:
    t0 = time.monotonic()
    p: ServerProcess = spawn()
    p.send_line(req("echo", [1], 1))
    assert p.recv(timeout=10)["result"] == 1
    assert time.monotonic() - t0 < 3  # generous: CI machines vary; the benchmark measures it properly


def test_stdin_from_dev_null_exits_at_once() -> None:
    import subprocess

    done = subprocess.run(DEMO_CMD, stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    assert done.returncode == 0
    assert done.stdout == b""


def test_stdin_from_regular_file_and_stdout_to_file(tmp_path: Path) -> None:
    import subprocess

    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(req("sleep", {"seconds": 0.2, "value": "late"}, 1) + b"\n" + req("echo", ["early"], 2) + b"\n[]\n")
    out_path = tmp_path / "out.jsonl"
    with requests.open("rb") as fin, out_path.open("wb") as fout:
        done = subprocess.run(DEMO_CMD, stdin=fin, stdout=fout, stderr=subprocess.PIPE, timeout=10)
    assert done.returncode == 0
    replies = [msgspec.json.decode(line) for line in out_path.read_bytes().splitlines()]
    assert sorted(map(str, (r["id"] for r in replies))) == ["1", "2", "None"]
    assert {"jsonrpc": "2.0", "result": "late", "id": 1} in replies


BLOCKING_SERVER = textwrap.dedent(
    """
    import sys, time
    from sturdyrpc import Dispatcher, run_stdio

    rpc = Dispatcher()

    @rpc.method
    def block(seconds: float) -> str:
        time.sleep(seconds)
        return "done"

    sys.exit(run_stdio(rpc))
    """
)


def test_user_server_with_blocking_sync_handler_sigterm_and_eof(spawn: Any, tmp_path: Path) -> None:
    # A sync handler stuck in a thread must not hold the process open after SIGTERM
    # (the stdlib thread pool joins its threads at exit) ...
    script = tmp_path / "blocking_server.py"
    script.write_text(BLOCKING_SERVER)
    p: ServerProcess = spawn([sys.executable, str(script)])
    p.send_line(req("block", [0.01], 0))
    assert p.recv()["result"] == "done"
    p.send_line(req("block", [30], 1))
    time.sleep(0.2)
    t0 = time.monotonic()
    p.proc.send_signal(signal.SIGTERM)
    assert p.wait(5) == 0
    assert time.monotonic() - t0 < 2
    # ... while at EOF a running blocking request still finishes and is answered.
    q: ServerProcess = spawn([sys.executable, str(script)])
    q.send_line(req("block", [0.3], 2))
    q.close_stdin()
    assert q.recv() == {"jsonrpc": "2.0", "result": "done", "id": 2}
    assert q.wait(5) == 0


def test_daemon_thread_pool() -> None:
    import threading

    from sturdyrpc.execute import DaemonThreadPool

    pool = DaemonThreadPool(2)
    gate = threading.Event()
    futures = [pool.submit(gate.wait, 5) for _ in range(4)]
    time.sleep(0.05)
    assert len(pool._threads) == 2 and all(t.daemon for t in pool._threads)
    assert sum(f.running() for f in futures) == 2
    gate.set()
    assert [f.result(5) for f in futures] == [True] * 4
    boom = pool.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        boom.result(5)
    assert pool.submit(lambda x, y=0: x + y, 1, y=2).result(5) == 3
    assert len(pool._threads) == 2  # idle threads are reused
    pool.shutdown(wait=True)
    with pytest.raises(RuntimeError):
        pool.submit(print)


def test_make_demo_session_passes() -> None:
    import subprocess

    script = ROOT / "scripts" / "demo_session.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stdout.decode()[-3000:]
    assert b"all " in done.stdout and b"checks passed" in done.stdout
    replies = [line for line in done.stdout.splitlines() if line.startswith(b"<-- ")]
    assert len(replies) >= 15
    assert not any(b"SECRET" in line for line in replies)
