"""The four JSON-RPC 2.0 message shapes and how to tell them apart.

A message is classified by which keys it holds, never by guessing:

========================  =====================================
keys                      shape
========================  =====================================
``method`` + ``id``       :class:`Request`
``method``, no ``id``     :class:`Notification`
``result`` + ``id``       :class:`Response`
``error`` + ``id``        :class:`ErrorResponse`
========================  =====================================

The types are frozen msgspec structs: immutable, slotted and cheap to build.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .codec import UnreadableNumber
from .errors import InvalidRequest, RPCError, error_from_dict

__all__ = [
    "Id",
    "Params",
    "Request",
    "Notification",
    "Response",
    "ErrorResponse",
    "Message",
    "InvalidMessage",
    "classify",
    "is_valid_id",
    "to_wire",
]

#: A request id as the wire carries it. Floats are tolerated (the spec says SHOULD NOT).
Id = str | int | float | None
Params = list[Any] | dict[str, Any] | None


class Request(msgspec.Struct, frozen=True, gc=False):
    """A call that expects an answer."""

    method: str
    params: Params
    id: Id


class Notification(msgspec.Struct, frozen=True, gc=False):
    """A call that must never be answered."""

    method: str
    params: Params


class Response(msgspec.Struct, frozen=True, gc=False):
    """A successful answer."""

    id: Id
    result: Any


class ErrorResponse(msgspec.Struct, frozen=True, gc=False):
    """An error answer; ``error`` is the typed exception it stands for."""

    id: Id
    error: RPCError


Message = Request | Notification | Response | ErrorResponse


class InvalidMessage(Exception):
    """A JSON value that is none of the four shapes.

    ``error`` is what to answer with, ``id`` the id to answer to (``None`` when it could not
    be read), and ``is_response`` says that it looked like a response, which must never be
    answered (a reply to a reply can start an endless loop on a two-way link).
    """

    def __init__(self, error: RPCError, id: Id = None, *, is_response: bool = False, reason: str = "") -> None:
        super().__init__(error.message)
        self.error = error
        self.id = id
        self.is_response = is_response
        self.reason = reason or error.message


def is_valid_id(value: Any) -> bool:
    """String, integer (not bool), null, or a float (tolerated)."""
    t = type(value)
    return t is str or t is int or value is None or t is float


def _readable_id(obj: dict[str, Any]) -> Id:
    value = obj.get("id")
    return value if is_valid_id(value) else None


def _invalid(reason: str, obj: dict[str, Any] | None = None) -> InvalidMessage:
    # The reason stays on the exception (for logs and the peer's counters); the wire error is
    # the spec's bare "Invalid Request", as in the specification's examples.
    bad = InvalidMessage(InvalidRequest("Invalid Request"), _readable_id(obj) if obj else None)
    bad.reason = reason
    return bad


def _unreadable(number: UnreadableNumber, obj: dict[str, Any] | None, *, is_response: bool = False) -> InvalidMessage:
    # A number the decoder could not read exactly: say which bound, in the wire message too,
    # since the sender's fix (a shorter or a string id) is not obvious from "Invalid Request".
    id_ = None if obj is None or number.member == "id" else _readable_id(obj)
    message = f"Invalid Request: {number.message}"
    error = InvalidRequest(message) if number.data is None else InvalidRequest(message, number.data)
    return InvalidMessage(error, id_, is_response=is_response, reason=number.message)


def classify(obj: Any) -> Message:
    """Turn one decoded JSON value into a message. Raises :class:`InvalidMessage`.

    A member the codec marked as an :class:`~sturdyrpc.codec.UnreadableNumber` makes the
    message invalid (-32600 naming the bound; id null when the id itself is the number).
    """
    if type(obj) is not dict:
        if type(obj) is UnreadableNumber:
            raise _unreadable(obj, None)
        raise _invalid("a message must be a JSON object")
    if obj.get("jsonrpc") != "2.0" or type(obj.get("jsonrpc")) is not str:
        bad = InvalidMessage(
            InvalidRequest("Invalid Request"),
            _readable_id(obj),
            is_response="method" not in obj and ("result" in obj or "error" in obj),
        )
        bad.reason = 'member "jsonrpc" must be exactly "2.0"'
        raise bad
    if "method" in obj:
        method = obj["method"]
        if type(method) is not str:
            if type(method) is UnreadableNumber:
                raise _unreadable(method, obj)
            raise _invalid('member "method" must be a string', obj)
        params = obj.get("params")
        if "params" in obj and type(params) is not list and type(params) is not dict:
            if type(params) is UnreadableNumber:
                raise _unreadable(params, obj)
            raise _invalid('member "params" must be an array or an object', obj)
        if "id" not in obj:
            return Notification(method, params)
        id_ = obj["id"]
        if not is_valid_id(id_):
            if type(id_) is UnreadableNumber:
                raise _unreadable(id_, obj)
            raise _invalid('member "id" must be a string, a number or null')
        return Request(method, params, id_)
    if "result" in obj or "error" in obj:
        id_ = obj.get("id")
        if "id" not in obj and "error" in obj and "result" not in obj:
            # An error answering what could not be read, its id left out (MCP from 2025-11-25
            # omits an id it could not read): the same as JSON-RPC's id null.
            err = obj["error"]
            if type(err) is dict and type(err.get("code")) is int and type(err.get("message")) is str:
                return ErrorResponse(None, error_from_dict(err))
        if "id" not in obj or not is_valid_id(id_):
            if type(id_) is UnreadableNumber:
                raise _unreadable(id_, obj, is_response=True)
            raise InvalidMessage(InvalidRequest("Invalid Request"), None, is_response=True, reason="response without a valid id")
        if "result" in obj and "error" in obj:
            raise InvalidMessage(InvalidRequest("Invalid Request"), id_, is_response=True, reason="response holds both result and error")
        if "result" in obj:
            result = obj["result"]
            if type(result) is UnreadableNumber:
                raise _unreadable(result, obj, is_response=True)
            return Response(id_, result)
        err = obj["error"]
        if (
            type(err) is not dict
            or type(err.get("code")) is not int
            or type(err.get("message")) is not str
        ):
            raise InvalidMessage(InvalidRequest("Invalid Request"), id_, is_response=True, reason="malformed error object")
        return ErrorResponse(id_, error_from_dict(err))
    raise _invalid('a message needs "method" (request) or "result"/"error" (response)', obj)


def to_wire(msg: Message) -> dict[str, Any]:
    """The JSON object for ``msg``, members in the spec's order."""
    if type(msg) is Request:
        d: dict[str, Any] = {"jsonrpc": "2.0", "method": msg.method}
        if msg.params is not None:
            d["params"] = msg.params
        d["id"] = msg.id
        return d
    if type(msg) is Notification:
        d = {"jsonrpc": "2.0", "method": msg.method}
        if msg.params is not None:
            d["params"] = msg.params
        return d
    if type(msg) is Response:
        return {"jsonrpc": "2.0", "result": msg.result, "id": msg.id}
    assert type(msg) is ErrorResponse
    return {"jsonrpc": "2.0", "error": msg.error.to_dict(), "id": msg.id}
