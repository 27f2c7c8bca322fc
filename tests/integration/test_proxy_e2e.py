"""trace, guard and replay as programs: real subprocesses over real pipes, against the misbehaving
server of ``proxy_bad_server.py`` and the demos (with our client and the official Python SDK)."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support import SERVERS
from support.mcp import recorded_cmd, validate_recording
from support.sdk import (
    Client,
    StdioServerParameters,
    check_cancel_on_wire,
    check_features_session,
    check_stdio_session,
    need_python_sdk,
)

pytestmark = pytest.mark.timeout(90)

PY = sys.executable
BAD = [PY, str(SERVERS / "proxy_bad_server.py")]
SRPC = [PY, "-m", "sturdyrpc"]


def line(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def req(id: Any, method: str, params: Any = None) -> dict[str, Any]:
    m: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        m["params"] = params
    return m


def cl(obj: Any) -> bytes:
    body = json.dumps(obj).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie whose parent has not reaped it yet is gone for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def wait_gone(pid: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pid_gone(pid):
            return True
        time.sleep(0.05)
    return pid_gone(pid)


_SESSIONS: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _no_leftovers() -> Any:
    # A failing test must not leave its proxy (and through it, its server) running.
    yield
    while _SESSIONS:
        p = _SESSIONS.pop()
        if p.poll() is None:
            p.kill()
            p.wait(5)


class Session:
    """A proxy process with our test acting as its client, line by line."""

    def __init__(self, argv: list[str], *, framing: str = "line") -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _SESSIONS.append(self.proc)
        self.framing = framing
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.raw = bytearray()
        threading.Thread(target=self._read, daemon=True).start()
        self.err = bytearray()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        buf = b""
        while True:
            data = self.proc.stdout.read1(65536)
            if not data:
                self.inbox.put(None)
                return
            self.raw += data
            buf += data
            while True:
                if self.framing == "line":
                    nl = buf.find(b"\n")
                    if nl < 0:
                        break
                    msg, buf = buf[:nl], buf[nl + 1 :]
                else:
                    end = buf.find(b"\r\n\r\n")
                    if end < 0:
                        break
                    n = int(buf[:end].split(b":")[1])
                    if len(buf) < end + 4 + n:
                        break
                    msg, buf = buf[end + 4 : end + 4 + n], buf[end + 4 + n :]
                self.inbox.put(json.loads(msg))

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        while True:
            data = self.proc.stderr.read1(65536)
            if not data:
                return
            self.err += data

    def send(self, obj: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cl(obj) if self.framing != "line" else line(obj))
        self.proc.stdin.flush()

    def recv(self, timeout: float = 10.0) -> Any:
        return self.inbox.get(timeout=timeout)

    def close(self, timeout: float = 20.0) -> tuple[int, str]:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout)
        time.sleep(0.1)
        return code, self.err.decode("utf-8", "replace")


# -- trace --------------------------------------------------------------------------------------

MISBEHAVIOUR = b"".join(
    [
        line(req(1, "echo", {"a": 1})),
        b'{ "jsonrpc" : "2.0", "id" : 2, "method" : "dup" }\r\n',  # odd spacing and CRLF pass unchanged
        line(req(3, "ghost")),
        line(req(4, "junk")),
        line(req(5, "pieces")),
        line({"jsonrpc": "2.0", "method": "note"}),
        line(req(6, "badcode")),
        line(req(7, "echo", ["last"])),
    ]
)


def test_trace_passes_bytes_unchanged_and_flags_every_bug(tmp_path: Path) -> None:
    direct = subprocess.run(BAD, input=MISBEHAVIOUR, capture_output=True, timeout=30)
    log = tmp_path / "session.ndjson"
    traced = subprocess.run([*SRPC, "trace", "--log", str(log), "--", *BAD], input=MISBEHAVIOUR, capture_output=True, timeout=30)
    assert traced.returncode == 0
    assert traced.stdout == direct.stdout  # the same bytes, junk and all, in the same order
    err = traced.stderr.decode()
    for rule in ("ids.duplicate-reply", "ids.unknown-reply", "framing.stdout-only-jsonrpc", "messages.notification-silent", "errors.code-range"):
        assert rule in err, rule
    assert "Loading model... 42%" in err
    assert "requests never answered: 0" in err
    records = [json.loads(x) for x in log.read_bytes().splitlines()]
    assert records[0]["sturdyrpc"] == "trace" and records[0]["framing"] == "line"
    c2s = [r for r in records if r.get("dir") == "c2s"]
    s2c = [r for r in records if r.get("dir") == "s2c"]
    assert len(c2s) == 8 and c2s[1]["msg"] == {"jsonrpc": "2.0", "id": 2, "method": "dup"}
    assert {"raw": "Loading model... 42%"}.items() <= [r for r in s2c if "raw" in r][0].items()
    assert all(isinstance(r["t"], float) and r["wall"] > 1e9 for r in c2s + s2c)


def test_trace_reports_unanswered_requests_and_exits_with_the_servers_code(tmp_path: Path) -> None:
    data = line(req(1, "hang")) + line(req("x", "die"))
    traced = subprocess.run([*SRPC, "trace", "--", *BAD], input=data, capture_output=True, timeout=30)
    assert traced.returncode == 3
    err = traced.stderr.decode()
    assert "requests never answered: 2" in err and "hang id=1" in err and 'die id="x"' in err


def test_trace_content_length_framing_is_byte_exact() -> None:
    data = cl(req(1, "echo", ["héllo"])) + cl(req(2, "subtract", [5, 3])) + cl({"jsonrpc": "2.0", "method": "update", "params": [1]})
    demo = [*SRPC, "demo", "--framing", "content-length"]
    direct = subprocess.run(demo, input=data, capture_output=True, timeout=30)
    traced = subprocess.run([*SRPC, "trace", "--framing", "content-length", "--", *demo], input=data, capture_output=True, timeout=30)
    assert traced.returncode == 0 and traced.stdout == direct.stdout and traced.stdout.count(b"Content-Length") == 2
    err = traced.stderr.decode()
    assert "echo id=1" in err and "subtract id=2" in err and "violations: 0" in err


def test_trace_content_length_reassembles_pieces_and_flags_duplicates() -> None:
    s = Session([*SRPC, "trace", "--framing", "content-length", "--", *BAD, "--content-length"], framing="cl")
    for obj in (req(1, "pieces"), req(2, "dup")):
        s.send(obj)
    assert s.recv()["result"] == "in pieces"
    assert [s.recv()["result"], s.recv()["result"]] == [1, 2]
    code, err = s.close()
    assert code == 0 and "ids.duplicate-reply" in err and "pieces id=1" in err


# -- guard --------------------------------------------------------------------------------------


def test_guard_passes_only_valid_expected_replies() -> None:
    out = subprocess.run([*SRPC, "guard", "--", *BAD], input=MISBEHAVIOUR, capture_output=True, timeout=30)
    assert out.returncode == 0
    replies = [json.loads(x) for x in out.stdout.splitlines()]
    assert [r["id"] for r in replies] == [1, 2, 3, 4, 5, 6, 7]  # once each, nothing else
    assert replies[1]["result"] == 1  # the first of the duplicates
    err = out.stderr.decode()
    assert "Loading model... 42%" in err and "dropped" in err


def test_guard_deadline_answers_and_cancels_on_the_server() -> None:
    s = Session([*SRPC, "guard", "--deadline", "0.5", "--", *BAD])
    s.send(req(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}))
    assert s.recv()["id"] == 0
    s.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    s.send(req(1, "hang"))
    reply = s.recv()
    assert reply["id"] == 1 and -32099 <= reply["error"]["code"] <= -32000 and "0.5 s" in reply["error"]["message"]
    s.send(req(2, "echo", [1]))  # array params under MCP: refused by guard, as a correct server refuses them
    refused = s.recv()
    assert refused["id"] == 2 and refused["error"]["code"] == -32602
    s.send(req(3, "echo", {"x": 1}))
    assert s.recv() == {"jsonrpc": "2.0", "id": 3, "result": {"params": {"x": 1}}}
    code, err = s.close()
    # the server got notifications/cancelled for the hang, under guard's id for it (initialize was 1)
    assert code == 0 and "CANCEL 2" in err and "mcp.params-array x1" in err


def test_guard_content_length_cancels_lsp_style() -> None:
    s = Session([*SRPC, "guard", "--framing", "content-length", "--deadline", "0.5", "--", *BAD, "--content-length"], framing="cl")
    s.send(req("h", "hang"))
    reply = s.recv()
    assert reply["id"] == "h" and reply["error"]["code"] == -32001
    s.send(req(2, "pieces"))
    assert s.recv()["result"] == "in pieces"
    code, err = s.close()
    assert code == 0 and "CANCEL 1" in err  # $/cancelRequest, under guard's id for "h"


def test_guard_answers_pending_requests_when_the_server_dies() -> None:
    s = Session([*SRPC, "guard", "--", *BAD])
    s.send(req(1, "hang"))
    s.send(req(2, "hang"))
    s.send(req(3, "die"))
    replies = sorted((s.recv(), s.recv(), s.recv()), key=lambda r: r["id"])
    assert [r["id"] for r in replies] == [1, 2, 3]
    assert all(r["error"]["code"] == -32002 and "code 3" in r["error"]["message"] for r in replies)
    assert s.recv() is None  # then stdout closes
    assert s.proc.wait(10) == 3


def test_guard_max_in_flight_holds_requests_in_order() -> None:
    s = Session([*SRPC, "guard", "--max-in-flight", "1", "--deadline", "1", "--", *BAD])
    s.send(req(0, "echo", ["up"]))
    assert s.recv()["id"] == 0  # the guard is up: what follows arrives when it is sent
    s.send(req(1, "hang"))
    time.sleep(0.5)  # the echo's own deadline then falls after the hang's, which frees its slot
    s.send(req(2, "echo", ["waited"]))
    first, second = s.recv(), s.recv()
    # Without the limit the echo would come back at once, before the hang's deadline.
    assert first["id"] == 1 and first["error"]["code"] == -32001
    assert second == {"jsonrpc": "2.0", "id": 2, "result": {"params": ["waited"]}}
    s.close()


# -- no orphans ---------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["guard", "trace"])
def test_stdin_eof_stops_a_server_that_ignores_eof_and_sigterm(tmp_path: Path, tool: str) -> None:
    pidfile = tmp_path / "pid"
    s = Session([*SRPC, tool, "--grace", "0.3", "--", *BAD, "--ignore-eof", "--ignore-term", "--pidfile", str(pidfile)])
    s.send(req(1, "echo", [1]))
    assert s.recv()["id"] == 1
    pid = int(pidfile.read_text())
    code, err = s.close(timeout=15)
    assert code == 128 + signal.SIGKILL and "EOF" in err
    assert wait_gone(pid, 5)


@pytest.mark.parametrize("tool", ["guard", "trace"])
def test_the_server_dies_with_a_killed_proxy(tmp_path: Path, tool: str) -> None:
    pidfile = tmp_path / "pid"
    s = Session([*SRPC, tool, "--", *BAD, "--ignore-eof", "--pidfile", str(pidfile)])
    s.send(req(1, "echo", [1]))
    assert s.recv()["id"] == 1
    pid = int(pidfile.read_text())
    s.proc.kill()
    s.proc.wait(5)
    assert wait_gone(pid, 10)


@pytest.mark.parametrize("tool", ["guard", "trace"])
def test_the_server_is_stopped_when_the_parent_dies(tmp_path: Path, tool: str) -> None:
    # Our stdin stays open (the test holds it): only the parent's death shows the client is gone.
    pidfile = tmp_path / "pid"
    guard = [*SRPC, tool, "--grace", "0.3", "--", *BAD, "--ignore-eof", "--pidfile", str(pidfile)]
    parent = subprocess.Popen([PY, "-c", f"import subprocess; subprocess.Popen({guard!r}).wait()"], stdin=subprocess.PIPE)
    end = time.monotonic() + 20
    while not pidfile.exists() and time.monotonic() < end:
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    with open(f"/proc/{pid}/stat") as f:
        proxy_pid = int(f.read().split(")")[-1].split()[1])  # the server's parent: the proxy
    parent.kill()
    parent.wait(5)
    assert wait_gone(pid, 10)
    assert wait_gone(proxy_pid, 10)  # and the proxy itself does not linger
    assert parent.stdin is not None
    parent.stdin.close()


# -- real clients through the proxies -----------------------------------------------------------


@pytest.mark.parametrize("proxy", [["guard", "--deadline", "5"], ["trace"]])
def test_our_client_through_the_proxy_against_the_demo(proxy: list[str]) -> None:
    from sturdyrpc.client import connect_stdio

    async def main() -> None:
        async with connect_stdio([*SRPC, *proxy, "--", *SRPC, "demo"]) as conn:
            p = conn.peer
            assert await p.request("subtract", [42, 23]) == 19
            assert await p.request("echo", {"value": "7"}, id="7") == "7"
            results = await asyncio.gather(*(p.request("sleep", {"seconds": 0.2, "value": i}) for i in range(4)))
            assert results == [0, 1, 2, 3]

    asyncio.run(main())


@pytest.mark.parametrize(("tool", "mode"), [("trace", "legacy"), ("guard", "auto")])
def test_official_python_sdk_through_the_proxy(tmp_path: Path, tool: str, mode: str) -> None:
    need_python_sdk()
    wire = tmp_path / "wire"
    errlog = tmp_path / "proxy.err"
    extra = ["--log", str(tmp_path / "session.ndjson")] if tool == "trace" else ["--deadline", "20"]
    proxy = [*SRPC, tool, *extra, "--", *recorded_cmd(wire)]
    # The proxy's stderr goes to a file, so its summary can be read after the session.
    shell = ["sh", "-c", f'exec "$@" 2>>{errlog}', "sh", *proxy]

    async def main() -> None:
        async with Client(StdioServerParameters(command=shell[0], args=shell[1:]), mode=mode, read_timeout_seconds=20) as c:
            await check_stdio_session(c, mode, wire)

    asyncio.run(main())
    check_cancel_on_wire(wire)
    assert validate_recording(wire, "2026-07-28" if mode == "auto" else "2025-11-25") >= 15
    end = time.monotonic() + 10
    while "summary ==" not in errlog.read_text() and time.monotonic() < end:
        time.sleep(0.1)
    err = errlog.read_text()
    assert "violations: 0" in err, err[-3000:]
    if tool == "trace":
        assert "MCP version: 2025-11-25" in err and "tools/call" in err


# -- replay -------------------------------------------------------------------------------------


def test_replay_same_behaviour_differences_and_ignore(tmp_path: Path) -> None:
    log = tmp_path / "session.ndjson"
    data = line(req(1, "echo", {"a": 1})) + line({"jsonrpc": "2.0", "method": "update"}) + line(req(2, "nope")) + line(req(3, "echo", [2]))
    rec = subprocess.run([*SRPC, "trace", "--log", str(log), "--", *BAD], input=data, capture_output=True, timeout=30)
    assert rec.returncode == 0
    same = subprocess.run([*SRPC, "replay", str(log), "--", *BAD], capture_output=True, timeout=30)
    assert same.returncode == 0 and b"3 replies compared, same behaviour" in same.stderr
    changed = subprocess.run([*SRPC, "replay", str(log), "--", *BAD, "--shout"], capture_output=True, timeout=30)
    assert changed.returncode == 1
    out = changed.stdout.decode()
    assert out.count("differs") == 2 and '+    "shout": true' in out
    ignored = subprocess.run([*SRPC, "replay", str(log), "--ignore", "result.shout", "--", *BAD, "--shout"], capture_output=True, timeout=30)
    assert ignored.returncode == 0


def test_a_recording_as_a_pytest_regression_test(tmp_path: Path) -> None:
    # The recipe of docs/TOOLS.md: load the log, replay it, assert no difference.
    from sturdyrpc.proxy.replay import load_session
    from sturdyrpc.proxy.replay_run import replay_session

    log = tmp_path / "session.ndjson"
    data = line(req(1, "subtract", [5, 3])) + line(req(2, "echo", ["x"]))
    subprocess.run([*SRPC, "trace", "--log", str(log), "--", *SRPC, "demo"], input=data, capture_output=True, timeout=30, check=True)
    result = replay_session(load_session(log.read_bytes().splitlines()), [*SRPC, "demo"])
    assert result.compared == 2 and result.differences == [], [d.diff for d in result.differences]


def test_trace_judges_every_message_of_large_reads() -> None:
    # 3,000 requests in a few writes: judged in slices between reads, all of them by the end.
    data = b"".join(line(req(i, "echo", {"value": i})) for i in range(3000))
    traced = subprocess.run([*SRPC, "trace", "--quiet", "--", *SRPC, "demo"], input=data, capture_output=True, timeout=60)
    assert traced.returncode == 0 and traced.stdout.count(b"\n") == 3000
    err = traced.stderr.decode()
    assert "echo: 3000 / 0 / 0" in err and "requests never answered: 0" in err and "violations: 0" in err


@pytest.mark.parametrize("tool", ["guard", "trace"])
def test_server_requests_pass_both_ways_through_the_proxy(tmp_path: Path, tool: str) -> None:
    # The SDK's feature session (sampling, elicitation, logging, resources, prompts: requests the
    # server makes and the client answers) with the proxy in front of the recorded demo.
    options = {"guard": ["--deadline", "20"], "trace": ["--quiet"]}[tool]
    log = tmp_path / "wire"
    check_features_session([*SRPC, tool, *options, "--", *recorded_cmd(log)], log)


def test_trace_log_is_written_while_the_session_runs(tmp_path: Path) -> None:
    log = tmp_path / "live.ndjson"
    s = Session([*SRPC, "trace", "--log", str(log), "--", *BAD])
    s.send(req(1, "echo", {"a": 1}))
    assert s.recv()["id"] == 1
    end = time.monotonic() + 10
    while log.read_bytes().count(b"\n") < 3 and time.monotonic() < end:  # header, request, reply
        time.sleep(0.1)
    assert [json.loads(x).get("dir") for x in log.read_bytes().splitlines()] == [None, "c2s", "s2c"]
    s.close()


def test_trace_content_length_flags_a_broken_header_from_the_server(tmp_path: Path) -> None:
    # A server that prints a log line into its Content-Length stream: passed on unchanged by
    # trace (the client sees what it would see), flagged in the summary.
    server = tmp_path / "cl_junk.py"
    server.write_text(
        "import sys\n"
        "body = b'{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1}'\n"
        "sys.stdin.buffer.read()\n"
        "sys.stdout.buffer.write(b'starting up...\\r\\n\\r\\n' + b'Content-Length: %d\\r\\n\\r\\n' % len(body) + body)\n"
    )
    traced = subprocess.run([*SRPC, "trace", "--framing", "content-length", "--", PY, str(server)], input=cl(req(1, "x")), capture_output=True, timeout=30)
    assert traced.returncode == 0 and traced.stdout.startswith(b"starting up...")
    err = traced.stderr.decode()
    assert "framing.stdout-only-jsonrpc" in err and "x id=1" in err


def test_sigterm_to_the_proxy_stops_the_server_first(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    s = Session([*SRPC, "guard", "--grace", "0.3", "--", *BAD, "--pidfile", str(pidfile)])
    s.send(req(1, "echo", [1]))
    assert s.recv()["id"] == 1
    pid = int(pidfile.read_text())
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(15) == 0  # the server saw EOF and exited normally: its status is ours
    assert wait_gone(pid, 5)
    time.sleep(0.1)
    assert "signal SIGTERM" in s.err.decode() and "EOF" in s.err.decode()


# -- many messages a read: the fast path of both proxies ----------------------------------------

#: A server that reads N requests, then writes its replies in pieces cut in the middle of lines:
#: all well-formed but a few (a duplicate, an unknown id, a line of junk, a reserved error code).
SCRIPTED = [PY, "-c", """
import sys, time, json
n = int(sys.argv[1])
ids = [json.loads(sys.stdin.buffer.readline())["id"] for _ in range(n)]  # as it got them (guard maps them)
out = []
for i in range(n):
    if i == 100:
        out.append(b'{"jsonrpc":"2.0","id":%d,"result":"again"}' % ids[99])  # a duplicate: 100 never answered
    elif i == 200:
        out.append(b"Loading model... 42%")
    elif i == 300:
        out.append(b'{"jsonrpc":"2.0","id":9999,"result":1}')  # nobody asked (and 300 never answered)
    elif i == 400:
        out.append(b'{"jsonrpc":"2.0","id":%d,"error":{"code":-32500,"message":"odd"}}' % ids[400])
    else:
        out.append(b'{"jsonrpc":"2.0","id":%d,"result":"hello"}' % ids[i])
