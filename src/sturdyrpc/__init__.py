"""sturdyrpc: JSON-RPC 2.0 that never crashes, never leaks, and settles every request."""

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

__version__ = "0.1.0"

__all__ = [
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
]
