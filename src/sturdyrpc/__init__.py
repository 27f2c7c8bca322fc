"""sturdyrpc: JSON-RPC 2.0 that never crashes, never leaks, and settles every request."""

from ._version import __version__
from .dispatch import BatchJob, Call, Context, Dispatcher
from .errors import (
    ApplicationError,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    ParseError,
    RPCError,
    ServerError,
)
from .limits import DEFAULT_LIMITS, Limits
from .messages import ErrorResponse, Notification, Request, Response, classify
from .transports.stdio import run_stdio, serve_stdio

# The peer and client helpers load on first use, so that a plain server starts without them.
_LAZY = {
    "Peer": ".peer",
    "PeerContext": ".peer",
    "RequestTimeout": ".peer",
    "ConnectionClosed": ".peer",
    "InvalidReply": ".peer",
    "MessageTransport": ".peer",
    "connect_stdio": ".client",
    "connect_tcp": ".client",
    "connect_unix": ".client",
    "Profile": ".profile",
    "JSONRPCProfile": ".profile",
    "Timing": ".middleware",
    "RateLimit": ".middleware",
    "RateLimited": ".middleware",
    "ResponseSizeLimit": ".middleware",
    "ResponseTooLarge": ".middleware",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sturdyrpc' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)

__all__ = [
    "__version__",
    "Dispatcher",
    "Call",
    "BatchJob",
    "Context",
    "Limits",
    "DEFAULT_LIMITS",
    "RPCError",
    "ParseError",
    "InvalidRequest",
    "MethodNotFound",
    "InvalidParams",
    "InternalError",
    "ServerError",
    "ApplicationError",
    "Request",
    "Notification",
    "Response",
    "ErrorResponse",
    "classify",
    "serve_stdio",
    "run_stdio",
    *_LAZY,
]
