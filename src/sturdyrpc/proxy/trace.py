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
from typing import IO

from ..framing import Frame, FrameTooLarge
from .monitor import C2S, S2C, Direction, Monitor
from .pump import Proxy, make_framer
from .redact import redact_text
from .tracelog import LOG_BUFFER, TraceLog
from .view import LiveView, print_summary

__all__ = ["TraceLog", "TraceProxy", "LOG_BUFFER"]

#: Frames judged per turn of the loop when there is a backlog.
SLICE = 1024
#: Frames read but not judged yet above which the proxy judges them all before reading on.
BACKLOG_LIMIT = 4096


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
