"""A transport that shows the inspector every message passing through it, both ways.

It wraps the client's transport (the subprocess pipes, or Streamable HTTP): what the client
sends is shown as ``c2s`` when it leaves, what the server sends as ``s2c`` when it arrives,
before the client's peer reads it. Nothing is changed, dropped or reordered.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..framing import BadHeader, FrameTooLarge
from ..peer import MessageTransport
from .session import C2S, S2C, Frame

__all__ = ["Tap"]

#: ``watch(direction, frame, monotonic time)``.
Watch = Callable[[str, Frame, float], object]


class Tap:
    """``inner`` (a :class:`~sturdyrpc.peer.MessageTransport`) with ``watch`` called for every
    frame: a wrapper for the ``wrap_transport`` seam of the MCP client's connectors."""

    def __init__(self, inner: MessageTransport, watch: Watch) -> None:
        self.inner = inner
        self.watch = watch

    async def send(self, data: bytes) -> None:
        self.watch(C2S, data, time.monotonic())
        await self.inner.send(data)

    async def receive(self) -> bytes | FrameTooLarge | BadHeader | None:
        frame = await self.inner.receive()
        if frame is not None:
            self.watch(S2C, frame, time.monotonic())
        return frame

    async def close(self) -> None:
        await self.inner.close()
