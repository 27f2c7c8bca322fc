"""The portable stdio path (threads reading and writing blocking pipes, as where the loop cannot
watch pipes: Windows' proactor loop), forced on Linux with ``STURDYRPC_PORTABLE_STDIO=1``: the
reader and writer, the checker's writes and the client over real pipes on both paths, the servers
taking it, no child inheriting our stdin, and the stdio, proxy, client and checker end-to-end
suites run again with it forced."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from support import SERVERS, TESTS

from sturdyrpc.check.driver import ServerProcess, WriteTimeout
from sturdyrpc.client import connect_stdio
from sturdyrpc.peer import ConnectionClosed
from sturdyrpc.portable import PORTABLE_ENV
from sturdyrpc.transports.fd import HIGH_WATER, FdReader, FdWriter
from sturdyrpc.transports.stdio import StdioTransport
from sturdyrpc.transports.streams import StreamTransport

PATHS = [("", "loop", "loop"), ("1", "thread", "thread")]


@pytest.fixture(params=PATHS, ids=["loop", "portable"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    forced, reader_mode, writer_mode = request.param
    if forced:
        monkeypatch.setenv(PORTABLE_ENV, forced)
    else:
        monkeypatch.delenv(PORTABLE_ENV, raising=False)
    yield reader_mode, writer_mode


def test_reader_delivers_pauses_and_ends(path: tuple[str, str]) -> None:
    async def main() -> None:
        r, w = os.pipe()
        got: list[bytes] = []
        eof = asyncio.Event()
        reader = FdReader(r, got.append, eof.set)
        await reader.start()
        assert reader.mode == path[0]
        os.write(w, b"one\n")
        while b"".join(got) != b"one\n":
            await asyncio.sleep(0.01)
        reader.pause()
        await asyncio.sleep(0.05)  # a thread may still finish the read it was in: at most that one
        os.write(w, b"two\n")
        await asyncio.sleep(0.2)
        paused_with = b"".join(got)
        reader.resume()
        os.write(w, b"three\n")
        os.close(w)
        await asyncio.wait_for(eof.wait(), 5)
        assert b"".join(got) == b"one\ntwo\nthree\n"
        assert paused_with in (b"one\n", b"one\ntwo\n")
        os.close(r)

    asyncio.run(main())


def test_reader_close_ends_at_once_and_drops_later_data(path: tuple[str, str]) -> None:
    async def main() -> None:
        r, w = os.pipe()
        got: list[bytes] = []
        eof = asyncio.Event()
        reader = FdReader(r, got.append, eof.set)
        await reader.start()
        reader.close()
        await asyncio.wait_for(eof.wait(), 1)
        os.write(w, b"late\n")
        await asyncio.sleep(0.1)
        assert got == []
        os.close(w)
        await asyncio.sleep(0.05)
        os.close(r)

    asyncio.run(main())


def test_writer_reports_backpressure_and_drains_in_order(path: tuple[str, str]) -> None:
    async def main() -> None:
        r, w = os.pipe()
        pauses: list[bool] = []
        writer = FdWriter(w, pauses.append)
        await writer.start()
        assert writer.mode == path[1]
        chunk = bytes(range(256)) * 256  # 64 KiB
        total = 8 * len(chunk) + 2 * HIGH_WATER  # more than the pipe and the high-water mark hold
        sent = 0
        i = 0
        while sent < total:
            data = bytes([i % 251]) + chunk[1:]
            writer.write(data)
            sent += len(data)
            i += 1
            await asyncio.sleep(0)
        await asyncio.sleep(0.3)
        assert pauses and pauses[0] is True, pauses  # nobody reads: the writer says so
        received = bytearray()
        os.set_blocking(r, False)
        writer.close()
        closed = asyncio.ensure_future(writer.wait_closed())
        while len(received) < sent:
            try:
                received += os.read(r, 1 << 16)
            except BlockingIOError:
                await asyncio.sleep(0.01)
        await asyncio.wait_for(closed, 5)
        assert pauses[-1] is False  # drained: lifted
        assert len(received) == sent
        assert [received[k * len(chunk)] for k in range(i)] == [k % 251 for k in range(i)]  # in order
        os.close(r)
        os.close(w)

    asyncio.run(main())


def test_writer_to_a_closed_pipe_breaks_without_raising(path: tuple[str, str]) -> None:
    async def main() -> None:
        r, w = os.pipe()
        writer = FdWriter(w)
        await writer.start()
        os.close(r)
        for _ in range(4):
            writer.write(b"x" * 65536)
            await asyncio.sleep(0.05)
        writer.close()
        await asyncio.wait_for(writer.wait_closed(), 5)
        assert writer.broken
        os.close(w)

    asyncio.run(main())


@pytest.mark.parametrize(("forced", "mode"), [("", "loop"), ("1", "thread")])
@pytest.mark.parametrize("args", [["demo"], ["demo", "--mcp"]])
def test_the_servers_take_the_path_asked_for(forced: str, mode: str, args: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != PORTABLE_ENV}
    if forced:
        env[PORTABLE_ENV] = forced
    r = subprocess.run([sys.executable, "-m", "sturdyrpc", "-vv", *args], input=b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n',
                       capture_output=True, env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    # stdout is written through a duplicate of fd 1 (the servers keep fd 1 from print()).
    assert re.search(rf"stdio: reading fd 0: {mode}; writing fd \d+: {mode}\n".encode(), r.stderr), r.stderr
    assert r.stdout.count(b"\n") == 1 and b'"id":1' in r.stdout


@pytest.mark.parametrize(
    ("server", "error"),
    [
        ("import time; time.sleep(30)", "the server read only "),  # never reads: the deadline
        ("pass", "the server closed its stdin"),  # gone: the broken pipe
    ],
)
def test_checker_writes_keep_their_deadline(path: tuple[str, str], server: str, error: str) -> None:
    proc = ServerProcess([sys.executable, "-c", server])
    try:
        if server == "pass":
            proc.wait(10)
        with pytest.raises(WriteTimeout, match=error):
            for _ in range(64):  # more than any pipe buffer, each write within its deadline or not
                proc.write(b"x" * 65536 + b"\n", 0.5)
    finally:
        proc.stop()


def test_checker_writes_reach_the_server_in_order(path: tuple[str, str]) -> None:
    echo = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line); sys.stdout.flush()\n"
    proc = ServerProcess([sys.executable, "-c", echo])
    try:
        for i in range(50):
            proc.write(b'{"n": %d}\n' % i, 5)
        got = [proc.next_message(5) for _ in range(50)]
        assert [f.value for f in got if f is not None] == [{"n": i} for i in range(50)]
    finally:
        proc.stop()


def test_the_client_takes_the_path_asked_for(path: tuple[str, str]) -> None:
    async def main() -> None:
        noisy = "import sys; sys.stderr.write('hello on stderr\\n'); sys.stderr.flush()\n" \
                "from sturdyrpc.demos.jsonrpc import make_demo; from sturdyrpc import run_stdio; raise SystemExit(run_stdio(make_demo()))"
        async with connect_stdio([sys.executable, "-c", noisy]) as conn:
            assert isinstance(conn.peer.transport, StdioTransport if path[0] == "thread" else StreamTransport)
            assert await conn.peer.request("subtract", [42, 23], timeout=10) == 19
            while "hello on stderr" not in conn.stderr_text():
                await asyncio.sleep(0.01)
            in_flight = asyncio.ensure_future(conn.peer.request("sleep", {"seconds": 30}, timeout=None))
            await asyncio.sleep(0.1)
            conn.process.kill()
            with pytest.raises(ConnectionClosed):  # at once, not after the 30 s
                await asyncio.wait_for(in_flight, 5)
        assert conn.returncode == -9

    asyncio.run(main())


IDENTITY_SERVER = [sys.executable, str(SERVERS / "stdin_identity_server.py")]
ASK = b'{"jsonrpc":"2.0","id":1,"method":"stdin"}\n'


@pytest.mark.parametrize(
    ("tool", "feed"),
    [
        (["call", "stdin"], b""),  # our client: connect_stdio
        (["guard"], ASK),
        (["trace"], ASK),
    ],
)
def test_no_child_server_inherits_our_stdin(path: tuple[str, str], tool: list[str], feed: bytes) -> None:
    # The tool's stdin is a pipe of ours; the server it starts must have a pipe of its own.
    r, w = os.pipe()
    ours = os.fstat(r)
    proc = subprocess.Popen([sys.executable, "-m", "sturdyrpc", *tool, "--", *IDENTITY_SERVER], stdin=r,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.close(r)
    os.write(w, feed)
    out, err = b"", b""
    try:
        if tool[0] == "call":
            out, err = proc.communicate(timeout=30)
        else:
            assert proc.stdout is not None
            out = proc.stdout.readline()  # the reply through the proxy, then EOF for it
            os.close(w)
            w = -1
            proc.wait(30)
    finally:
        if w != -1:
            os.close(w)
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
    assert proc.returncode == 0, err
    got = json.loads(out)
    dev, ino, is_pipe = got if type(got) is list else got["result"]
    assert is_pipe and (dev, ino) != (ours.st_dev, ours.st_ino)


def test_the_stdio_and_proxy_suites_pass_on_the_portable_path() -> None:
    # The same tests, their servers, proxies, clients and the checker started with the portable path forced.
    check = str(TESTS / "integration" / "test_check.py")
    # Two runs at once, of about the same length: the tests mostly wait on their subprocesses.
    halves = [
        [str(TESTS / "integration" / f) for f in ("test_stdio_e2e.py", "test_proxy_e2e.py", "test_peer_e2e.py",
                                                  "test_call_cli.py", "test_mcp_cli.py")]
        + [f"{check}::test_cli_demo_passes_with_reports"],
        [str(TESTS / "integration" / "test_eof_drain.py"), f"{check}::test_reference_server_passes_everything",
         f"{check}::test_mcp_reference_server_passes_everything[2025-11-25]",
         f"{check}::test_a_server_that_never_answers_cannot_hang_the_checker"],
    ]
    env = {**os.environ, PORTABLE_ENV: "1"}
    runs = [subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout=120",
                              *suites], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             stdin=subprocess.DEVNULL) for suites in halves]
    try:
        outs = [p.communicate(timeout=600) for p in runs]
    finally:
        for p in runs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
    for p, (out, err) in zip(runs, outs, strict=True):
        assert p.returncode == 0, out[-6000:] + err[-2000:]
        last = out.strip().splitlines()[-1]
        assert " passed" in last and "failed" not in last, last
