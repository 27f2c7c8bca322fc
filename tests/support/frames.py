"""JSON-RPC frames as compact bytes, for the tests that feed the sans-I/O proxy cores."""

from __future__ import annotations

import json
from typing import Any


def b(obj: Any) -> bytes:
    """``obj`` as compact JSON bytes."""
    return json.dumps(obj, separators=(",", ":")).encode()


def req(id: Any, method: str = "m", params: Any = None) -> bytes:
    """A request (``params`` left out when None)."""
    m: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        m["params"] = params
    return b(m)


def note(method: str, params: Any = None) -> bytes:
    """A notification (``params`` left out when None)."""
    m: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        m["params"] = params
    return b(m)


def res(id: Any, result: Any = "ok") -> bytes:
    """A success response."""
    return b({"jsonrpc": "2.0", "id": id, "result": result})


def err(id: Any, code: int, message: str = "x") -> bytes:
    """An error response."""
    return b({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
