"""``sturdyrpc call``: every exit code path, against the demo server and some misbehaving ones."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.timeout(60)

CALL = [sys.executable, "-m", "sturdyrpc", "call"]
DEMO = ["--", sys.executable, "-m", "sturdyrpc", "demo"]


def call(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CALL, *args], capture_output=True, text=True, timeout=timeout)


def test_result_on_stdout_exit_0() -> None:
    r = call("subtract", "[42, 23]", *DEMO)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == 19
    r = call("get_data", *DEMO)
    assert r.returncode == 0 and json.loads(r.stdout) == ["hello", 5]
    r = call("echo", '{"value": {"nested": [1, "ü", null]}}', *DEMO)
    assert json.loads(r.stdout) == {"nested": [1, "ü", None]}


def test_chosen_id() -> None:
    r = call("echo", '["x"]', "--id", '"7"', *DEMO)
    assert r.returncode == 0 and json.loads(r.stdout) == "x"
    r = call("echo", '["x"]', "--id", "42", *DEMO)
    assert r.returncode == 0


def test_rpc_error_on_stderr_exit_1() -> None:
    r = call("nope", *DEMO)
    assert r.returncode == 1
    assert r.stdout == ""
    assert json.loads(r.stderr.strip().splitlines()[-1]) == {"code": -32601, "message": "Method not found"}
    r = call("fail", *DEMO)
    assert r.returncode == 1
    err = json.loads(r.stderr.strip().splitlines()[-1])
    assert err["code"] == -32603 and "SECRET" not in r.stderr


def test_timeout_exit_124_sends_cancel() -> None:
    # A server that records what it receives, then never answers.
    server = (
        "import sys, json\n"
        "for line in sys.stdin:\n"
        "    sys.stderr.write('got ' + line)\n"
        "    sys.stderr.flush()\n"
    )
    start = time.monotonic()
    r = call("sleep", '{"seconds": 30}', "--timeout", "0.3", "--", sys.executable, "-c", server)
    assert r.returncode == 124
    assert time.monotonic() - start < 10
    assert "no reply within 0.3 s" in r.stderr
    start = time.monotonic()
    r = call("sleep", '{"seconds": 30}', "--timeout", "0.3", *DEMO)
    assert r.returncode == 124 and time.monotonic() - start < 10


def test_cancel_notification_reaches_the_server(tmp_path: object) -> None:
    import pathlib

    log = pathlib.Path(str(tmp_path)) / "wire.log"
    server = f"import sys\nwith open({str(log)!r}, 'w') as f:\n    for line in sys.stdin:\n        f.write(line); f.flush()\n"
    r = call("m", "--timeout", "0.2", "--", sys.executable, "-c", server)
    assert r.returncode == 124
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert lines[0] == {"jsonrpc": "2.0", "method": "m", "id": 1}
    assert lines[1] == {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 1}}


def test_server_dies_mid_call_exit_1() -> None:
    server = "import sys\nsys.stdin.readline()\nsys.stderr.write('something broke\\n')\nsys.exit(3)\n"
    start = time.monotonic()
    r = call("echo", '["x"]', "--", sys.executable, "-c", server)
    assert r.returncode == 1
    assert time.monotonic() - start < 10
    assert "exited with code 3" in r.stderr and "something broke" in r.stderr


def test_server_closes_stdout_mid_call_exit_1() -> None:
    server = "import os, sys, time\nsys.stdin.readline()\nos.close(1)\ntime.sleep(30)\n"
    start = time.monotonic()
    r = call("echo", '["x"]', "--", sys.executable, "-c", server)
    assert r.returncode == 1
    assert time.monotonic() - start < 10
    assert "closed its stdout" in r.stderr


def test_server_killed_with_grandchild_holding_pipes() -> None:
    start = time.monotonic()
    r = call("echo", '["x"]', "--", "sh", "-c", "head -c1 >/dev/null; sleep 30 & exit 4")
    assert r.returncode == 1
    assert time.monotonic() - start < 10
    assert "exited with code 4" in r.stderr


def test_notify_exit_0() -> None:
    r = call("record", '["x"]', "--notify", *DEMO)
    assert r.returncode == 0 and r.stdout == ""


def test_progress_printed_on_stderr() -> None:
    server = (
        "import sys, json\n"
        "req = json.loads(sys.stdin.readline())\n"
        "tok = req['params']['workDoneToken']\n"
        "for i in (1, 2, 3):\n"
        "    print(json.dumps({'jsonrpc': '2.0', 'method': '$/progress', 'params': {'token': tok, 'value': {'progress': i, 'total': 3, 'message': 'step'}}}), flush=True)\n"
        "print(json.dumps({'jsonrpc': '2.0', 'result': 'ok', 'id': req['id']}), flush=True)\n"
    )
    r = call("work", "{}", "--progress", "--", sys.executable, "-c", server)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == "ok"
    assert [x for x in r.stderr.splitlines() if x.startswith("progress:")] == [
        "progress: 1/3 step",
        "progress: 2/3 step",
        "progress: 3/3 step",
    ]


def test_usage_errors_exit_2() -> None:
    assert call("echo", '["x"]').returncode == 2  # no server command
    assert call("echo", "not json", *DEMO).returncode == 2
    assert call("echo", "3", *DEMO).returncode == 2
    assert call("echo", "[1]", "--timeout", "0", *DEMO).returncode == 2


def test_cannot_start_exit_127() -> None:
    r = call("echo", "--", "/nonexistent/server")
    assert r.returncode == 127
    assert "cannot start" in r.stderr


def test_interrupt_exit_130_sends_cancel(tmp_path: object) -> None:
    import pathlib
    import signal

    log = pathlib.Path(str(tmp_path)) / "wire.log"
    server = f"import sys\nwith open({str(log)!r}, 'w') as f:\n    for line in sys.stdin:\n        f.write(line); f.flush()\n"
    proc = subprocess.Popen([*CALL, "m", "--", sys.executable, "-c", server], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (log.exists() and log.read_text()):
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 130, err
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert lines[1] == {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 1}}
