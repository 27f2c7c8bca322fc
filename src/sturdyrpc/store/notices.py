"""Warnings about a store that fails, rate-limited: an outage must not flood the log.

While a store is down every request that needs it fails the same way; one line per kind of
failure every :attr:`NoticeLimiter.interval` seconds says so, and the next line of that kind
counts the ones left out in between. :func:`store_warning` is the one way store failures are
logged (:data:`STORE_NOTICES`, whose ``interval`` may be changed).
"""

from __future__ import annotations

import logging
import time
from typing import Any

__all__ = ["NoticeLimiter", "STORE_NOTICES", "store_warning", "INTERVAL"]

#: Seconds between two warnings of one kind, by default.
INTERVAL = 10.0


class NoticeLimiter:
    """At most one log line per kind every ``interval`` seconds; the next one after a quiet
    spell adds how many were suppressed. ``kind`` is a short constant naming the failure."""

    def __init__(self, interval: float = INTERVAL) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def warning(self, logger: logging.Logger, kind: str, msg: str, *args: Any) -> bool:
        """Log ``msg % args`` at WARNING unless a line of ``kind`` went out within ``interval``
        seconds; returns whether it was logged."""
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return False
        self._last[kind] = now
        n = self._suppressed.pop(kind, 0)
        if n:
            logger.warning(msg + " (%d more like this suppressed in the last %.0f s)", *args, n, now - last if last else 0)
        else:
            logger.warning(msg, *args)
        return True


#: The limiter of every warning about a failing store.
STORE_NOTICES = NoticeLimiter()


def store_warning(logger: logging.Logger, kind: str, msg: str, *args: Any) -> bool:
    """Log a store failure through :data:`STORE_NOTICES` (see :class:`NoticeLimiter`)."""
    return STORE_NOTICES.warning(logger, kind, msg, *args)
