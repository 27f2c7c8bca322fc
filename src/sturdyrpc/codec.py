"""Strict JSON in and out, on msgspec.

Why msgspec: it keeps integers of any size exact (an id must round-trip), rejects
NaN/Infinity literals, invalid UTF-8, lone surrogates, trailing garbage and a
byte-order mark, and is among the fastest JSON codecs for Python.

Three things msgspec does not do for us, handled here:
- it writes NaN/Infinity as ``null`` (silently changing a value), so :func:`encode`
  refuses non-finite floats;
- its nesting bound is the C stack (``RecursionError`` somewhere near depth 1000),
  so :func:`decode_bounded` turns that into a clean failure and enforces our own
  ``max_depth`` on top;
- it refuses valid JSON holding a number it cannot read (an integer literal longer than
  :data:`MAX_INT_CHARS`, a float beyond a double's range) and reads ``1e-400`` as ``0.0``.
  A JSON-RPC id must come back exactly, so the decoders put an :class:`UnreadableNumber`
  where a message member holds such a number (and where a fractional id would not be echoed
  as the same number); :mod:`sturdyrpc.messages` answers it with -32600 naming the bound.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation  # msgspec imports it anyway: no start-up cost
from typing import Any

import msgspec

__all__ = [
    "decode",
    "decode_bounded",
    "has_non_finite",
    "encode",
    "DecodeFailure",
    "NonFiniteFloat",
    "UnreadableNumber",
    "MAX_INT_CHARS",
    "depth_exceeds",
]

#: The longest integer literal (minus sign included) the decoder reads: msgspec's bound, the
#: same as Python's ``int()`` guard against quadratic-time conversion of huge digit strings.
MAX_INT_CHARS = 4300

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


class UnreadableNumber:
    """Stands for a message member the decoder could not read exactly (valid JSON all the same).

    ``member`` names the member (``"id"``, ``"params"``, ...; ``""`` for a whole document),
    ``message`` says why, naming the bound, and ``data`` the bound as error data (or None);
    both are safe to send to the peer. Never encodable: it must be answered, not echoed.
    """

    __slots__ = ("member", "message", "data")

    def __init__(self, member: str, message: str, data: dict[str, Any] | None = None) -> None:
        self.member = member
        self.message = message
        self.data = data

    def __repr__(self) -> str:
        return f"UnreadableNumber({self.member!r}, {self.message!r})"


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
    """Decode one JSON document strictly. Raises :class:`DecodeFailure`.

    Numbers a message member cannot hold exactly come back as :class:`UnreadableNumber`
    (see the module's docstring).
    """
    try:
        value = _raw_decode(data)
    except RecursionError:
        raise DecodeFailure(f"nesting deeper than {max_depth} levels", too_deep=True) from None
    except msgspec.ValidationError as exc:
        value = _unreadable_numbers(bytes(data), exc)
    except msgspec.MsgspecError as exc:
        # msgspec's messages name byte offsets and JSON facts only, never our internals.
        raise DecodeFailure(str(exc)) from None
    except (ValueError, TypeError):
        raise DecodeFailure("JSON is malformed") from None
    return _with_exact_ids(data, value)


def _with_exact_ids(data: bytes | bytearray | memoryview, value: Any) -> Any:
    # The one check every message pays: is its id a float (rare; the spec says SHOULD NOT)?
    t = type(value)
    if t is dict:
        if type(value.get("id")) is float:
            _exact_id(data, value)
        return value
    if t is list:
        return _exact_ids(data, value)
    return value


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
    except msgspec.ValidationError as exc:
        value = _unreadable_numbers(bytes(data), exc)
    except msgspec.MsgspecError as exc:
        raise DecodeFailure(str(exc)) from None
    except (ValueError, TypeError):
        raise DecodeFailure("JSON is malformed") from None
    if len(data) > 2 * max_depth and data.count(b"[") + data.count(b"{") > max_depth and depth_exceeds(value, max_depth):
        raise DecodeFailure(f"nesting deeper than {max_depth} levels", too_deep=True)
    if type(value) is dict and type(value.get("id")) is not float:
        return value  # _with_exact_ids' common case, without the call
    return _with_exact_ids(data, value)


# ------------------------------------------------------------ numbers read exactly, or marked

_INT_BOUND = {"limit": "integer_chars", "max": MAX_INT_CHARS}


class _IdMember(msgspec.Struct):
    """Just the ``id`` of a message, as the bytes it was sent as (a duplicate: the last one, as
    for a dict)."""

    id: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


_decode_id_member = msgspec.json.Decoder(_IdMember).decode
_decode_raw = msgspec.json.Decoder(msgspec.Raw).decode
_decode_raw_list = msgspec.json.Decoder(list[msgspec.Raw]).decode
_decode_raw_object = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


def _exact_ids(data: bytes | bytearray | memoryview, value: Any) -> Any:
    """Mark, in a message or each message of a batch, a fractional id that would not be
    echoed as the number it was sent as (``1e-400`` would come back as ``0.0``)."""
    t = type(value)
    if t is dict:
        if type(value.get("id")) is float:
            _exact_id(data, value)
    elif t is list:
        raws: list[msgspec.Raw] | None = None
        for i, item in enumerate(value):
            if type(item) is dict and type(item.get("id")) is float:
                if raws is None:
                    raws = _decode_raw_list(data)
                _exact_id(bytes(raws[i]), item)
    return value


def _exact_id(data: bytes | bytearray | memoryview, message: dict[str, Any]) -> None:
    literal = bytes(_decode_id_member(data).id).decode()
    try:
        # What goes out is repr(float); it must denote the same number as what came in.
        exact = Decimal(literal) == Decimal(repr(message["id"]))
    except (InvalidOperation, ValueError):
        exact = False
    if not exact:
        message["id"] = UnreadableNumber(
            "id", f"the id {_preview(literal)} cannot be echoed exactly (a 64-bit float reads it as {message['id']!r})"
        )


def _preview(literal: str) -> str:
    return literal if len(literal) <= 40 else literal[:20] + "..." + literal[-10:]


def _unreadable_numbers(data: bytes, exc: msgspec.ValidationError) -> Any:
    """Decode valid JSON that holds a number msgspec refuses to read (an untyped decode fails
    validation only for that), marking each message member that holds one.

    Members are located down to the members of a message (or of each message in a batch);
    a member that holds such a number is not read further.
    """
    reason = str(exc)
    if not (reason.startswith("Integer value out of range") or reason.startswith("Number out of range")):
        raise DecodeFailure(reason)
    start = data.lstrip()[:1]
    try:
        if start == b"[":
            return [_message_of(bytes(raw)) for raw in _decode_raw_list(data)]
        if start == b"{":
            return _message_of(data)
        return _member_of("", bytes(_decode_raw(data)))  # decoding as Raw checks the syntax
    except RecursionError:
        raise DecodeFailure("nesting too deep", too_deep=True) from None
    except msgspec.MsgspecError as exc2:
        raise DecodeFailure(str(exc2)) from None
    except UnicodeDecodeError:
        raise DecodeFailure("invalid UTF-8") from None


def _message_of(data: bytes) -> Any:
    try:
        return _raw_decode(data)
    except msgspec.ValidationError:
        pass
    if data.lstrip()[:1] != b"{":
        return _member_of("", data)
    return {key: _member_of(key, bytes(raw)) for key, raw in _decode_raw_object(data).items()}


def _member_of(key: str, data: bytes) -> Any:
    try:
        return _raw_decode(data)
    except msgspec.ValidationError as exc:
        is_int = str(exc).startswith("Integer")
    # Raw skipping does not check UTF-8; the member is not read further, so check it here.
    data.decode("utf-8")
    what = "the id" if key == "id" else f'member "{key}"' if key else "the message"
    if key == "id" and not is_int:
        return UnreadableNumber(key, f"the id {_preview(data.strip().decode())} is beyond the range of a 64-bit float")
    if is_int:
        return UnreadableNumber(
            key, f"{what} {'is' if key == 'id' else 'holds'} an integer of more than {MAX_INT_CHARS} characters"
            " (the most this server reads, minus sign included)", dict(_INT_BOUND)
        )
    return UnreadableNumber(key, f"{what} holds a number beyond the range of a 64-bit float")


def has_non_finite(value: Any) -> bool:
    """Whether ``value`` holds a NaN or infinite float anywhere (msgspec would write it as null)."""
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
    if b"null" in out and has_non_finite(value):
        raise NonFiniteFloat("value holds NaN or Infinity")
    return out
