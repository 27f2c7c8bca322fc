"""MCP's rules on top of JSON-RPC 2.0, as a per-connection :class:`~sturdyrpc.profile.Profile`.

One :class:`MCPProfile` object lives as long as its connection and is consulted for every
incoming message (by the dispatcher and the runner), so the rules follow the negotiated
version as soon as it is known:

- ids are strings or integers, never null or fractional (-32600, not executed); an id equal to
  one still running on the connection is refused (-32600) without touching the first;
- ``params`` is an object (an array gets -32602);
- an array is a batch only on 2025-03-26 (``initialize`` can never be in one: it is refused
  once a version is negotiated); otherwise ONE -32600 and nothing runs;
- an error to an unreadable id carries ``id: null``, or no ``id`` on versions whose schema
  allows it (2025-11-25 and later);
- the era is pinned by the client's opening: ``initialize`` selects the handshake era (only
  ``ping`` may precede it), a request carrying the 2026-07-28 ``_meta`` envelope (or
  ``server/discover``) selects the stateless era, where every request must carry
  ``io.modelcontextprotocol/protocolVersion`` and ``io.modelcontextprotocol/clientCapabilities``
  (-32602 if not) and an unsupported version gets -32022 with ``data.supported``/``requested``;
- cancellation is ``notifications/cancelled`` ``{requestId, reason?}`` (``initialize`` cannot be
  cancelled); progress is ``notifications/progress`` with the token in ``params._meta.progressToken``;
- one rule for every notification: ``params`` that is neither an object nor an array makes
  the message invalid JSON-RPC (-32600, unreadable id), whatever the method; a well-formed
  notification whose params MCP does not accept (an array, a cancel naming no request) is
  never answered, only dropped (and logged at debug level, or counted in the peer's stats).
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from ..errors import InvalidParams, InvalidRequest, MethodNotFound, RPCError
from ..messages import Id
from ..profile import NO_CANCEL, Profile
from .versions import (
    HANDSHAKE_VERSIONS,
    META_CLIENT_CAPABILITIES,
    META_PROTOCOL_VERSION,
    MODERN_VERSIONS,
    RULES,
    SUPPORTED_VERSIONS,
    VersionRules,
    negotiate_handshake,
)

__all__ = ["speaks_mcp", "MCPProfile", "UnsupportedProtocolVersion", "MissingRequiredClientCapability", "HeaderMismatch", "Era"]

Era = Literal["handshake", "modern"]

log = logging.getLogger("sturdyrpc.mcp")

UNSUPPORTED_PROTOCOL_VERSION = -32022
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
HEADER_MISMATCH = -32020


class UnsupportedProtocolVersion(RPCError):
    """-32022 (2026-07-28): the requested protocol version is not supported."""

    code = UNSUPPORTED_PROTOCOL_VERSION
    default_message = "Unsupported protocol version"

    def __init__(self, supported: list[str], requested: Any) -> None:
        super().__init__("Unsupported protocol version", {"supported": supported, "requested": requested})


class MissingRequiredClientCapability(RPCError):
    """-32021 (2026-07-28): the request needs a client capability the client did not declare."""

    code = MISSING_REQUIRED_CLIENT_CAPABILITY
    default_message = "Missing required client capability"

    def __init__(self, required: dict[str, Any], message: str | None = None) -> None:
        super().__init__(message or "Missing required client capability", {"requiredCapabilities": required})


class HeaderMismatch(RPCError):
    """-32020 (2026-07-28, HTTP): a required header is missing, malformed or disagrees with the body."""

    code = HEADER_MISMATCH
    default_message = "Header mismatch"


def _is_id(v: Any) -> bool:
    t = type(v)
    return t is str or t is int


def _newest_first(versions: tuple[str, ...]) -> list[str]:
    return list(reversed(versions))


#: The types of an MCP request id.
_ID_TYPES = frozenset({str, int})
#: Methods a handshake-era session refuses (see ``_check_handshake``).
_HANDSHAKE_REFUSED = frozenset({"initialize", "server/discover", "ping"})
#: Requests of the stateless era that are refused whatever their envelope.
_MODERN_REFUSED = frozenset({"initialize", "ping"})
#: Requests that neither era refuses by name (neither set above, no ``notifications/`` name):
#: one test for the usual method instead of two (any other method takes those two).
_ROUTINE = frozenset({
    "tools/call", "tools/list", "resources/list", "resources/templates/list", "resources/read",
    "resources/subscribe", "resources/unsubscribe", "prompts/list", "prompts/get", "completion/complete",
    "logging/setLevel", "subscriptions/listen", "tasks/get", "tasks/result", "tasks/list", "tasks/cancel", "tasks/update",
})


#: Method prefixes only MCP uses (a message of one of them is MCP's).
_MCP_PREFIXES = ("tools/", "resources/", "prompts/", "completion/", "logging/", "tasks/", "notifications/", "sampling/",
                 "elicitation/", "roots/")


def speaks_mcp(method: str, params: Any) -> bool:
    """Whether a message of ``method`` with ``params`` says its sender speaks MCP: an
    ``initialize`` that offers a version, ``server/discover``, a version in ``_meta``
    (2026-07-28), or a method of MCP's own (``tools/``, ``notifications/``...)."""
    meta = params.get("_meta") if type(params) is dict else None
    return (
        (method == "initialize" and type(params) is dict and "protocolVersion" in params)
        or method == "server/discover"
        or (type(meta) is dict and "io.modelcontextprotocol/protocolVersion" in meta)
        or method.startswith(_MCP_PREFIXES)
    )


