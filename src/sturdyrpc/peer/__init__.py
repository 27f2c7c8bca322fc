"""A JSON-RPC peer: both ends send requests and notifications over one connection.

:class:`Peer` sits on a :class:`MessageTransport` (whole messages in and out; framing lives
below it). Incoming requests and notifications run through a :class:`~sturdyrpc.runner.Runner`
on the peer's dispatcher; outgoing calls are matched to their replies by exact id.

Guarantees:

- every :meth:`Peer.request` settles exactly once: a result, the remote's typed
  :class:`~sturdyrpc.errors.RPCError`, :class:`RequestTimeout`, ``CancelledError`` (the caller
  cancelled) or :class:`ConnectionClosed`. Nothing waits forever once the transport ends;
- outgoing ids are unique for the life of the connection, never reused; replies match by
  type and value (``"7"`` is not ``7``, ``1`` is not ``True``);
- replies that match nothing (unknown, duplicate, late, malformed) are counted in
  :attr:`Peer.stats` and logged; they never resolve another call;
- a cancelled incoming request is never answered; progress is never sent after the reply;
- the reader never awaits a handler, so a handler may call back to the other side.

The package is split by direction: :mod:`.incoming` (what the other side sends, into the
runner), :mod:`.outgoing` (the calls this side makes), :mod:`.writer` (the outgoing queue),
composed by :mod:`.connection` (the peer's lifecycle and its handlers' context); the transport
protocols and hook types are in :mod:`.protocols`.
"""

from .connection import Peer, PeerContext
from .outgoing import ConnectionClosed, InvalidReply, PendingCall, RequestTimeout
from .protocols import FrameSource as FrameSource  # public, though not in __all__ (as ever)
from .protocols import MessageTransport, ProgressCallback, SendHook
from .protocols import NoticeHook as NoticeHook
from .protocols import NowaitSender as NowaitSender

__all__ = [
    "Peer",
    "PeerContext",
    "PendingCall",
    "MessageTransport",
    "RequestTimeout",
    "ConnectionClosed",
    "InvalidReply",
    "ProgressCallback",
    "SendHook",
]
