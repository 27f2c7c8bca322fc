"""``sturdyrpc trace``: a transparent proxy that records and judges every message.

The bytes of each read are written to the other side first, unchanged and in order; only then are
they cut into frames, judged by the :class:`~.monitor.Monitor`, logged and shown. Nothing the
proxy does can alter or reorder the traffic. Judging runs in slices between reads, so a large read
being judged never holds back the bytes that arrive meanwhile (monotonic times are taken at the
read, so durations do not depend on when a frame is judged).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import deque
from typing import IO, Any

from ..codec import DecodeFailure, decode, encode
from ..framing import Frame, FrameTooLarge
from .monitor import C2S, S2C, Direction, Event, Monitor
from .pump import Proxy, make_framer
from .redact import REDACTED, maybe_secret, redact, redact_argv, redact_text
from .view import LiveView, print_summary

__all__ = ["TraceLog", "TraceProxy", "LOG_BUFFER"]

#: Frames judged per turn of the loop when there is a backlog.
SLICE = 1024
#: The buffer of the log file (bytes): records of many reads leave in one system call.
LOG_BUFFER = 1 << 20
#: Frames read but not judged yet above which the proxy judges them all before reading on.
BACKLOG_LIMIT = 4096
_UNDECODED: Any = object()


class TraceLog:
    """The NDJSON log: a header record, then one record per message, both ways.

    Records: ``{"dir": "c2s"|"s2c", "t": monotonic, "wall": unix time, "msg": <the message>}``;
    bytes that are not JSON: ``"raw": "<text>"`` instead of ``"msg"``; a frame the framer could not
    read: ``"event": "bad-header"|"too-large"`` with ``"detail"``.

    ``redact`` (the default): the values of secret-looking keys (:mod:`.redact`) in the messages,
    the raw text and the server's argv are written as ``"[REDACTED]"``, and the header says
    ``"redacted": true``; messages without such a key are written as they were read.
    """

    def __init__(self, file: IO[bytes], command: list[str], framing: str, *, redact: bool = True) -> None:
        self.file = file
        self.redact = redact
        self._wall0 = time.time() - time.monotonic()  # wall = monotonic + offset: one clock read
        self._breaks = framing != "line"  # frames may hold line breaks (a line frame holds no LF)
        argv = redact_argv(command) if redact else command
        file.write(encode({"sturdyrpc": "trace", "format": 1, "command": argv, "framing": framing, "redacted": redact,
                           "wall": time.time()}) + b"\n")

    def head(self, dir: Direction, now: float) -> bytes:
        """The start of the records of the frames of one read (they share a direction and a time)."""
        return b'{"dir":"%s","t":%.6f,"wall":%.6f,' % (dir.encode(), now, now + self._wall0)

    def message(self, out: list[bytes], head: bytes, frame: bytes, ev: Event) -> None:
        """Add the record of one frame to ``out`` (written by :meth:`write`); ``head`` from :meth:`head`."""
        if ev.kind == "junk":
            text = frame.decode("utf-8", "backslashreplace")
            out += (head, b'"raw":', encode(redact_text(text) if self.redact else text), b"}\n")
        elif self.redact and (clean := self._without_secrets(frame, ev.value)) is not None:
            out += (head, b'"msg":', clean, b"}\n")
        elif b"\n" in frame or b"\r" in frame:
            out += (head, b'"msg":', encode(ev.value), b"}\n")  # NDJSON: one line each
        else:
            out += (head, b'"msg":', frame, b"}\n")

    def plain(self, out: list[bytes], head: bytes, frames: list[bytes]) -> None:
        """Add the records of ``frames``, messages :meth:`Monitor.feed_plain` judged, to ``out``:
        one join for all of them."""
        if self.redact and maybe_secret(b"\n".join(frames)):
            # Some frame may hold a secret: one by one.
            for frame in frames:
                clean = self._without_secrets(frame)
                if clean is None:
                    clean = encode(decode(frame)) if b"\n" in frame or b"\r" in frame else frame
                out += (head, b'"msg":', clean, b"}\n")
            return
        body = (b'}\n' + head + b'"msg":').join(frames)
        if b"\r" in body or (self._breaks and body.count(b"\n") != len(frames) - 1):
            # A line break inside a frame (Content-Length framing): one line each, re-encoded.
            for frame in frames:
                out += (head, b'"msg":', encode(decode(frame)) if b"\n" in frame or b"\r" in frame else frame, b"}\n")
            return
        out += (head, b'"msg":', body, b"}\n")

    @staticmethod
    def _without_secrets(frame: bytes, value: Any = _UNDECODED) -> bytes | None:
        """What to write for ``frame`` (decoded: ``value``) when it holds a secret; None when it
        holds none and is written as it was read."""
        if not maybe_secret(frame):
            return None
        if value is _UNDECODED:
            try:
                value = decode(frame)
            except DecodeFailure:
                return encode(REDACTED)  # a message the monitor read but this cannot: none of it
        clean = redact(value)
        return None if clean is value else encode(clean)

    def write(self, out: list[bytes]) -> None:
        """Write the records collected in ``out`` (one call for many messages, into the file's buffer)."""
        self.file.write(b"".join(out))

    def event(self, dir: Direction, what: str, detail: str, now: float) -> None:
        self.file.write(encode({"dir": dir, "t": round(now, 6), "wall": round(now + self._wall0, 6), "event": what, "detail": detail}) + b"\n")

    def close(self) -> None:
        self.file.close()


class TraceProxy(Proxy):
    """The trace proxy: pass-through, plus monitor, log and live view."""

    def __init__(
        self,
        cmd: list[str],
        *,
        framing: str = "line",
        log: IO[bytes] | None = None,
        view: LiveView | None = None,
        grace: float = 2.0,
        mcp: bool | None = None,
        terminal: bool = False,
        redact: bool = True,
    ) -> None:
        super().__init__(cmd, framing=framing, grace=grace)
        self.monitor = Monitor(mcp=mcp)
        self.redact = redact
        self.log = TraceLog(log, cmd, framing, redact=redact) if log is not None else None
        self.view = view
        self.terminal = terminal
        self._framers = {C2S: make_framer(framing), S2C: make_framer(framing)}
        self._last_flush = 0.0
        self._backlog: deque[tuple[Direction, list[Frame], float]] = deque()
        self._backlog_frames = 0
        self._drain: asyncio.TimerHandle | None = None

    def from_client(self, data: bytes, now: float) -> None:
        assert self.to_server is not None
        # Passed on before it is judged: judging adds no latency to the traffic.
        self.to_server.write_now(data)
        self._queue(C2S, data, now)

    def from_server(self, data: bytes, now: float) -> None:
        self.to_client.write_now(data)
        self._queue(S2C, data, now)

    def _queue(self, dir: Direction, data: bytes, now: float) -> None:
        frames = self._framers[dir].feed(data)
        if not frames:
            return
        self._backlog.append((dir, frames, now))
        self._backlog_frames += len(frames)
        if self._backlog_frames > BACKLOG_LIMIT:
            self._judge(self._backlog_frames)  # reading waits: memory stays bounded
        elif self._drain is None:
            # A timer, not call_soon: the loop polls the pipes before it runs timers, so bytes
            # that arrive while a backlog is judged are passed on between two slices.
            self._drain = asyncio.get_running_loop().call_later(0, self._judge_slice)

    def _judge_slice(self) -> None:
        self._drain = None
        self._judge(SLICE)
        if self._backlog:
            self._drain = asyncio.get_running_loop().call_later(0, self._judge_slice)

    def _judge(self, n: int) -> None:
        """Judge up to ``n`` frames of the backlog, in the order they were read."""
        log, view, monitor, backlog = self.log, self.view, self.monitor, self._backlog
        # Frames with nothing to show are judged in runs, without an event each, unless the
        # live view shows every message.
        runs = view is None or not view.traffic
        records: list[bytes] = []  # log records of the frames judged, written once at the end
        now = 0.0
        while n > 0 and backlog:
            dir, frames, now = backlog[0]
            take = frames[:n] if len(frames) > n else frames
            if take is frames:
                backlog.popleft()
            else:
                del frames[:n]
            n -= len(take)
            self._backlog_frames -= len(take)
            head = log.head(dir, now) if log is not None else b""
            i, end = 0, len(take)
            while i < end:
                if runs:
                    j = monitor.feed_plain(dir, take, now, i)
                    if j > i:
                        if log is not None:
                            log.plain(records, head, take[i:j] if i or j < end else take)  # type: ignore[arg-type]
                        if j == end:
                            break
                        i = j
                frame = take[i]
                i += 1
                if type(frame) is bytes:
                    ev = monitor.feed(dir, frame, now)
                    if log is not None:
                        log.message(records, head, frame, ev)
                    if view is not None:
                        view.event(ev)
                else:
                    if records and log is not None:
                        log.write(records)  # in order with the event record below
                        records = []
                    if isinstance(frame, FrameTooLarge):
                        self._unreadable(dir, "too-large", f"a frame over {frame.limit} bytes", now)
                    elif not isinstance(frame, bytes):
                        self._unreadable(dir, "bad-header", frame.reason, now)
        if log is not None:
            if records:
                log.write(records)
            if now - self._last_flush > 1.0:
                self._last_flush = now
                log.file.flush()  # readable with tail -f, without a system call per message

    def _unreadable(self, dir: Direction, what: str, detail: str, now: float) -> None:
        ev = self.monitor.feed_unreadable(dir, detail, now)
        if self.log is not None:
            self.log.event(dir, what, detail, now)
        if self.view is not None:
            self.view.text(f"trace: {'->' if dir == C2S else '<-'} unreadable frame: {detail}", warn=True)
            self.view.event(ev)

    def client_gone(self, why: str) -> None:
        if self.view is not None:
            self.view.text(f"trace: the client went away ({why}); stopping the server")

    def housekeeping(self) -> None:
        if self.log is not None and not self._backlog:
            self.log.file.flush()  # what was judged is in the file within half a second

    def server_gone(self, code: int | None) -> None:
        self._judge(self._backlog_frames)

    def finish(self, code: int) -> None:
        if self._drain is not None:
            self._drain.cancel()
        self._judge(self._backlog_frames)
        if self.log is not None:
            self.log.close()
        print_summary(sys.stderr, self.monitor.summary(time.monotonic()), title="sturdyrpc trace summary", code=code,
                      terminal=self.terminal, redact=redact_text if self.redact else None)
