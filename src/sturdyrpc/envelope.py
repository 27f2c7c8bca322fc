"""Reading a message once: one bounded decode and classification, whatever the transport.

:func:`read` takes the bytes of one frame or HTTP body and returns what they hold:

- an :class:`Envelope` -- one message of a valid shape (request, notification or response);
- a list of :class:`Envelope` and :class:`~sturdyrpc.messages.InvalidMessage` -- a batch,
  each element read on its own (an invalid element is answered on its own);
- an :class:`~sturdyrpc.messages.InvalidMessage` -- one JSON value that is none of the shapes;
- a :class:`Refused` -- bytes that cannot be read at all, with the error to answer (id null):
  too large, nested too deep, not JSON, an empty or an over-long batch.

Every limit error is built here (:func:`limit_error`), so every transport refuses a message with
the same code, message and data. Nothing else in sturdyrpc decodes an incoming message: the
dispatcher, the runner, the peer and both HTTP apps all work on what :func:`read` returns.

The usual shapes are decoded straight into an :class:`Envelope` by msgspec, in C (member types
checked there, unknown members refused); anything else takes the general path (strict decode,
exact numbers, :func:`~sturdyrpc.messages.classify`), which also says what is wrong with it.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from . import codec
from .errors import InvalidRequest, ParseError, RPCError
from .framing import BadHeader, FrameTooLarge
from .limits import Limits
from .messages import ErrorResponse, InvalidMessage, Notification, Request, Response, classify

__all__ = ["Envelope", "Refused", "Read", "read", "limit_error", "unreadable_frame_error", "UNSET", "from_message", "envelope_of", "is_request",
           "encode_envelope"]

UNSET: Any = msgspec.UNSET


class Envelope(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """One message as read: which members it has tells its kind (``method`` and ``id``: a
    request; ``method`` alone: a notification; ``result`` or ``error``: a response).

    Members absent from the message are :data:`UNSET`. Ids keep their exact type and value
    (integers of any size; a float id the general path checked can be echoed as it came).
    ``error`` of a response is the typed :class:`~sturdyrpc.errors.RPCError` it stands for.
    """

    jsonrpc: Literal["2.0"]
    method: str | msgspec.UnsetType = msgspec.UNSET
    params: dict[str, Any] | list[Any] | msgspec.UnsetType = msgspec.UNSET
    # Booleans are refused by the type; a fractional id fails the typed decode and takes the
    # general path, where codec checks that it can be echoed as the number it was sent as.
    id: int | str | None | msgspec.UnsetType = msgspec.UNSET
    result: Any = msgspec.UNSET
    error: Any = msgspec.UNSET


class Refused:
    """Bytes that cannot be read as a message: ``error`` is the answer (id null, never run)."""

    __slots__ = ("error",)

    def __init__(self, error: RPCError) -> None:
        self.error = error

    def __repr__(self) -> str:
        return f"Refused({self.error!r})"


#: What :func:`read` returns.
Read = Envelope | list[Envelope | InvalidMessage] | InvalidMessage | Refused

_decode_envelope = msgspec.json.Decoder(Envelope).decode


def limit_error(limit: Literal["max_message_bytes", "max_depth", "max_batch", "max_body_bytes"], value: int) -> InvalidRequest:
    """The -32600 error for a breached limit, the same on every transport."""
    message = {"max_message_bytes": "Message too large", "max_body_bytes": "Message too large",
               "max_depth": "Nesting too deep", "max_batch": "Batch too large"}[limit]
    return InvalidRequest(message, {"limit": limit, "max": value})


def unreadable_frame_error(frame: FrameTooLarge | BadHeader) -> RPCError:
    """The error (id null) for a frame the framer could not read: over the size limit, or a
    broken Content-Length header."""
    if isinstance(frame, FrameTooLarge):
        return limit_error("max_message_bytes", frame.limit)
    return ParseError("Parse error", {"reason": frame.reason})


def read(data: bytes, limits: Limits) -> Read:
    """Read one frame or body (see the module docstring). Never raises for bad input."""
    n = len(data)
    if n <= limits.short_message or n <= limits.max_message_bytes and data.count(b"[") + data.count(b"{") <= limits.max_depth:
        try:
            env: Envelope = _decode_envelope(data)
        except Exception:  # not of the usual shape, or malformed: the general path says which
            pass
        else:
            if env.method is not UNSET:
                return env
            return _response(env)  # a response (or nothing of a message): classify() checks its shape
    if n > limits.max_message_bytes:
        return Refused(limit_error("max_message_bytes", limits.max_message_bytes))
    try:
        obj = codec.decode_bounded(data, limits.max_depth)
    except codec.DecodeFailure as exc:
        if exc.too_deep:
            return Refused(limit_error("max_depth", limits.max_depth))
        return Refused(ParseError("Parse error"))
    if type(obj) is list:
        if not obj:
            return Refused(InvalidRequest("Invalid Request"))
        if len(obj) > limits.max_batch:
            return Refused(limit_error("max_batch", limits.max_batch))
        return [envelope_of(item) for item in obj]
    return envelope_of(obj)


def _response(env: Envelope) -> Envelope | InvalidMessage:
    """A response decoded as an :class:`Envelope`: checked by :func:`classify` (an id, not both
    members, a well-formed error object) and its error made typed."""
    obj: dict[str, Any] = {"jsonrpc": "2.0"}
    for k in ("id", "result", "error"):
        v = getattr(env, k)
        if v is not UNSET:
            obj[k] = v
    return envelope_of(obj)


def envelope_of(obj: Any) -> Envelope | InvalidMessage:
    """One decoded JSON value as an :class:`Envelope`, or what is wrong with it."""
    try:
        msg = classify(obj)
    except InvalidMessage as bad:
        return bad
    return from_message(msg)


def from_message(msg: Request | Notification | Response | ErrorResponse) -> Envelope:
    """The :class:`Envelope` of a classified message."""
    t = type(msg)
    # classify() refuses "params": null, so None there means the member was absent. A float id
    # (checked by the codec: it is echoed as it came) goes in as it is: the struct's declared id
    # types are what the typed decode accepts, not what an envelope may hold.
    if t is Request:
        params = UNSET if msg.params is None else msg.params  # type: ignore[union-attr]
        return Envelope("2.0", method=msg.method, params=params, id=msg.id)  # type: ignore[union-attr, arg-type]
    if t is Notification:
        params = UNSET if msg.params is None else msg.params  # type: ignore[union-attr]
        return Envelope("2.0", method=msg.method, params=params)  # type: ignore[union-attr]
    if t is Response:
        return Envelope("2.0", id=msg.id, result=msg.result)  # type: ignore[union-attr, arg-type]
    return Envelope("2.0", id=msg.id, error=msg.error)  # type: ignore[union-attr, arg-type]


def encode_envelope(env: Envelope) -> bytes:
    """The JSON bytes of ``env`` (its members in order; a typed error as its error object)."""
    if env.error is not UNSET and isinstance(env.error, RPCError):
        env = msgspec.structs.replace(env, error=env.error.to_dict())
    return codec.encode(env)


def is_request(env: Envelope) -> bool:
    """A request (``method`` and ``id``): a message that expects an answer."""
    return env.method is not UNSET and env.id is not UNSET
