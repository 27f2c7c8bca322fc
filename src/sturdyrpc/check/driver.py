"""A server subprocess driven over raw bytes: nothing between the checker and the wire.

Two daemon threads read stdout and stderr as they come, so the server can never block
on a full pipe; stdin is written non-blocking with a deadline, so a server that stops
reading cannot block the checker. Every stdout line is decoded strictly (msgspec: exact
integers, no NaN, valid UTF-8 only); lines that are not a JSON object or array are kept
apart as *noise* for the stdout-hygiene check instead of being fed to the checks.
"""

from __future__ import annotations

import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..portable import portable

__all__ = ["Frame", "ServerProcess", "WriteTimeout", "trim"]

_decode = msgspec.json.Decoder().decode

#: The last bytes of stderr kept per process (a chatty server must not exhaust memory).
STDERR_KEEP = 64 * 1024


class WriteTimeout(Exception):
    """The server did not read its stdin in time (or closed it)."""


@dataclass
class Frame:
    """One line the server wrote on stdout."""

    raw: bytes
    at: float
    value: Any = None
    decoded: bool = False
    error: str = ""
    terminated: bool = True
    lenient: bool = False  # decoded only by the stdlib parser (e.g. it holds "\\ud800")

    @property
    def is_message(self) -> bool:
        """A JSON object or array: something a JSON-RPC client would try to read."""
        return self.decoded and type(self.value) in (dict, list)


def trim(data: bytes | str, limit: int = 300) -> str:
    """A printable, bounded rendering of wire bytes for reports."""
    if isinstance(data, bytes):
        text = data.decode("utf-8", "backslashreplace")
    else:
        text = data
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    if len(text) > limit:
        return f"{text[: limit - 40]}...({len(text)} chars)...{text[-25:]}"
    return text


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _decode_line(line: bytes, terminated: bool, at: float) -> Frame:
    body = line[:-1] if line.endswith(b"\r") else line
    try:
        return Frame(line, at, _decode(body), True, "", terminated)
    except (msgspec.DecodeError, RecursionError, ValueError) as exc:
        strict_error = str(exc)[:200]
    # JSON that only a lenient parser takes (an escaped unpaired surrogate, which RFC 8259 §8.2
    # leaves unpredictable) is still delivered, marked, so that checks can name it precisely.
    try:
        value = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return Frame(line, at, None, False, strict_error, terminated)
    return Frame(line, at, value, True, strict_error, terminated, lenient=True)


@dataclass
class _Write:
    data: bytes
    written: int = 0
    error: OSError | None = None
    done: threading.Event = field(default_factory=threading.Event)


