"""What the parts of a peer share: the transports they run on, the hooks users give them, the
peer's settings as the parts read them, and how ids are compared."""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from ..errors import RPCError
from ..framing import BadHeader, FrameTooLarge
from ..profile import Profile

ProgressCallback = Callable[[float, float | None, str | None], Awaitable[None] | None]
#: ``await hook(method, params, id, send)`` around each outgoing request (``id``: its id) and
#: notification (``id``: None): must return ``await send(params)``, with params as they are or
#: changed (a copy: e.g. trace context added to ``_meta``). See :attr:`Peer.send_hook`.
SendHook = Callable[[str, Any, "str | int | None", Callable[[Any], Awaitable[Any]]], Awaitable[Any]]
#: ``hook(method, params, sent) -> params``: around a notification the peer itself handles or
#: sends on the spot (cancellation and progress: never seen by the dispatcher or
#: :meth:`Peer.notify`); ``sent`` says which way. Returns the params to send (or as received).
#: See :attr:`Peer.notice_hook`.
NoticeHook = Callable[[str, Any, bool], Any]


class MessageTransport(Protocol):
    """Whole messages in and out. Framing (lines, Content-Length) lives below this.

    A transport may also be a :class:`FrameSource` (it pushes what it reads: the stdio
    transport) and a :class:`NowaitSender` (it takes a message without waiting); the peer then
    uses those instead of :meth:`receive` and the writer task.
    """

    async def send(self, data: bytes) -> None:
        """Send one whole message. Raises ``ConnectionError``/``OSError`` once the connection is gone."""

    async def receive(self) -> bytes | FrameTooLarge | BadHeader | None:
        """The next message (or framing event); ``None`` when the other side closed."""

    async def close(self) -> None:
        """Close the connection (idempotent)."""


@runtime_checkable
class FrameSource(Protocol):
    """A transport that hands over each frame as soon as it is read, instead of being read."""

    def deliver(self, on_frame: Callable[[bytes | FrameTooLarge | BadHeader], None], context: contextvars.Context | None = None) -> None:
        """Call ``on_frame`` with every frame, in order, from now on, in ``context`` when given.
        What ``on_frame`` raises (a bug) is logged, and the next frame delivered."""

    def hold(self, on: bool) -> None:
        """Stop (True) or resume (False) delivering frames and reading."""

    async def wait_input_done(self) -> None:
        """Return once the input has ended and every frame read before the end was delivered."""

    def when_input_done(self, callback: Callable[[], object], context: contextvars.Context | None = None) -> None:
        """Call ``callback()`` from the loop (in ``context`` when given) once the input has
        ended and every frame read before the end was delivered: what :meth:`wait_input_done`
        says, without a task waiting for it (a peer waits so for the end of each connection)."""


@runtime_checkable
class NowaitSender(Protocol):
    """A transport that can take a message at once."""

    def send_nowait(self, data: bytes) -> bool:
        """Take ``data`` now (True), or decline (False, nothing sent) when :meth:`send` would have
        to wait (flow control) or would fail: then it goes through ``send``."""


class Settings(Protocol):
    """What the parts read of their peer at the moment they need it: the settings its user may
    change at any time (the :class:`~sturdyrpc.peer.Peer` attributes of the same names)."""

    name: str
    profile: Profile
    notice_hook: NoticeHook | None
    on_enqueue: Callable[[bytes], None] | None
    on_error_without_id: Callable[[RPCError], None] | None
    out_high_messages: int
    out_high_bytes: int


def id_key(id_: Any) -> tuple[type, Any]:
    """The key of an id in the tables of calls: 1, 1.0 and True are equal as dict keys, ids are
    kept apart by type."""
    return (type(id_), id_)
