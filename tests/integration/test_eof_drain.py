"""EOF drains: when stdin closes, a server answers every request that was running or held back
by backpressure, then exits (the close deadline is for SIGTERM, not for the end of the input).
With the default max_in_flight of 256 and 2 s per call, 600 calls take three rounds: longer than
the 5 s close deadline that used to cut the MCP server short at EOF.
End to end, through real subprocesses."""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import Any

import msgspec
import pytest
from support import SERVERS

N = 600


def run_until_eof(cmd: list[str], messages: list[dict[str, Any]], timeout: float = 60) -> list[Any]:
    """Write ``messages`` as lines, close stdin, read every line until the server exits."""
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    err: list[bytes] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)  # type: ignore[union-attr]
    reader.start()

    def write() -> None:
        assert proc.stdin is not None
        proc.stdin.write(b"".join(msgspec.json.encode(m) + b"\n" for m in messages))
        proc.stdin.close()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        out = proc.stdout.read()
        proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    writer.join(5)
    reader.join(5)
    assert proc.returncode == 0, (proc.returncode, b"".join(err)[-2000:])
    return [msgspec.json.decode(line) for line in out.splitlines() if line.strip()]


def test_mcp_stdio_answers_all_600_slow_tool_calls_in_flight_or_queued_when_stdin_closes() -> None:
    messages: list[dict[str, Any]] = [
        {"jsonrpc": "2.0", "id": "init", "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]
    messages += [{"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "slow", "arguments": {"seconds": 2.0, "value": i}}}
                 for i in range(N)]
    replies = run_until_eof([sys.executable, str(SERVERS / "mcp_slow_tool_server.py")], messages, timeout=90)
    by_id = {m.get("id"): m for m in replies}
    assert "init" in by_id and "result" in by_id["init"]
    errors = [m for m in replies if "error" in m]
    assert errors == [], errors[:3]
    answered = sorted(i for i in by_id if isinstance(i, int))
    assert answered == list(range(N)), f"{len(answered)} of {N} answered"
    for i in range(N):
        result = by_id[i]["result"]
        assert result.get("isError") is not True, result
        assert result["content"][0]["text"] == str(i)


@pytest.mark.parametrize("seconds", [2.0])
def test_plain_stdio_demo_answers_all_600_sleeps_in_flight_or_queued_when_stdin_closes(seconds: float) -> None:
    messages = [{"jsonrpc": "2.0", "id": i, "method": "sleep", "params": {"seconds": seconds, "value": i}} for i in range(N)]
    replies = run_until_eof([sys.executable, "-m", "sturdyrpc", "demo"], messages, timeout=90)
    assert [m for m in replies if "error" in m] == []
    assert sorted(m["id"] for m in replies) == list(range(N))
    assert all(m["result"] == m["id"] for m in replies)


def peer_eof_rpc() -> Any:
    import asyncio

    from sturdyrpc import Dispatcher, Limits

    rpc = Dispatcher(Limits(max_in_flight=2))

    @rpc.method
    async def sleep(seconds: float, value: int) -> int:
        await asyncio.sleep(seconds)
        return value

    return rpc


def test_peer_at_eof_answers_running_and_held_requests_past_its_close_deadline() -> None:
    import asyncio

    from support.peer import Raw

    from sturdyrpc.peer import Peer
    from sturdyrpc.transports.memory import memory_pair

    async def main() -> list[Any]:
        a, b = memory_pair()
        p = Peer(a, peer_eof_rpc(), close_deadline=0.1)
        await p.start()
        raw = Raw(b)
        for i in range(8):
            await raw.send({"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 0.1, "value": i}, "id": i})
        b.close_write()  # EOF: 2 running, 6 held back by max_in_flight
        got = [await raw.recv(10) for _ in range(8)]
        await asyncio.wait_for(p.wait_closed(), 5)
        return got

    got = asyncio.run(main())
    assert sorted(m["id"] for m in got) == list(range(8))
    assert all("result" in m for m in got), got


def test_close_deadline_still_applies_to_close_while_draining_after_eof() -> None:
    import asyncio
    import time

    from support.peer import Raw

    from sturdyrpc.peer import Peer
    from sturdyrpc.transports.memory import memory_pair

    async def main() -> tuple[float, list[Any]]:
        a, b = memory_pair()
        p = Peer(a, peer_eof_rpc())
        await p.start()
        raw = Raw(b)
        for i in range(4):
            await raw.send({"jsonrpc": "2.0", "method": "sleep", "params": {"seconds": 30, "value": i}, "id": i})
        b.close_write()
        await asyncio.sleep(0.3)
        assert not p.closed.is_set()  # EOF alone never cuts the work short
        t0 = time.monotonic()
        await p.close(0.2)  # SIGTERM: the deadline applies
        elapsed = time.monotonic() - t0
        got = []
        for _ in range(10):
            m = await raw.recv(2)
            if m is None:  # closed
                break
            got.append(m)
        return elapsed, got

    elapsed, got = asyncio.run(main())
    assert elapsed < 3, elapsed
    # The two held back are refused; the two running are cancelled (never answered).
    assert sorted(m["id"] for m in got) == [2, 3]
    assert all(m["error"]["code"] == -32000 for m in got)