class _StdinThread:
    """The portable path's stdin: blocking writes in a thread, one job after another; a caller
    waits for its job at most its timeout (the bytes still go when the server reads them)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.broken = False
        self._jobs: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        threading.Thread(target=self._run, daemon=True, name="check-stdin").start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            view = memoryview(job.data)
            try:
                while view:
                    n = os.write(self.fd, view[: 1 << 16])
                    view = view[n:]
                    job.written += n
            except OSError as exc:
                job.error = exc
                self.broken = True
            job.done.set()

    def write(self, data: bytes, timeout: float) -> None:
        if self.broken:
            raise WriteTimeout("the server closed its stdin")
        job = _Write(data)
        self._jobs.put(job)
        if not job.done.wait(timeout):
            raise WriteTimeout(f"the server read only {job.written} of {len(data)} bytes within {timeout:.1f}s")
        if job.error is not None:
            raise WriteTimeout(f"the server closed its stdin after {job.written} of {len(data)} bytes")

    def close(self) -> None:
        self._jobs.put(None)


class ServerProcess:
    """One run of the server command."""

    def __init__(self, argv: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None) -> None:
        full_env = dict(os.environ)
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        if env:
            full_env.update(env)
        self.argv = argv
        self.started = time.monotonic()
        # A new session (on Windows, process group) so that a kill reaches the whole group
        # (wrappers like npx, sh).
        group: dict[str, Any] = {"start_new_session": True}
        if sys.platform == "win32":
            group = {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
            cwd=cwd,
            bufsize=0,
            **group,
        )
        assert self.proc.stdin is not None
        self._stdin_fd = self.proc.stdin.fileno()
        # Writes with a deadline: select on a non-blocking pipe, or on the portable path (no
        # select on Windows pipes) a writer thread.
        self._stdin_thread = _StdinThread(self._stdin_fd) if portable() else None
        if self._stdin_thread is None:
            os.set_blocking(self._stdin_fd, False)
        self.messages: queue.Queue[Frame | None] = queue.Queue()
        self.frames: list[Frame] = []  # every line, in order (messages and noise)
        self.noise: list[Frame] = []
        self.stdout_closed = threading.Event()
        self._stderr = bytearray()
        self._stderr_lock = threading.Lock()
        self.stdin_closed = False
        self.signalled = False
        self._threads = [
            threading.Thread(target=self._read_stdout, daemon=True, name="check-stdout"),
            threading.Thread(target=self._read_stderr, daemon=True, name="check-stderr"),
        ]
        for t in self._threads:
            t.start()

    # -- reading -------------------------------------------------------------------------

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        buf = bytearray()
        try:
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                buf += chunk
                if b"\n" not in chunk:
                    continue
                *lines, rest = bytes(buf).split(b"\n")
                buf = bytearray(rest)
                now = time.monotonic()
                for line in lines:
                    self._add(_decode_line(line, True, now))
            if buf:
                self._add(_decode_line(bytes(buf), False, time.monotonic()))
        except OSError:
            pass
        finally:
            self.stdout_closed.set()
            self.messages.put(None)

    def _add(self, frame: Frame) -> None:
        self.frames.append(frame)
        if frame.is_message:
            self.messages.put(frame)
        else:
            self.noise.append(frame)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        try:
            while True:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                with self._stderr_lock:
                    self._stderr += chunk
                    if len(self._stderr) > STDERR_KEEP * 2:
                        del self._stderr[: len(self._stderr) - STDERR_KEEP]
        except OSError:
            pass

    def stderr_tail(self, limit: int = 2000) -> str:
        """The last ``limit`` characters the server wrote on stderr."""
        with self._stderr_lock:
            data = bytes(self._stderr[-limit * 2 :])
        text = data.decode("utf-8", "replace")
        return text[-limit:]

    def next_message(self, timeout: float) -> Frame | None:
        """The next JSON object/array line, or None on timeout or once stdout has closed."""
        if timeout <= 0:
            timeout = 0.0
        try:
            frame = self.messages.get(timeout=timeout) if timeout else self.messages.get_nowait()
        except queue.Empty:
            return None
        if frame is None:
            self.messages.put(None)  # keep the end marker for later readers
        return frame

    # -- writing -------------------------------------------------------------------------

    def write(self, data: bytes, timeout: float) -> None:
        """Write all of ``data`` to stdin within ``timeout`` seconds, or raise :class:`WriteTimeout`."""
        if self.stdin_closed:
            raise WriteTimeout("stdin is already closed")
        if self._stdin_thread is not None:
            self._stdin_thread.write(data, timeout)
            return
        view = memoryview(data)
        deadline = time.monotonic() + timeout
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WriteTimeout(f"the server read only {len(data) - len(view)} of {len(data)} bytes within {timeout:.1f}s")
            try:
                _, ready, _ = select.select([], [self._stdin_fd], [], min(left, 0.5))
            except (OSError, ValueError) as exc:
                raise WriteTimeout(f"stdin unusable: {exc}") from None
            if not ready:
                continue
            try:
                n = os.write(self._stdin_fd, view[: 1 << 16])
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):
                raise WriteTimeout(f"the server closed its stdin after {len(data) - len(view)} of {len(data)} bytes") from None
            view = view[n:]

    def close_stdin(self) -> None:
        """Signal EOF to the server."""
        if self.stdin_closed:
            return
        self.stdin_closed = True
        if self._stdin_thread is not None:
            self._stdin_thread.close()
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass

    # -- lifetime ------------------------------------------------------------------------

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ended_by_checker(self) -> bool:
        """Whether the checker closed stdin, signalled or killed the server (so an exit is expected)."""
        return self.stdin_closed or self.signalled

    def wait(self, timeout: float) -> int | None:
        """The exit code, or None if the process is still running after ``timeout``."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def _kill_group(self) -> None:
        if sys.platform == "win32":
            # No signals to a group there: TerminateProcess for the server itself.
            if self.proc.poll() is None:
                self.proc.kill()
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            if self.proc.poll() is None:
                self.proc.kill()

    def signal(self, sig: int) -> None:
        self.signalled = True
        try:
            self.proc.send_signal(sig)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        """Kill the process (and its group) and release the pipes. Safe to call twice."""
        self.close_stdin()
        if self.proc.poll() is None:
            self._kill_group()
            self.wait(5)
        else:
            # The server exited; children it left in its group must not outlive the check.
            self._kill_group()
        for t in self._threads:
            t.join(1)
        for f in (self.proc.stdout, self.proc.stderr):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
