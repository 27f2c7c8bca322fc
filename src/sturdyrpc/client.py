"""Client helpers: a :class:`~sturdyrpc.peer.Peer` connected to a subprocess, a TCP or a Unix socket.

::

    async with connect_stdio(["sturdyrpc", "demo"]) as conn:
        print(await conn.peer.request("subtract", [42, 23]))

The subprocess is shut down politely when the block ends: its stdin is closed, it gets
``shutdown_grace`` seconds to exit, then ``terminate()`` (SIGTERM), then ``kill()`` (SIGKILL).
Its pipes go through asyncio's subprocess transport, or on the portable path
(:func:`sturdyrpc.portable.portable`: Windows, or ``STURDYRPC_PORTABLE_STDIO=1``) through the
threads of :mod:`sturdyrpc.transports.fd`. If it dies (or closes its
stdout) while calls are in flight, they all fail at once with
:class:`~sturdyrpc.peer.ConnectionClosed`, whose message names the exit code. Its stderr is
kept (the last ``stderr_limit`` bytes) for diagnostics: :meth:`StdioConnection.stderr_text`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from .dispatch import Dispatcher
from .limits import DEFAULT_LIMITS
from .peer import MessageTransport, Peer
from .portable import portable
from .profile import Profile
from .transports.fd import FdReader
from .transports.stdio import StdioTransport
from .transports.streams import Framing, StreamTransport, open_tcp, open_unix

__all__ = ["connect_stdio", "connect_tcp", "connect_unix", "StdioConnection", "Connection"]

log = logging.getLogger("sturdyrpc")


class Connection:
    """A connected peer (``.peer``); closing it closes the peer."""

    def __init__(self, peer: Peer) -> None:
        self.peer = peer

    async def aclose(self, deadline: float = 5.0) -> None:
        await self.peer.close(deadline)


class _FdStream:
    """A pipe read by :class:`~sturdyrpc.transports.fd.FdReader`, read as a stream (``read()``;
    ``b""`` at the end): the child's stderr on the portable path."""

    def __init__(self, fd: int) -> None:
        self._chunks: asyncio.Queue[bytes] = asyncio.Queue()
        self.reader = FdReader(fd, self._chunks.put_nowait, lambda: self._chunks.put_nowait(b""))

    async def read(self, n: int = -1) -> bytes:
        return await self._chunks.get()


