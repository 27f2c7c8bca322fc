"""``sturdyrpc guard``: the I/O around :class:`~.guard.GuardCore` (frames in, frames out, a timer
for the deadlines). Only frames the core lets through reach the client; every decision is logged
on stderr."""

from __future__ import annotations

import asyncio
import sys
import time

from ..framing import BadHeader, Frame, FrameTooLarge
from .guard import Actions, GuardCore
from .monitor import C2S, S2C, Direction
from .pump import Proxy, frame_payload, make_framer
from .view import LiveView, print_summary

__all__ = ["GuardProxy"]

#: Frames decided before what they produced is written out.
SLICE = 1024


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
    ) -> None:
        super().__init__(cmd, framing=framing, grace=grace)
        self.core = core
        self.view = view
        self.terminal = terminal
        self._framers = {C2S: make_framer(framing), S2C: make_framer(framing)}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None

    def _apply(self, act: Actions) -> None:
        # Written at once, not at the end of the loop's turn: every read is one decision anyway.
        if act.to_server and self.to_server is not None:
            self.to_server.write_now(self._framed(act.to_server))
        if act.to_client:
            self.to_client.write_now(self._framed(act.to_client))
        for line in act.log:
            self.view.text(line, warn=True)
        self._arm()

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
        core = self.core
        decide = core.from_client if dir == C2S else core.from_server
        frames = self._framers[dir].feed(data)
        written = dir == C2S and self._pass_on(frames)
        for at in range(0, len(frames), SLICE):
            # Out in slices: the other side starts on the first messages of a large read while
            # guard decides about the rest.
            part = frames[at : at + SLICE] if len(frames) > SLICE else frames
            act = Actions()
            i, end = 0, len(part)
            while i < end:
                i = core.pass_plain(dir, part, i, now, act)  # the everyday frames, in runs
                if i == end:
                    break
                frame = part[i]
                i += 1
                if type(frame) is bytes:
                    decide(frame, now, act)
                else:
                    what = f"over {frame.limit} bytes" if isinstance(frame, FrameTooLarge) else frame.reason if isinstance(frame, BadHeader) else "?"
                    for v in self.core.monitor.feed_unreadable(dir, what, now).violations:
                        act.log.append(v.line())
                    act.log.append(f"guard: dropped an unreadable frame from the {'client' if dir == C2S else 'server'} ({what})")
            if written:
                act.to_server.clear()  # these very frames, already written by _pass_on
            self._apply(act)

    def _pass_on(self, frames: list[Frame]) -> bool:
        """Write the client's ``frames`` to the server before deciding about them when the core
        passes them all on as they are (:meth:`GuardCore.passes_on`): the server starts on them
        while guard keeps its books. True if written."""
        if not frames or self.to_server is None:
            return False
        try:
            payload = self._framed(list(frames))  # type: ignore[arg-type]  # TypeError: an unreadable frame (dropped)
        except TypeError:
            return False
        # Each request is an object, so it holds a "{": the count bounds the requests.
        if not self.core.passes_on(payload.count(b"{")):
            return False
        self.to_server.write_now(payload)
        return True

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

    def finish(self, code: int) -> None:
        print_summary(sys.stderr, self.core.monitor.summary(time.monotonic()), title="sturdyrpc guard summary", code=code, terminal=self.terminal)
