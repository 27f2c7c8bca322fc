"""The store interface: what workers of one server share (sessions, events, messages, keys).

A :class:`Store` offers four kinds of things, all keyed by plain strings:

- **records**: byte values with an optional time to live (``get``/``set``/``delete``/``touch``,
  ``get_touch`` reading and renewing the TTL in one step, ``compare_and_set`` for atomic updates);
- **streams**: append-only, bounded, expiring sequences of byte entries with ids that grow in
  order (``append``, ``append_batch`` for several in one round trip, ``read_after``, ``follow``
  for live reading, ``drop_stream``);
- **channels**: fire-and-forget pub/sub messages to every current subscriber
  (``publish``/``subscribe``);
- **counters**: ``incr`` with an optional TTL.

Every method may raise :class:`StoreUnavailable` (the backend cannot be reached or answers too
slowly); callers turn it into a clear error (HTTP 503 naming the store), never a hang.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Protocol, runtime_checkable

__all__ = ["Store", "Subscription", "StoreUnavailable", "Entry"]

#: One stream entry: (id, data). Ids are opaque ASCII strings without ``.``, growing in order.
Entry = tuple[str, bytes]


class StoreUnavailable(Exception):
    """The store cannot be used right now (down, unreachable, too slow). ``store`` names it."""

    def __init__(self, store: str, reason: str) -> None:
        super().__init__(f"store {store} unavailable: {reason}")
        self.store = store
        self.reason = reason


@runtime_checkable
class Subscription(Protocol):
    """Messages published on one channel after :meth:`Store.subscribe` returned."""

    def __aiter__(self) -> AsyncIterator[bytes]:
        """Iterate over messages as they arrive (ends when closed)."""

    async def aclose(self) -> None:
        """Stop receiving; iteration ends."""


@runtime_checkable
class Store(Protocol):
    """Shared state of a server's workers. See the module docstring for the four kinds."""

    #: A short name for messages (``memory``, ``redis://host:port/db`` without credentials).
    name: str
    #: Whether other processes see the same data (False for the in-memory store).
    shared: bool

    # records
    async def get(self, key: str) -> bytes | None:
        """The value of ``key``, or None."""

    async def get_touch(self, key: str, ttl: float) -> bytes | None:
        """The value of ``key`` (None if absent), renewing its TTL to ``ttl`` seconds in the same step."""

    async def set(self, key: str, value: bytes, ttl: float | None = None) -> None:
        """Set ``key`` (``ttl`` seconds to live; None: no expiry)."""

    async def delete(self, *keys: str) -> int:
        """Delete keys (records or streams); the number that existed."""

    async def touch(self, key: str, ttl: float) -> bool:
        """Renew the TTL of ``key``; False if it does not exist."""

    async def compare_and_set(self, key: str, expected: bytes | None, value: bytes | None, ttl: float | None = None) -> bool:
        """Atomically: if the value of ``key`` is ``expected`` (None: absent), set it to ``value``
        (None: delete it) and return True; otherwise change nothing and return False."""

    async def incr(self, key: str, ttl: float | None = None) -> int:
        """Add one to the counter ``key`` (absent: 0) and return the new value; ``ttl`` renews its expiry."""

    # streams
    async def append(self, stream: str, data: bytes, *, maxlen: int = 1000, ttl: float | None = None) -> str:
        """Append an entry (keeping at most about ``maxlen``, oldest dropped first) and return its id."""

    async def append_batch(self, items: list[tuple[str, int | None, bytes]], *, maxlen: int = 1000,
                           ttl: float | None = None, ttls: Mapping[str, float] | None = None,
                           within: float = 0.0) -> list[str]:
        """Append several entries in one round trip: (stream, sequence number or None, data).
        A sequence number gives the entry the id :meth:`entry_id` names (it must grow within
        its stream; for streams only one writer appends to); None lets the store choose.
        ``ttls``: the time to live of some of the streams, instead of ``ttl``. ``within``: seconds
        the write may wait to share a round trip with the store's next command (0: now)."""

    def entry_id(self, seq: int) -> str:
        """The id an entry appended with sequence number ``seq`` gets."""

    async def read_after(self, stream: str, after: str | None, count: int = 1000) -> list[Entry]:
        """Up to ``count`` entries after id ``after`` (None: from the start), oldest first."""

    def follow(self, stream: str, after: str | None) -> AsyncIterator[Entry]:
        """Entries after ``after`` (None: only new ones), then each new one as it is appended, until
        the consumer stops iterating."""

    async def last_id(self, stream: str) -> str | None:
        """The id of the newest entry, or None for an empty or absent stream."""

    async def drop_stream(self, stream: str) -> None:
        """Forget a stream."""

    # channels
    async def publish(self, channel: str, data: bytes) -> int:
        """Send ``data`` to the channel's current subscribers; how many got it (0 if none)."""

    async def subscribe(self, channel: str) -> Subscription:
        """Start receiving the channel's messages (those published after this returns)."""

    async def ping(self) -> None:
        """Raise :class:`StoreUnavailable` unless the store answers."""

    async def aclose(self) -> None:
        """Release connections."""