data = b"\\n".join(out) + b"\\n"
for at in range(0, len(data), 4099):
    sys.stdout.buffer.write(data[at:at + 4099])
    sys.stdout.buffer.flush()
    time.sleep(0.002)
""", "500"]


def _many_requests(n: int = 500) -> bytes:
    return b"".join(line(req(i, "echo", {"value": "hello"})) for i in range(n))


def test_trace_many_messages_a_read_byte_exact_and_every_bug_flagged(tmp_path: Path) -> None:
    data = _many_requests()
    direct = subprocess.run(SCRIPTED, input=data, capture_output=True, timeout=30)
    log = tmp_path / "session.ndjson"
    traced = subprocess.run([*SRPC, "trace", "--quiet", "--log", str(log), "--", *SCRIPTED], input=data, capture_output=True, timeout=30)
    assert traced.returncode == 0 and traced.stdout == direct.stdout and len(direct.stdout) > 15000
    err = traced.stderr.decode()
    for rule in ("ids.duplicate-reply", "ids.unknown-reply", "framing.stdout-only-jsonrpc", "errors.code-range"):
        assert err.count(rule) >= 1, rule
    assert "violations: 4" in err and "requests never answered: 3" in err and "echo: 500 / 1 / 0" in err
    records = [json.loads(x) for x in log.read_bytes().splitlines()[1:]]
    assert len(records) == 1000 and sum("raw" in r for r in records) == 1


def test_guard_many_messages_a_read_only_the_expected_replies() -> None:
    data = _many_requests()
    guarded = subprocess.run([*SRPC, "guard", "--max-in-flight", "1000", "--", *SCRIPTED], input=data, capture_output=True, timeout=30)
    replies = [json.loads(x) for x in guarded.stdout.splitlines()]
    assert sorted(r["id"] for r in replies) == list(range(500))  # each answered once, no stranger
    gone = {r["id"] for r in replies if r.get("error", {}).get("code") == -32002}
    assert gone == {100, 200, 300}  # answered by guard when the server exited without answering them
    assert next(r for r in replies if r["id"] == 400)["error"]["code"] == -32500  # passed on, and flagged
    err = guarded.stderr.decode()
    assert "Loading model... 42%" in err and "ids.duplicate-reply" in err and "ids.unknown-reply" in err


def test_guard_stops_reading_a_client_that_floods_a_server_that_never_answers() -> None:
    # Bounded memory: at MAX_OPEN unanswered requests guard reads no more (the client's writes
    # wait in the pipe, as they would at a server's backpressure), and goes on when replies come.
    from sturdyrpc.proxy.guard_proxy import MAX_OPEN

    proc = subprocess.Popen([*SRPC, "guard", "--", *BAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    assert MAX_OPEN <= 5000
    flood = b"".join(line(req(i, "hang", {"pad": "x" * 80})) for i in range(10_000))
    done = threading.Event()

    def write() -> None:
        try:
            proc.stdin.write(flood)  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
        except (BrokenPipeError, ValueError):
            pass
        done.set()

    threading.Thread(target=write, daemon=True).start()
    try:
        assert not done.wait(3.0), "guard read every request of the flood: nothing bounds what it holds"
    finally:
        proc.kill()
        proc.wait(10)
