"""Profiles: the rules that differ between plain JSON-RPC 2.0 and protocols built on it.

A profile is a small per-connection object consulted by the dispatcher (what to accept)
and the peer (how to cancel, where progress tokens go). Plain JSON-RPC has no standard
cancel or progress messages; :class:`JSONRPCProfile` uses the LSP names
(``$/cancelRequest`` with ``{"id"}``, ``$/progress`` with ``{"token", "value"}``).
MCP supplies its own (:mod:`sturdyrpc.mcp`), whose rules can depend on the negotiated
version, which is why profiles are per connection and their answers are methods.
"""

from __future__ import annotations

from typing import Any

from .errors import RPCError
from .messages import Id

__all__ = ["Profile", "JSONRPCProfile", "NO_CANCEL"]

#: Returned by :meth:`Profile.read_cancel` when params do not name a request.
NO_CANCEL: Any = object()  # a sentinel: compare with "is"


class Profile:
    """Base profile: plain JSON-RPC 2.0 semantics, no cancel/progress wire messages."""

    name = "jsonrpc-2.0"
    #: Method of the notification that cancels a request, or None when the protocol has none.
    cancel_method: str | None = None
    #: Method of the progress notification, or None.
    progress_method: str | None = None

    def batches_allowed(self) -> bool:
        """Whether an incoming array is served as a batch (else ONE -32600, nothing runs)."""
        return True

    def omit_unreadable_id(self) -> bool:
        """When an error answers a message whose id could not be read: omit ``id`` (True) or send null."""
        return False

    #: Refuse (-32600) a request whose id equals one still running on this connection, leaving the
    #: first untouched (the runner checks it). Plain JSON-RPC only says ids SHOULD be unique.
    refuse_duplicate_ids: bool = False

    def answerable_id(self, id_: Id) -> bool:
        """Whether an error may echo ``id_``; if not, it is answered as an unreadable id."""
        return True

    def check_request(self, method: str, params: Any, id_: Id, is_notification: bool) -> RPCError | None:
        """Extra validation before dispatch; an error here is answered (requests) and nothing runs."""
        return None

    def params_for_handler(self, params: Any) -> Any:
        """``params`` as the handler's signature sees them: protocol members (a progress token,
        ``_meta``) may be left out. The context still sees the original params. Default: unchanged."""
        return params

    # -- cancellation
    def cancel_notification(self, id_: Id, reason: str | None) -> tuple[str, Any] | None:
        """(method, params) of the notification that cancels ``id_``, or None."""
        return None

    def read_cancel(self, params: Any) -> Id:
        """The request id a cancel notification names, or :data:`NO_CANCEL`."""
        return NO_CANCEL  # type: ignore[no-any-return]

    # -- progress
    def put_progress_token(self, params: Any, token: str | int) -> Any:
        """``params`` with ``token`` placed where the protocol carries it (a copy, never mutated)."""
        raise NotImplementedError(f"{self.name} has no progress notifications")

    def read_progress_token(self, params: Any) -> str | int | None:
        """The progress token a request carries, or None."""
        return None

    def progress_notification(self, token: str | int, progress: float, total: float | None, message: str | None) -> tuple[str, Any]:
        raise NotImplementedError(f"{self.name} has no progress notifications")

    def read_progress(self, params: Any) -> tuple[str | int, float, float | None, str | None] | None:
        """(token, progress, total, message) of a progress notification, or None if malformed."""
        return None


class JSONRPCProfile(Profile):
    """Plain JSON-RPC 2.0 with the LSP conventions for cancel and progress."""

    name = "jsonrpc-2.0+lsp"
    cancel_method = "$/cancelRequest"
    progress_method = "$/progress"

    def cancel_notification(self, id_: Id, reason: str | None) -> tuple[str, Any] | None:
        return self.cancel_method or "", {"id": id_}

    def read_cancel(self, params: Any) -> Id:
        if type(params) is dict and "id" in params:
            v = params["id"]
            if isinstance(v, (str, int)) and type(v) is not bool:
                return v
        return NO_CANCEL  # type: ignore[no-any-return]

    def put_progress_token(self, params: Any, token: str | int) -> Any:
        # LSP carries the token as params.workDoneToken on the request.
        if params is None:
            return {"workDoneToken": token}
        if type(params) is dict:
            out = dict(params)
            out["workDoneToken"] = token
            return out
        raise ValueError("progress needs named (object) params")

    def params_for_handler(self, params: Any) -> Any:
        # The token is protocol, not an argument: handlers read it through their context.
        if type(params) is dict and "workDoneToken" in params:
            return {k: v for k, v in params.items() if k != "workDoneToken"}
        return params

    def read_progress_token(self, params: Any) -> str | int | None:
        if type(params) is dict:
            t = params.get("workDoneToken")
            if isinstance(t, (str, int)) and type(t) is not bool:
                return t
        return None

    def progress_notification(self, token: str | int, progress: float, total: float | None, message: str | None) -> tuple[str, Any]:
        value: dict[str, Any] = {"progress": progress}
        if total is not None:
            value["total"] = total
        if message is not None:
            value["message"] = message
        return self.progress_method or "", {"token": token, "value": value}

    def read_progress(self, params: Any) -> tuple[str | int, float, float | None, str | None] | None:
        if type(params) is not dict:
            return None
        token = params.get("token")
        value = params.get("value")
        if not (type(token) is str or type(token) is int) or type(value) is not dict:
            return None
        p = value.get("progress")
        if not isinstance(p, (int, float)) or type(p) is bool:
            return None
        total = value.get("total")
        msg = value.get("message")
        total_f = float(total) if isinstance(total, (int, float)) and type(total) is not bool else None
        return token, float(p), total_f, msg if type(msg) is str else None
