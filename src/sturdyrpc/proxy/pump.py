"""The thin I/O layer of ``trace`` and ``guard``: the client on our stdin/stdout, the server on
pipes, bytes moved between them on one event loop, and the shutdown rules.

A :class:`Proxy` subclass decides what to do with the bytes (:meth:`Proxy.from_client`,
:meth:`Proxy.from_server`); this module owns everything else: backpressure both ways, the
client going away (stdin EOF, the parent dying, SIGTERM/SIGINT/SIGHUP: the server then gets EOF,
SIGTERM after ``grace`` seconds, SIGKILL after ``grace`` more), the server going away (stdout
closed or the process exited), and the exit status (the server's).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import time

from ..framing import ContentLengthFramer, LineFramer, encode_content_length
from ..transports.fd import FdReader, FdWriter
from .process import Child, exit_status

__all__ = ["Proxy", "MAX_FRAME", "make_framer", "frame_payload", "check_command", "run_proxy"]

#: Frames larger than this are reported, not parsed (the bytes still pass through ``trace``).
MAX_FRAME = 64 * 1024 * 1024


def make_framer(framing: str) -> LineFramer | ContentLengthFramer:
    """A framer for ``framing`` (``line`` or ``content-length``)."""
    return ContentLengthFramer(MAX_FRAME) if framing == "content-length" else LineFramer(MAX_FRAME)


def frame_payload(framing: str, payload: bytes) -> bytes:
    """``payload`` framed for the wire."""
    return encode_content_length(payload) if framing == "content-length" else payload + b"\n"


class Proxy:
    """One client, one server, and the bytes between them. Subclasses decide what passes."""

    def __init__(self, cmd: list[str], *, framing: str = "line", grace: float = 2.0) -> None:
        self.cmd = cmd
        self.framing = framing
        self.grace = grace
        self.child: Child | None = None
        self.to_server: FdWriter | None = None
        self.to_client = FdWriter(1, self._client_pressure)
        self._client_in = FdReader(0, self._client_data, self._client_eof)
        self._server_out: FdReader | None = None
        self._client_gone = False
        self._server_full = False
        self._held = False
        self._server_eof = asyncio.Event()
        self._exited = asyncio.Event()
        self._stopping: asyncio.Task[None] | None = None

    # -- hooks -----------------------------------------------------------------------------------

    def from_client(self, data: bytes, now: float) -> None:
        """Bytes the client wrote (write to ``self.to_server``)."""
        raise NotImplementedError

    def from_server(self, data: bytes, now: float) -> None:
        """Bytes the server wrote (write to ``self.to_client``)."""
        raise NotImplementedError

    def server_gone(self, code: int | None) -> None:
        """The server closed its stdout or exited (``code``; None if not known yet)."""

    def client_gone(self, why: str) -> None:
        """The client went away (``why``: what showed it)."""

    def finish(self, code: int) -> None:
        """Everything is over; the proxy exits with ``code``."""

    def housekeeping(self) -> None:
        """Called twice a second while the proxy runs."""

    async def settle(self) -> None:
        """At the client's stdin EOF, before the server's stdin is closed: wait for what must be
        answered first (nothing, by default)."""

    # -- plumbing --------------------------------------------------------------------------------

    async def run(self) -> int:
        """Start the server and move bytes until both sides are done; the server's exit status."""
        loop = asyncio.get_running_loop()
        try:
            self.child = Child(self.cmd, lambda code: self._exited.set())
        except OSError as exc:
            sys.stderr.write(f"sturdyrpc: cannot start {self.cmd[0]!r}: {exc.strerror or exc}\n")
            return 127
        self.to_server = FdWriter(self.child.stdin_fd, self._server_pressure)
        self._server_out = FdReader(self.child.stdout_fd, self._server_data, self._server_eof_cb)
        # Windows has no SIGHUP, and its loops no signal handlers (NotImplementedError).
        for sig in (signal.SIGTERM, signal.SIGINT, *((signal.SIGHUP,) if sys.platform != "win32" else ())):
            with contextlib.suppress(ValueError, NotImplementedError):
                loop.add_signal_handler(sig, self._go_away, f"signal {signal.Signals(sig).name}")
        await self.to_client.start()
        await self.to_server.start()
        await self._server_out.start()
        await self._client_in.start()
        watch = loop.create_task(self._watch_parent())
        try:
            eof = loop.create_task(self._server_eof.wait())
            exited = loop.create_task(self._exited.wait())
            await asyncio.wait([eof, exited], return_when=asyncio.FIRST_COMPLETED)
            if not eof.done():
                # Exited, but a descendant may still hold its stdout: take what is left, briefly.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(eof), 1.0)
            eof.cancel()
            exited.cancel()
            await self.child.wait(0.2)  # the exit usually follows the EOF at once: name its code
            self.server_gone(self.child.returncode)
            if not await self.child.wait(self.grace):
                # stdout closed but the process lives on: it can no longer answer anyone.
                await self._stop_now()
            code = exit_status(self.child.returncode if self.child.returncode is not None else 1)
            self.to_client.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.to_client.wait_closed(), 5.0)
            self.finish(code)
            return code
        finally:
            watch.cancel()
            if self._stopping is not None:
                self._stopping.cancel()
            self._client_in.close()
            self._server_out.close()  # before its fd is closed below
            if self.child.returncode is None:
                self.child.kill()
            self.child.close_fds()

    async def _stop_now(self) -> None:
        assert self.child is not None
        self.child.terminate()
        if not await self.child.wait(self.grace):
            self.child.kill()
            await self.child.wait(5.0)

    def _client_data(self, data: bytes) -> None:
        self.from_client(data, time.monotonic())

    def _server_data(self, data: bytes) -> None:
        self.from_server(data, time.monotonic())

    def _server_eof_cb(self) -> None:
        self._server_eof.set()

    def _client_eof(self) -> None:
        self._go_away("stdin EOF")

    def _go_away(self, why: str) -> None:
        if self._client_gone:
            return
        self._client_gone = True
        self.client_gone(why)
        self._stopping = asyncio.get_running_loop().create_task(self._stop_child(settle=why == "stdin EOF"))

    async def _stop_child(self, *, settle: bool) -> None:
        assert self.child is not None and self.to_server is not None
        if settle:
            # An EOF ends the client's input, not its wait for replies: a signal stops at once.
            await self.settle()
        self.to_server.close()
        # What was written leaves first; a server that stops reading gets no more than the grace.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.to_server.wait_closed(), self.grace)
        self.child.close_stdin()
        await self.child.stop(self.grace)

    async def _watch_parent(self) -> None:
        # A parent killed while its end of our stdin lives on elsewhere gives no EOF: look.
        parent = os.getppid()
        while True:
            await asyncio.sleep(0.5)
            self.housekeeping()
            if os.getppid() != parent:
                self._go_away("the parent process died")
                return

    def _client_pressure(self, paused: bool) -> None:
        # The client is not reading: stop reading the server (the pipe holds it back).
        if self._server_out is not None:
            (self._server_out.pause if paused else self._server_out.resume)()

    def _server_pressure(self, paused: bool) -> None:
        self._server_full = paused
        self._reading_client()

    def hold_client(self, held: bool) -> None:
        """Stop (or go on) reading the client, for the subclass's own reason (requests it holds
        are at their bound): the client's writes then wait in the pipe, as a server's would."""
        self._held = held
        self._reading_client()

    def _reading_client(self) -> None:
        # Two reasons to stop reading the client: resumed only when neither holds.
        (self._client_in.pause if self._server_full or self._held else self._client_in.resume)()


def check_command(tool: str, command: list[str]) -> str | None:
    """Why ``command`` cannot be the server of ``sturdyrpc TOOL``, or None."""
    if not command:
        return f"sturdyrpc {tool}: give the server command after --, e.g. sturdyrpc {tool} -- sturdyrpc demo"
    if shutil.which(command[0]) is None:
        return f"sturdyrpc {tool}: cannot start the server: {command[0]!r} is not an executable file or a command on PATH"
    return None


def run_proxy(proxy: Proxy) -> int:
    """Run ``proxy`` to the end; the exit status for the program."""
    code = asyncio.run(proxy.run())
    sys.stderr.flush()
    # A thread still blocked reading a non-pollable stdin must not hold the exit back.
    os._exit(code)
