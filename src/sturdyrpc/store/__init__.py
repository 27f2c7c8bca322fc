"""Shared state for servers with several workers or machines: :func:`open_store` by URL.

``open_store("memory")`` (the default: one process, no I/O) or
``open_store("redis://host:port/db")`` (needs ``pip install 'sturdyrpc[redis]'``). Both satisfy
:class:`Store` (records with TTL, bounded streams with live follow, pub/sub channels, atomic
compare-and-set); see :mod:`.base`.
"""

from __future__ import annotations

from typing import Any

from .base import Entry, Store, StoreUnavailable, Subscription
from .memory import MemoryStore

__all__ = ["Store", "Subscription", "StoreUnavailable", "Entry", "MemoryStore", "open_store", "is_memory_url"]


def is_memory_url(url: str | None) -> bool:
    """Whether ``url`` names the in-process store (``None``, ``""``, ``memory``, ``memory://``)."""
    return url is None or url.strip().lower() in ("", "memory", "memory://", "memory:")


def open_store(url: str | None = "memory", **options: Any) -> Store:
    """The store named by ``url``: ``memory`` or ``redis://[user:password@]host:port/db``
    (``rediss://`` for TLS, ``unix:///path/to/socket?db=0``). ``options`` go to the
    implementation (Redis: ``prefix``, ``op_timeout``). Opening does not connect: the first call does."""
    if is_memory_url(url):
        return MemoryStore()
    assert url is not None
    scheme = url.split(":", 1)[0].lower()
    if scheme in ("redis", "rediss", "unix"):
        from .redis import RedisStore

        return RedisStore(url, **options)
    raise ValueError(f"unknown store URL {url!r}: expected 'memory' or 'redis://host:port/db'")
