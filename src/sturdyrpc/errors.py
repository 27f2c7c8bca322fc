"""JSON-RPC 2.0 error types: one exception class per error kind.

Every class carries ``code``, ``message`` and ``data`` and knows how to turn
itself into the wire error object. Raising one of these from a handler sends
it to the peer unchanged; any other exception is replaced by a bare
:class:`InternalError` (see :mod:`sturdyrpc.dispatch`).
"""

from __future__ import annotations

import os
from typing import Any

__all__ = [
    "RPCError",
    "ParseError",
    "InvalidRequest",
    "MethodNotFound",
    "InvalidParams",
    "InternalError",
    "ServerError",
    "ApplicationError",
    "error_class_for",
    "PARSE_ERROR",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "INVALID_PARAMS",
    "INTERNAL_ERROR",
    "HANDLER_ERRORS",
    "incident_of",
    "assigned_incident",
]

#: What a handler may raise that is answered as a failure (-32603 with an incident id, or an MCP
#: ``isError`` result) rather than let through: ``sys.exit()``, a ``KeyboardInterrupt`` raised by
#: handler code and a stray ``GeneratorExit`` must not stop the server. ``asyncio.CancelledError``
#: is deliberately absent: a cancelled request is never answered.
HANDLER_ERRORS: tuple[type[BaseException], ...] = (Exception, SystemExit, KeyboardInterrupt, GeneratorExit)

_INCIDENT = "_sturdyrpc_incident"


def incident_of(exc: BaseException) -> str:
    """The incident id under which ``exc`` is (or will be) logged: made on first use, then the
    same for every later caller, so the log line, the client's error and telemetry agree.
    (Per exception object: a handler raising one prebuilt instance again reuses its id.)"""
    incident = exc.__dict__.get(_INCIDENT)
    if incident is None:
        incident = exc.__dict__[_INCIDENT] = os.urandom(4).hex()  # as secrets.token_hex(4), without importing secrets
    return incident


def assigned_incident(exc: BaseException) -> str | None:
    """``exc``'s incident id if :func:`incident_of` gave it one already, else None."""
    return exc.__dict__.get(_INCIDENT)


PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

_NO_DATA: Any = object()


class RPCError(Exception):
    """A JSON-RPC error: ``code`` (int), ``message`` (one short sentence), optional ``data``.

    Raise it (or a subclass) from a handler to send exactly this error.
    """

    code: int = INTERNAL_ERROR
    default_message: str = "Internal error"

    __slots__ = ("message", "data", "has_data")

    def __init__(self, message: str | None = None, data: Any = _NO_DATA, *, code: int | None = None) -> None:
        if code is not None:
            if type(code) is not int:
                raise TypeError("error code must be an int")
            self.code = code
        # The wire's "message" MUST be a string, whatever a handler passed.
        self.message = self.default_message if message is None else message if type(message) is str else str(message)
        self.has_data = data is not _NO_DATA
        self.data = None if data is _NO_DATA else data
        super().__init__(self.message)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-RPC error object."""
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.has_data:
            err["data"] = self.data
        return err

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code}, message={self.message!r})"


class ParseError(RPCError):
    """-32700: the bytes received are not valid JSON."""

    code = PARSE_ERROR
    default_message = "Parse error"


class InvalidRequest(RPCError):
    """-32600: valid JSON that is not a valid request object (also used for limit breaches)."""

    code = INVALID_REQUEST
    default_message = "Invalid Request"


class MethodNotFound(RPCError):
    """-32601: no such method."""

    code = METHOD_NOT_FOUND
    default_message = "Method not found"


class InvalidParams(RPCError):
    """-32602: the params do not fit the method's signature."""

    code = INVALID_PARAMS
    default_message = "Invalid params"


class InternalError(RPCError):
    """-32603: something failed inside the server. Never carries exception text."""

    code = INTERNAL_ERROR
    default_message = "Internal error"


class ServerError(RPCError):
    """-32000..-32099: implementation-defined server errors. Pass ``code`` to pick one."""

    code = -32000
    default_message = "Server error"


class ApplicationError(RPCError):
    """An application error with a code of the application's own choosing.

    Codes outside -32768..-32000 are free for applications.
    """

    code = 1
    default_message = "Application error"

    def __init__(self, code: int, message: str, data: Any = _NO_DATA) -> None:
        super().__init__(message, data, code=code)


_BY_CODE: dict[int, type[RPCError]] = {
    PARSE_ERROR: ParseError,
    INVALID_REQUEST: InvalidRequest,
    METHOD_NOT_FOUND: MethodNotFound,
    INVALID_PARAMS: InvalidParams,
    INTERNAL_ERROR: InternalError,
}


def error_class_for(code: int) -> type[RPCError]:
    """The exception class that represents ``code`` (used when a peer receives an error)."""
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls
    if -32099 <= code <= -32000:
        return ServerError
    return RPCError


def error_from_dict(err: dict[str, Any]) -> RPCError:
    """Build a typed exception from a received error object (assumed already validated)."""
    code = err["code"]
    cls = error_class_for(code)
    data = err["data"] if "data" in err else _NO_DATA
    exc = RPCError.__new__(cls)
    RPCError.__init__(exc, err.get("message", ""), data, code=code)
    return exc
