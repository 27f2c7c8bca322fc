"""``sturdyrpc guard``: the I/O around :class:`~.guard.GuardCore` (frames in, frames out, a timer
for the deadlines). Only frames the core lets through reach the client; every decision is logged
on stderr."""

from __future__ import annotations

import asyncio
import sys
import time

from ..framing import FrameTooLarge
from .guard import Actions, GuardCore
from .monitor import C2S, S2C
from .pump import Proxy, frame_payload, make_framer
from .view import LiveView, print_summary

__all__ = ["GuardProxy"]


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
        fr = self.framing
        # Written at once, not at the end of the loop's turn: every read is one decision anyway.
        if act.to_server and self.to_server is not None:
            self.to_server.write(b"".join(frame_payload(fr, p) for p in act.to_server))
            self.to_server.flush_now()
        if act.to_client:
            self.to_client.write(b"".join(frame_payload(fr, p) for p in act.to_client))
            self.to_client.flush_now()
        for line in act.log:
            self.view.text(line, warn=True)
        self._arm()

    def from_client(self, data: bytes, now: float) -> None:
        act = Actions()
        for frame in self._framers[C2S].feed(data):
            if isinstance(frame, bytes):
                act.extend(self.core.from_client(frame, now))
            else:
                what = f"over {frame.limit} bytes" if isinstance(frame, FrameTooLarge) else frame.reason
                act.log.append(f"guard: dropped an unreadable frame from the client ({what})")
        self._apply(act)

    def from_server(self, data: bytes, now: float) -> None:
        act = Actions()
        for frame in self._framers[S2C].feed(data):
            if isinstance(frame, bytes):
                act.extend(self.core.from_server(frame, now))
            else:
                what = f"over {frame.limit} bytes" if isinstance(frame, FrameTooLarge) else frame.reason
                act.log.append(f"guard: dropped an unreadable frame from the server ({what})")
        self._apply(act)

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