class MCPProfile(Profile):
    """MCP rules for one connection.

    ``role="server"`` (default) also enforces the lifecycle; ``role="client"`` only the
    message rules (what a client accepts from its server). ``stateless=True`` is the
    single-request 2026-07-28 mode (Streamable HTTP): every request must carry the
    ``_meta`` envelope, nothing is remembered between requests, and two requests in flight may
    carry the same id (they come from different clients).
    """

    name = "mcp"
    cancel_method = "notifications/cancelled"
    progress_method = "notifications/progress"
    refuse_duplicate_ids = True

    _version: str | None = None
    _era: Era | None = None
    _role: str = "server"
    #: What ``check_request`` asks first of every request, kept by the setters of ``role``,
    #: ``era`` and ``version``: a server session pinned to the handshake era, or to the stateless one.
    _handshake_server = False
    _modern_server = False
    #: The rules every request of the connection is served under, when they do not vary per
    #: request (kept by the same setters): the negotiated version's (the latest's before
    #: negotiation); None in the stateless era, where each request names its version.
    session_rules: VersionRules | None = RULES[SUPPORTED_VERSIONS[-1]]

    @property
    def version(self) -> str | None:
        """The negotiated version (None until known)."""
        return self._version

    @version.setter
    def version(self, value: str | None) -> None:
        self._version = value
        self._pinned()

    @property
    def era(self) -> Era | None:
        """Which era the connection is pinned to (None until the client's opening says)."""
        return self._era

    @era.setter
    def era(self, value: Era | None) -> None:
        self._era = value
        self._pinned()

    @property
    def role(self) -> str:
        """``"server"`` or ``"client"`` (see the class docstring)."""
        return self._role

    @role.setter
    def role(self, value: str) -> None:
        self._role = value
        self._pinned()

    def _pinned(self) -> None:
        era, server = self._era, self._role == "server"
        self._handshake_server = server and era == "handshake"
        self._modern_server = server and era == "modern"
        v = self._version
        self.session_rules = None if era == "modern" else RULES.get(v) if v is not None else RULES[SUPPORTED_VERSIONS[-1]]

    def __init__(
        self,
        version: str | None = None,
        *,
        role: Literal["server", "client"] = "server",
        stateless: bool = False,
        supported: tuple[str, ...] = SUPPORTED_VERSIONS,
    ) -> None:
        self.role = role
        self.stateless = stateless
        self.supported = supported
        self.version = version
        self.era = None
        if version is not None:
            self.era = "modern" if RULES[version].stateless else "handshake"
        if stateless:
            self.era = "modern"
            # requests of different clients may carry the same id: no connection whose ids could repeat
            self.refuse_duplicate_ids = False
        #: ``initialize`` has been accepted (handshake era).
        self.initialize_seen = False
        #: ``notifications/initialized`` arrived.
        self.initialized = False
        #: What the client sent in ``initialize`` (handshake era).
        self.client_info: dict[str, Any] = {}
        self.client_capabilities: dict[str, Any] = {}
        self.requested_version: Any = None
        self._initialize_id: Id = None
        self._has_initialize_id = False

    # ------------------------------------------------------------------ rules

    @property
    def rules(self) -> VersionRules | None:
        """The rules of the negotiated version, or None before negotiation."""
        return RULES.get(self.version) if self.version is not None else None

    def set_version(self, version: str) -> None:
        """Adopt ``version`` (e.g. the client after ``initialize`` or ``server/discover``)."""
        self.version = version
        self.era = "modern" if RULES[version].stateless else "handshake"

    def batches_allowed(self) -> bool:
        return self.version is not None and RULES[self.version].batches

    def omit_unreadable_id(self) -> bool:
        if self.version is not None:
            return RULES[self.version].omit_unreadable_id
        return self.era == "modern"

    def answerable_id(self, id_: Id) -> bool:
        return _is_id(id_)

    def check_request(self, method: str, params: Any, id_: Id, is_notification: bool) -> RPCError | None:
        # Runs for every request: the common case first, a request on a negotiated
        # handshake-era session, answered by the same rules as below.
        # (a notification's id is None here: not one of the id types)
        if self._handshake_server and type(id_) in _ID_TYPES and type(params) is dict:
            if method in _ROUTINE or not (method in _HANDSHAKE_REFUSED or method.startswith("notifications/")):
                return None
            return self._check_handshake(method)
        t = type(id_)
        if self._modern_server and not is_notification and (t is str or t is int) and type(params) is dict:
            # ... and a request of the stateless era: its envelope, as below
            if method in _ROUTINE or not (method in _MODERN_REFUSED or method.startswith("notifications/")):
                return self._check_envelope(params.get("_meta"), self.supported if self.stateless else MODERN_VERSIONS)
        if not is_notification and t is not str and t is not int:
            return InvalidRequest("Invalid Request", {"reason": "an MCP request id must be a string or an integer"})
        if params is not None and type(params) is not dict:
            if is_notification:  # never answered (JSON-RPC); the same for every notification
                log.debug("notification %r with params that are not an object dropped", method)
            return InvalidParams("Invalid params", {"reason": "params must be an object"})
        if not is_notification and method.startswith("notifications/"):
            return MethodNotFound("Method not found")  # a notification's name with an id: no such request (a reply would be result null)
        if self.role == "client" or is_notification:
            if is_notification and method == "notifications/initialized" and self.era == "handshake":
                self.initialized = True
            return None
        era = self.era
        if era == "handshake":
            return self._check_handshake(method)
        meta = params.get("_meta") if params is not None else None
        # either envelope key marks a 2026-07-28 request (one missing is -32602, not "not initialized")
        envelope = type(meta) is dict and (META_PROTOCOL_VERSION in meta or META_CLIENT_CAPABILITIES in meta)
        if era is None:
            if method == "initialize":
                return self._accept_initialize(params, id_)
            if method == "ping" and not envelope:
                return None
            if method == "server/discover" or envelope:
                err = self._check_envelope(meta, self.supported)
                if err is None and method == "ping":
                    return MethodNotFound("Method not found")  # a 2026-07-28 ping: removed in that version
                if err is None:
                    self.set_version(meta[META_PROTOCOL_VERSION])  # type: ignore[index]
                return err
            return InvalidRequest("Invalid Request", {"reason": "the server is not initialized: send initialize first"})
        # the stateless era
        if method == "initialize":
            if self.stateless:
                return MethodNotFound("Method not found")
            requested = params.get("protocolVersion") if params is not None else None
            return UnsupportedProtocolVersion(_newest_first(MODERN_VERSIONS), requested)
        if method == "ping":
            return MethodNotFound("Method not found")
        return self._check_envelope(meta, self.supported if self.stateless else MODERN_VERSIONS)

    def _check_handshake(self, method: str) -> RPCError | None:
        """A request on a session in the handshake era, after the message checks."""
        if method.startswith("notifications/"):
            return MethodNotFound("Method not found")
        if method == "initialize":
            return InvalidRequest("Invalid Request", {"reason": "initialize was already received"})
        if method == "server/discover":
            return MethodNotFound("Method not found")
        if method == "ping" and self.rules is not None and not self.rules.ping:
            return MethodNotFound("Method not found")
        return None

    def _check_envelope(self, meta: Any, supported: tuple[str, ...]) -> RPCError | None:
        """The 2026-07-28 ``_meta`` envelope (None: well formed, naming a version served here);
        ``supported``: the versions an error names (newest first there)."""
        if type(meta) is not dict:
            return InvalidParams("Invalid params", {"reason": "params._meta with the protocol version and client capabilities is required"})
        version = meta.get(META_PROTOCOL_VERSION)
        caps = meta.get(META_CLIENT_CAPABILITIES)
        if type(version) is str and type(caps) is dict and version in MODERN_VERSIONS and version in self.supported:
            return None  # every request asks: the well-formed case first
        if type(version) is not str:
            return InvalidParams("Invalid params", {"reason": f"params._meta[{META_PROTOCOL_VERSION!r}] is required"})
        if type(caps) is not dict:
            return InvalidParams("Invalid params", {"reason": f"params._meta[{META_CLIENT_CAPABILITIES!r}] must be an object"})
        if version not in MODERN_VERSIONS or version not in self.supported:
            return UnsupportedProtocolVersion(_newest_first(supported), version)
        return None

    def _accept_initialize(self, params: Any, id_: Id) -> RPCError | None:
        if params is None:
            return InvalidParams("Invalid params: missing required parameter 'protocolVersion'", {"param": "protocolVersion"})
        requested = params.get("protocolVersion")
        if type(requested) is not str:
            return InvalidParams("Invalid params: 'protocolVersion' must be a string", {"param": "protocolVersion"})
        caps = params.get("capabilities", {})
        info = params.get("clientInfo", {})
        if type(caps) is not dict:
            return InvalidParams("Invalid params: 'capabilities' must be an object", {"param": "capabilities"})
        offered = tuple(v for v in HANDSHAKE_VERSIONS if v in self.supported) or HANDSHAKE_VERSIONS
        self.requested_version = requested
        self.set_version(negotiate_handshake(requested, offered))
        self.initialize_seen = True
        self.client_capabilities = caps
        self.client_info = info if type(info) is dict else {}
        self._initialize_id = id_
        self._has_initialize_id = True
        return None

    # ---------------------------------------------------------- cancellation

    def cancel_notification(self, id_: Id, reason: str | None) -> tuple[str, Any] | None:
        params: dict[str, Any] = {"requestId": id_}
        if reason is not None:
            params["reason"] = reason
        return "notifications/cancelled", params

    def read_cancel(self, params: Any) -> Id:
        if type(params) is dict:
            v = params.get("requestId")
            if _is_id(v):
                if self._has_initialize_id and type(v) is type(self._initialize_id) and v == self._initialize_id:
                    return NO_CANCEL  # type: ignore[no-any-return]  # initialize MUST NOT be cancelled
                return v
        return NO_CANCEL  # type: ignore[no-any-return]

    # --------------------------------------------------------------- progress

    def put_progress_token(self, params: Any, token: str | int) -> Any:
        if params is None:
            return {"_meta": {"progressToken": token}}
        if type(params) is not dict:
            raise ValueError("MCP params must be an object")
        out = dict(params)
        meta = out.get("_meta")
        meta = dict(meta) if type(meta) is dict else {}
        meta["progressToken"] = token
        out["_meta"] = meta
        return out

    def read_progress_token(self, params: Any) -> str | int | None:
        if type(params) is dict:
            meta = params.get("_meta")
            if type(meta) is dict:
                t = meta.get("progressToken")
                if _is_id(t):
                    return t
        return None

    def progress_notification(self, token: str | int, progress: float, total: float | None, message: str | None) -> tuple[str, Any]:
        params: dict[str, Any] = {"progressToken": token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None and (self.version is None or RULES[self.version].progress_message):
            params["message"] = message
        return "notifications/progress", params

    def read_progress(self, params: Any) -> tuple[str | int, float, float | None, str | None] | None:
        if type(params) is not dict:
            return None
        token = params.get("progressToken")
        p = params.get("progress")
        if not _is_id(token) or not isinstance(p, (int, float)) or type(p) is bool:
            return None
        total = params.get("total")
        msg = params.get("message")
        total_f = float(total) if isinstance(total, (int, float)) and type(total) is not bool else None
        tok: str | int = token  # type: ignore[assignment]  # checked by _is_id above
        return tok, float(p), total_f, msg if type(msg) is str else None
