"""Pagination of ``tools/list``, ``resources/list``, ``resources/templates/list`` and ``prompts/list``.

Every record (tool, resource, template, prompt) gets a sequence number when it is registered
(:attr:`~.registry.HandlerFunction.seq`, increasing). A page lists records in that order; its
``nextCursor`` names the list and the sequence number of the page's last record, so the next
page is "the records registered after that one". That keeps a walk through the pages stable
while the list changes: a record removed meanwhile is simply absent, one added meanwhile shows
up on a later page (its number is higher), none is listed twice and none that stayed is
skipped, and no state is kept between requests (a 2026-07-28 stateless server can serve the
next page from any process that registered the same records in the same order).

The cursor is opaque to clients (base64url text) but not secret: forging one only picks a
position. A cursor that is not one this module wrote, or that names another list, is -32602.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, TypeVar

from ..errors import InvalidParams

__all__ = ["Pages"]

#: The cursor format's version, so that a later format can tell old cursors apart.
_PREFIX = "p1"
#: Longer cursors are not ours (a cursor we write is at most about 40 characters).
_MAX_CURSOR = 200


class _Numbered(Protocol):
    seq: int


R = TypeVar("R", bound=_Numbered)


def _bad_cursor() -> InvalidParams:
    return InvalidParams("Invalid params: invalid cursor", {"param": "cursor"})


class Pages:
    """Cuts a list into pages of ``page_size`` records (None: one page with everything)."""

    __slots__ = ("page_size",)

    def __init__(self, page_size: int | None) -> None:
        if page_size is not None and (type(page_size) is not int or page_size < 1):
            raise ValueError("page_size must be a positive integer or None")
        self.page_size = page_size

    @staticmethod
    def cursor(kind: str, seq: int) -> str:
        """The cursor of the page after the record numbered ``seq`` in the list ``kind``."""
        return base64.urlsafe_b64encode(f"{_PREFIX}:{kind}:{seq}".encode()).decode().rstrip("=")

    @staticmethod
    def read(kind: str, cursor: Any) -> int:
        """The sequence number a cursor of the list ``kind`` names; ``InvalidParams`` (-32602) for
        anything else."""
        if type(cursor) is not str or not cursor or len(cursor) > _MAX_CURSOR:
            raise _bad_cursor()
        try:
            text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        except (binascii.Error, ValueError):
            raise _bad_cursor() from None
        prefix, _, rest = text.partition(":")
        name, _, number = rest.rpartition(":")
        if prefix != _PREFIX or name != kind or not number.isdigit() or number != str(int(number)) or Pages.cursor(kind, int(number)) != cursor:
            raise _bad_cursor()
        return int(number)

    def page(self, kind: str, records: Iterable[R], params: dict[str, Any]) -> tuple[Sequence[R], str | None]:
        """The records of the page ``params["cursor"]`` asks for (the first without one) and the
        ``nextCursor`` (None on the last page)."""
        cursor = params.get("cursor")
        size = self.page_size
        if cursor is None and size is None:
            return list(records), None  # no pages: everything, in registration order, as it is
        after = self.read(kind, cursor) if cursor is not None else 0
        rest = sorted((r for r in records if r.seq > after), key=lambda r: r.seq)
        if size is None or len(rest) <= size:
            return rest, None
        page = rest[:size]
        return page, self.cursor(kind, page[-1].seq)
