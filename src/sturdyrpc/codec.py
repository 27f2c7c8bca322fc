"""Strict JSON in and out, on msgspec.

Why msgspec: it keeps integers of any size exact (an id must round-trip), rejects
NaN/Infinity literals, invalid UTF-8, lone surrogates, trailing garbage and a
byte-order mark, and is among the fastest JSON codecs for Python.

Two things msgspec does not do for us, handled here:
- it writes NaN/Infinity as ``null`` (silently changing a value), so :func:`encode`
  refuses non-finite floats;
- its nesting bound is the C stack (``RecursionError`` somewhere near depth 1000),
  so :func:`decode_bounded` turns that into a clean failure and enforces our own
  ``max_depth`` on top.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

__all__ = ["decode", "encode", "DecodeFailure", "NonFiniteFloat", "depth_exceeds"]

_decoder = msgspec.json.Decoder()
_raw_decode = _decoder.decode
_raw_encode = msgspec.json.encode


class DecodeFailure(Exception):
    """The bytes are not acceptable JSON. ``reason`` is safe to show to the peer."""

    def __init__(self, reason: str, *, too_deep: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.too_deep = too_deep


class NonFiniteFloat(ValueError):
    """A value to encode holds NaN or an infinity, which JSON cannot carry."""


def depth_exceeds(value: Any, max_depth: int) -> bool:
    """True when the decoded ``value`` nests arrays/objects deeper than ``max_depth``."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        t = type(v)
        if t is dict:
            if d > max_depth:
                return True
            stack.extend((x, d + 1) for x in v.values() if type(x) is dict or type(x) is list)
        elif t is list:
            if d > max_depth:
                return True
            stack.extend((x, d + 1) for x in v if type(x) is dict or type(x) is list)
    return False


def decode(data: bytes | bytearray | memoryview, max_depth: int = 256) -> Any:
    """Decode one JSON document strictly. Raises :class:`DecodeFailure`."""
    try:
        return _raw_decode(data)
    except RecursionError:
        raise DecodeFailure(f"nesting deeper than {max_depth} levels", too_deep=True) from None
    except msgspec.MsgspecError as exc:
        # msgspec's messages name byte offsets and JSON facts only, never our internals.
        raise DecodeFailure(str(exc)) from None
    except (ValueError, TypeError):
        raise DecodeFailure("JSON is malformed") from None


def decode_bounded(data: bytes, max_depth: int) -> Any:
    """Like :func:`decode`, and refuses nesting deeper than ``max_depth``.

    Valid JSON of ``n`` bytes nests at most ``n // 2`` deep, so short messages need no
    check at all; for longer ones counting bracket bytes runs in C and bounds the depth
    from above, so the walk over the decoded value only happens for messages that hold
    many brackets.
    """
    try:
        value = _raw_decode(data)  # not via decode(): one call less on the hot path
    except RecursionError:
        raise DecodeFailure(f"nesting deeper than {max_depth} levels", too_deep=True) from None
    except msgspec.MsgspecError as exc:
        raise DecodeFailure(str(exc)) from None
    except (ValueError, TypeError):
        raise DecodeFailure("JSON is malformed") from None
    if len(data) > 2 * max_depth and data.count(b"[") + data.count(b"{") > max_depth and depth_exceeds(value, max_depth):
        raise DecodeFailure(f"nesting deeper than {max_depth} levels", too_deep=True)
    return value


def _has_non_finite(value: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is float:
            if not math.isfinite(v):
                return True
        elif t is dict:
            stack.extend(v.values())
        elif t is list or t is tuple:
            stack.extend(v)
        elif isinstance(v, float):
            if not math.isfinite(v):
                return True
    return False


def encode(value: Any) -> bytes:
    """Encode compactly. Raises :class:`NonFiniteFloat` rather than write an invalid literal,
    and ``TypeError`` for values JSON cannot represent."""
    out = _raw_encode(value)
    # msgspec turns NaN/inf into null; only an output holding null can hide one.
    if b"null" in out and _has_non_finite(value):
        raise NonFiniteFloat("value holds NaN or Infinity")
    return out
