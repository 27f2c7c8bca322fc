"""``sturdyrpc guard``: the I/O around :class:`~.guard.GuardCore` (frames in, frames out, a timer
for the deadlines). Only frames the core lets through reach the client; every decision is logged
on stderr."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time

from .guard import Actions, GuardCore
from .monitor import C2S, S2C, Direction
from .pump import Proxy, frame_payload, make_framer
from .tracelog import TraceLog
from .view import LiveView, print_summary, report_contained

__all__ = ["GuardProxy"]

#: Frames decided before what they produced is written out. Small enough that the server starts
#: on the first requests of a read (and the client on the first replies) while guard decides
#: about the rest: with 64 requests in flight (bench_stdio's load, 15 alternating rounds),
#: slices of 32 gave 0.47x the direct throughput where slices of 1,024 gave 0.42x; one more
#: write per 32 frames costs nothing that shows.
SLICE = 32
#: Client requests guard keeps unanswered (in flight or held back) before it stops reading the client.
MAX_OPEN = 4096
#: Seconds guard waits at stdin EOF for the replies in flight when no deadline is set.
SETTLE_WAIT = 60.0


class GuardProxy(Proxy):
    """The guard proxy."""

    def __init__(
        self,
        cmd: list[str],
        *,
        core: GuardCore,
        framing: str = "line",
        view: LiveView,
        grace: float = 2.0,
        terminal: bool = False,
        report: str | None = None,
        log: TraceLog | None = None,
    ) -> None:
        super().__init__(cmd, framing=framing, grace=grace)
        self.report = report
        #: The traffic as guard read it from each side (``trace --log``'s format), and at the end
        #: what guard contained.
        self.log = log
        self.core = core
        self.view = view
        self.terminal = terminal
        self._framers = {C2S: make_framer(framing), S2C: make_framer(framing)}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._idle = asyncio.Event()
        self._holding = False

    def _apply(self, act: Actions) -> None:
        # Written at once, not at the end of the loop's turn: every read is one decision anyway.
        if act.to_server and self.to_server is not None:
            self.to_server.write_now(self._framed(act.to_server))
        if act.to_client:
            self.to_client.write_now(self._framed(act.to_client))
        for line in act.log:
            self.view.text(line, warn=True)
        unanswered = self.core.open
        if unanswered == 0:
            self._idle.set()
        else:
            self._idle.clear()
        # Bounded memory whatever the client sends: at MAX_OPEN requests unanswered, guard stops
        # reading the client until replies free room (a server's backpressure, not a refusal).
        if (unanswered >= MAX_OPEN) != self._holding:
            self._holding = not self._holding
            self.hold_client(self._holding)
        self._arm()

    async def settle(self) -> None:
        # Every request forwarded is answered before the server sees EOF (a server may drop
        # what is in flight at EOF); bounded by the deadline, or SETTLE_WAIT without one.
        if self.core.open:
            self.view.text(f"guard: stdin EOF; waiting for {self.core.open} request(s) in flight before closing the server's stdin")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), self.core.deadline or SETTLE_WAIT)

    def _framed(self, payloads: list[bytes]) -> bytes:
        if self.framing == "line":
            payloads.append(b"")
            return b"\n".join(payloads)
        return b"".join(frame_payload(self.framing, p) for p in payloads)

    def from_client(self, data: bytes, now: float) -> None:
        self._frames(C2S, data, now)

    def from_server(self, data: bytes, now: float) -> None:
        self._frames(S2C, data, now)

    def _frames(self, dir: Direction, data: bytes, now: float) -> None:
        decide = self.core.from_client_frames if dir == C2S else self.core.from_server_frames
        frames = self._framers[dir].feed(data)
        if self.log is not None:
            self.log.frames(dir, frames, now)
        for at in range(0, len(frames), SLICE):
            # Out in slices: the other side starts on the first messages of a large read while
            # guard decides about the rest.
            self._apply(decide(frames[at : at + SLICE] if len(frames) > SLICE else frames, now))

    def _arm(self) -> None:
        at = self.core.next_deadline()
        if at is None or (self._timer_at is not None and self._timer_at <= at):
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        # The loop's clock is time.monotonic, the clock the core is fed with.
        self._timer = loop.call_at(at, self._fire)
        self._timer_at = at

    def _fire(self) -> None:
        self._timer = self._timer_at = None
        self._apply(self.core.tick(time.monotonic()))

    def server_gone(self, code: int | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_at = None
        self._apply(self.core.server_gone(code))

    def client_gone(self, why: str) -> None:
        self.view.text(f"guard: the client went away ({why}); the server gets EOF, then SIGTERM and SIGKILL after {self.grace:g} s each")

    def housekeeping(self) -> None:
        if self.log is not None:
            self.log.file.flush()  # readable with tail -f within half a second

    def finish(self, code: int) -> None:
        print_summary(sys.stderr, self.core.monitor.summary(time.monotonic()), title="sturdyrpc guard summary", code=code, terminal=self.terminal)
        report_contained(sys.stderr, self.core.contained, self.report, exit_code=code)
        if self.log is not None:
            self.log.note("contained", time.monotonic(), exit_code=code, contained=dict(sorted(self.core.contained.items())))
            self.log.close()