class _ThreadedProcess:
    """The child on the portable path: a ``subprocess.Popen`` whose pipes the fd layer's
    threads read and write, seen as an asyncio ``Process`` is (returncode, signals, stderr)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        assert popen.stderr is not None
        self.popen = popen
        self.pid = popen.pid
        self.stderr = _FdStream(popen.stderr.fileno())

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def send_signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def terminate(self) -> None:
        self.popen.terminate()

    def kill(self) -> None:
        self.popen.kill()

    def end_input(self) -> None:
        """EOF for the child (asyncio's transport gives it when the peer closes its writer)."""
        if self.popen.stdin is not None:
            with contextlib.suppress(OSError):
                self.popen.stdin.close()

    def close_pipes(self) -> None:
        self.end_input()
        self.stderr.reader.close()
        for f in (self.popen.stdout, self.popen.stderr):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()


class StdioConnection(Connection):
    """A peer talking to a subprocess over its stdin/stdout."""

    def __init__(self, peer: Peer, process: asyncio.subprocess.Process | _ThreadedProcess, stderr_limit: int) -> None:
        super().__init__(peer)
        self.process = process
        self._stderr = bytearray()
        self._stderr_limit = stderr_limit
        self._stderr_task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None

    def stderr_text(self) -> str:
        """What the server wrote on stderr so far (the tail, when it wrote a lot)."""
        return self._stderr.decode("utf-8", errors="replace")

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    async def _pump_stderr(self) -> None:
        stream = self.process.stderr
        if stream is None:
            return
        while True:
            try:
                data = await stream.read(65536)
            except (ConnectionError, OSError):
                return
            if not data:
                return
            buf = self._stderr
            buf += data
            if len(buf) > self._stderr_limit:
                del buf[: len(buf) - self._stderr_limit]

    async def wait_exit(self, timeout: float | None = None) -> int | None:
        """Wait until the process has exited (its exit code) or ``timeout`` passes (None).

        Unlike ``process.wait()`` this does not also wait for the process's pipes to close,
        which a grandchild holding them open would delay indefinitely.
        """
        loop = asyncio.get_running_loop()
        end = None if timeout is None else loop.time() + timeout
        while self.process.returncode is None:
            if end is not None and loop.time() >= end:
                return None
            await asyncio.sleep(0.02)
        return self.process.returncode

    async def _watch(self) -> None:
        closed = asyncio.ensure_future(self.peer.wait_closed())
        exited = asyncio.ensure_future(self.wait_exit())
        try:
            await asyncio.wait([closed, exited], return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            exited.cancel()
        code = self.process.returncode
        if code is None:
            return
        # Data already written to the pipe is still read; then, if a grandchild keeps stdout
        # open, EOF would never come: stop waiting for it.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.peer.wait_closed(), 0.5)
        if not self.peer.is_closing:
            self.peer.abort(_exit_reason(code))

    async def aclose(self, deadline: float = 5.0, shutdown_grace: float = 2.0) -> None:
        """Close the peer (drain within ``deadline``), then stop the process politely."""
        await self.peer.close(deadline)
        proc = self.process
        if isinstance(proc, _ThreadedProcess):
            proc.end_input()
        if proc.returncode is None:
            await self.wait_exit(shutdown_grace)
        # terminate(), then kill(): SIGTERM and SIGKILL on POSIX, TerminateProcess on Windows.
        for stop in (proc.terminate, proc.kill):
            if proc.returncode is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                stop()
            await self.wait_exit(shutdown_grace)
        for t in (self._watch_task, self._stderr_task):
            if t is not None:
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(t, 0.3)
        # A grandchild may still hold the pipes open: close our ends now, not at interpreter exit.
        if isinstance(proc, _ThreadedProcess):
            proc.close_pipes()
            return
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            with contextlib.suppress(Exception):
                transport.close()


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "the server closed its stdout"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the server was killed by {name}"
    return f"the server exited with code {code}"


@contextlib.asynccontextmanager
async def connect_stdio(
    argv: Sequence[str],
    *,
    profile: Profile | None = None,
    dispatcher: Dispatcher | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    framing: Framing = "line",
    max_frame: int = DEFAULT_LIMITS.max_message_bytes,
    stderr_limit: int = 1024 * 1024,
    shutdown_grace: float = 2.0,
    close_deadline: float = 5.0,
    wrap_transport: Callable[[MessageTransport], MessageTransport] | None = None,
    **peer_kwargs: Any,
) -> AsyncIterator[StdioConnection]:
    """Start ``argv`` as a subprocess and yield a :class:`StdioConnection` talking to it.

    ``env`` replaces the environment (None: inherit). Raises ``OSError`` (e.g.
    ``FileNotFoundError``) when the program cannot be started. ``wrap_transport``: the peer
    runs on what it returns for the pipes' transport (``sturdyrpc inspect`` watches the traffic
    so). Other keyword arguments go to :class:`~sturdyrpc.peer.Peer`.
    """
    if not argv:
        raise ValueError("argv must name a program")
    proc, transport = await _start(argv, env, cwd, framing, max_frame)
    if wrap_transport is not None:
        transport = wrap_transport(transport)
    peer_kwargs.setdefault("name", f"client:{os.path.basename(str(argv[0]))}")
    peer = Peer(transport, dispatcher, profile=profile, **peer_kwargs)
    conn = StdioConnection(peer, proc, stderr_limit)
    loop = asyncio.get_running_loop()
    try:
        await peer.start()
        conn._stderr_task = loop.create_task(conn._pump_stderr())
        conn._watch_task = loop.create_task(conn._watch())
        yield conn
    finally:
        await conn.aclose(close_deadline, shutdown_grace)


async def _start(argv: Sequence[str], env: Mapping[str, str] | None, cwd: str | os.PathLike[str] | None, framing: Framing,
                 max_frame: int) -> tuple[asyncio.subprocess.Process | _ThreadedProcess, MessageTransport]:
    """The child and the transport to it: asyncio's subprocess pipes, or on the portable path
    ``subprocess.Popen`` and the stdio transport over its pipes (read and written by threads)."""
    env_ = dict(env) if env is not None else None
    if portable():
        popen = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=env_, cwd=cwd, bufsize=0)
        assert popen.stdin is not None and popen.stdout is not None
        threaded = _ThreadedProcess(popen)
        pipes = StdioTransport(popen.stdout.fileno(), popen.stdin.fileno(), framing=framing, max_frame=max_frame)
        await pipes.start()
        await threaded.stderr.reader.start()
        return threaded, pipes
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=env_, cwd=cwd, limit=65536 * 4,
    )
    assert proc.stdout is not None and proc.stdin is not None
    return proc, StreamTransport(proc.stdout, proc.stdin, framing=framing, max_frame=max_frame)


@contextlib.asynccontextmanager
async def connect_tcp(
    host: str,
    port: int,
    *,
    profile: Profile | None = None,
    dispatcher: Dispatcher | None = None,
    framing: Framing = "line",
    max_frame: int = DEFAULT_LIMITS.max_message_bytes,
    close_deadline: float = 5.0,
    **peer_kwargs: Any,
) -> AsyncIterator[Connection]:
    """Connect to a TCP server; yield a :class:`Connection` whose ``.peer`` is started."""
    transport: StreamTransport = await open_tcp(host, port, framing=framing, max_frame=max_frame)
    peer_kwargs.setdefault("name", f"client:{host}:{port}")
    async with _connected(transport, profile, dispatcher, close_deadline, peer_kwargs) as conn:
        yield conn


@contextlib.asynccontextmanager
async def connect_unix(
    path: str,
    *,
    profile: Profile | None = None,
    dispatcher: Dispatcher | None = None,
    framing: Framing = "line",
    max_frame: int = DEFAULT_LIMITS.max_message_bytes,
    close_deadline: float = 5.0,
    **peer_kwargs: Any,
) -> AsyncIterator[Connection]:
    """Connect to a Unix socket server; yield a :class:`Connection` whose ``.peer`` is started."""
    transport = await open_unix(path, framing=framing, max_frame=max_frame)
    peer_kwargs.setdefault("name", f"client:{path}")
    async with _connected(transport, profile, dispatcher, close_deadline, peer_kwargs) as conn:
        yield conn


@contextlib.asynccontextmanager
async def _connected(
    transport: StreamTransport, profile: Profile | None, dispatcher: Dispatcher | None, close_deadline: float, peer_kwargs: dict[str, Any]
) -> AsyncIterator[Connection]:
    peer = Peer(transport, dispatcher, profile=profile, **peer_kwargs)
    conn = Connection(peer)
    try:
        await peer.start()
        yield conn
    finally:
        await conn.aclose(close_deadline)
