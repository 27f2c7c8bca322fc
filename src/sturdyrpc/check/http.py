"""The HTTP checks (area ``http``), run with ``--url`` through an :class:`~.http_probe.HTTPProbe`.

Spec files are relative to docs/specification/ of the MCP spec.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import msgspec

from .config import CLIENT_INFO, HANDSHAKE_VERSIONS, MODERN_VERSION, Config
from .driver import trim
from .model import CheckFailed, CheckSkipped, Level
from .probe import Probe
from .rules import NULL, check, expect_error, leaks

if TYPE_CHECKING:
    # Types only: the probe module brings httpx, which a stdio run must not need (connect.new_probe).
    from .http_probe import HTTPProbe, HTTPReply

_encode = msgspec.json.encode
MUST, SHOULD = Level.MUST, Level.SHOULD
UNKNOWN = "sturdyrpc.check/unknown-method"
NO_SUCH_TOOL = "sturdyrpc-check-no-such-tool"
FOREIGN_ORIGIN = "http://sturdyrpc-check.invalid"

_TRANSPORT = "basic/transports.mdx (Streamable HTTP)"
_MODERN_HTTP = "basic/transports/streamable-http.mdx"


def _spec(path: str, version: str) -> str:
    return f"MCP {version}: {path}"


def _http(cfg: Config) -> str | None:
    return None if cfg.url else "HTTP only (use --url)"


def _http_mcp(cfg: Config) -> str | None:
    return _http(cfg) or (None if cfg.is_mcp else "not an MCP server")


def _http_handshake(cfg: Config) -> str | None:
    return _http_mcp(cfg) or (f"MCP {MODERN_VERSION} has no sessions" if cfg.modern else None)


def _http_modern(cfg: Config) -> str | None:
    return _http_mcp(cfg) or (None if cfg.modern else f"only for MCP {MODERN_VERSION} (the checks speak {cfg.version})")


def _hs(s: Probe) -> HTTPProbe:
    # connect.new_probe opens an HTTPProbe exactly when the run has a URL.
    if not s.cfg.url:
        raise CheckSkipped("HTTP only")
    return cast("HTTPProbe", s)


def _probe(s: HTTPProbe, id: str) -> dict[str, Any]:
    """A request every server answers: server/discover (2026-07-28), ping (MCP), an unknown method (plain)."""
    if s.cfg.modern:
        return s.request("server/discover", {}, id=id)
    if s.cfg.is_mcp:
        return s.request("ping", id=id)
    return s.request(UNKNOWN, id=id)


def _error_code(reply: HTTPReply) -> int | None:
    for m in reply.messages:
        if type(m) is dict and type(m.get("error")) is dict and type(m["error"].get("code")) is int:
            return int(m["error"]["code"])
    return None


def _refused(reply: HTTPReply, status: int | tuple[int, ...], what: str, *, code: int | None = None, code_level: Level = MUST) -> None:
    statuses = (status,) if isinstance(status, int) else status
    if reply.status not in statuses:
        raise CheckFailed(f"{what}: expected HTTP {' or '.join(map(str, statuses))}, got {reply.describe()}")
    if code is not None and _error_code(reply) != code:
        raise CheckFailed(f"{what}: expected a JSON-RPC error {code} in the body, got {trim(reply.body, 160) or '(no body)'}", level=code_level)


def _fresh_session(s: HTTPProbe) -> tuple[HTTPReply, str | None]:
    """initialize without a session id (a new session); returns the reply and the issued id."""
    version = s.cfg.version or HANDSHAKE_VERSIONS[-1]
    body = _encode({"jsonrpc": "2.0", "id": s.new_id("init"), "method": "initialize",
                    "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": CLIENT_INFO}})
    reply = s.http("POST", body, drop=("mcp-session-id", "mcp-protocol-version"))
    sid = reply.headers.get("mcp-session-id")
    if sid:
        hdrs = {"mcp-session-id": sid}
        if version >= "2025-06-18":
            hdrs["mcp-protocol-version"] = version
        s.http("POST", _encode({"jsonrpc": "2.0", "method": "notifications/initialized"}), hdrs)
    return reply, sid


def _session_id_or_skip(s: HTTPProbe) -> tuple[str, dict[str, str]]:
    reply, sid = _fresh_session(s)
    if reply.status != 200:
        raise CheckFailed(f"initialize was not served: {reply.describe()}")
    if not sid:
        raise CheckSkipped("the server issues no Mcp-Probe-Id (stateless)")
    hdrs = {"mcp-session-id": sid}
    if (s.cfg.version or "") >= "2025-06-18":
        hdrs["mcp-protocol-version"] = s.cfg.version or ""
    return sid, hdrs


@check(
    "http.notification-accepted", "http", MUST, "a POST holding only a notification gets 202 (plain JSON-RPC: 204/202) and no body",
    _spec(f"{_TRANSPORT} (202 Accepted with no body); {_MODERN_HTTP}", "2025-03-26..2026-07-28") + "; JSON-RPC 2.0 §4.1",
    "answer a POST of notifications only with 202 (MCP) or 204 (plain JSON-RPC) and an empty body",
    group="http", applies=_http,
)
def notification_accepted(s0: Probe) -> None:
    s = _hs(s0)
    if s.cfg.is_mcp:
        msg = s.notification("notifications/cancelled", {"requestId": "sturdyrpc-check-none", "reason": "check"})
        allowed: tuple[int, ...] = (202,)
    else:
        msg = s.notification(UNKNOWN, {"x": 1})
        allowed = (204, 202)
    reply = s.http("POST", _encode(msg))
    if reply.status not in allowed:
        raise CheckFailed(f"expected HTTP {' or '.join(map(str, allowed))}, got {reply.describe()}" + (f": {trim(reply.body, 160)}" if reply.body else ""))
    if reply.body.strip():
        raise CheckFailed(f"a notification got a body: {trim(reply.body, 160)}")


@check(
    "http.response-accepted", "http", MUST, "a POST holding a JSON-RPC response gets 202 and no body",
    _spec(f"{_TRANSPORT} (a response or notification: 202 Accepted, no body)", "2025-03-26..2025-11-25"),
    "answer a POST that holds only responses with 202 and an empty body",
    group="http", applies=_http_handshake,
)
def response_accepted(s0: Probe) -> None:
    s = _hs(s0)
    reply = s.http("POST", _encode({"jsonrpc": "2.0", "id": "sturdyrpc-check-resp", "result": {}}))
    if reply.status != 202:
        raise CheckFailed(f"expected HTTP 202, got {reply.describe()}" + (f": {trim(reply.body, 160)}" if reply.body else ""))
    if reply.body.strip():
        raise CheckFailed(f"a response got a body: {trim(reply.body, 160)}")


@check(
    "http.request-reply", "http", MUST, "a request gets 200 with application/json or text/event-stream holding its reply",
    _spec(f"{_TRANSPORT} (Content-Type text/event-stream or application/json)", "2025-03-26..2026-07-28") + "; JSON-RPC 2.0 §5",
    "answer a request POST with 200 and its reply as application/json (or, MCP, an SSE stream ending with the reply)",
    group="http", applies=_http,
)
def request_reply(s0: Probe) -> None:
    s = _hs(s0)
    msg = _probe(s, "rr-1")
    reply = s.http("POST", _encode(msg))
    kinds = ("application/json", "text/event-stream") if s.cfg.is_mcp else ("application/json",)
    if reply.status != 200 or reply.ctype not in kinds:
        raise CheckFailed(f"expected HTTP 200 with {' or '.join(kinds)}, got {reply.describe()}")
    mine = [m for m in reply.messages if type(m) is dict and m.get("id") == "rr-1" and "method" not in m]
    if len(mine) != 1:
        raise CheckFailed(f"the response body must carry exactly one reply to the request, found {len(mine)}: {trim(reply.body, 200)}")


@check(
    "http.accept", "http", SHOULD, "a request whose Accept excludes JSON and SSE is refused with 406",
    _spec(f"{_TRANSPORT} (the client MUST accept application/json and text/event-stream)", "2025-03-26..2026-07-28") + "; RFC 9110 §12.5.1",
    "answer 406 Not Acceptable when Accept lists neither application/json nor text/event-stream (nor */*)",
    group="http", applies=_http,
)
def accept(s0: Probe) -> None:
    s = _hs(s0)
    reply = s.http("POST", _encode(_probe(s, "acc-1")), {"accept": "text/html"})
    if reply.status == 406:
        return
    if 200 <= reply.status < 300:
        raise CheckFailed(f"answered {reply.describe()} to a client that accepts only text/html")
    raise CheckFailed(f"expected HTTP 406, got {reply.describe()}")


@check(
    "http.parse-error", "http", MUST, "an invalid JSON body gets a JSON-RPC -32700 error as application/json",
    "JSON-RPC 2.0 §5.1 (-32700); " + _spec(f"{_TRANSPORT} (HTTP error, optionally with a JSON-RPC error)", "2025-03-26..2026-07-28"),
    "answer a body that is not JSON with a JSON body {\"jsonrpc\":\"2.0\",\"error\":{\"code\":-32700,...},\"id\":null} (200 or 400), never an HTML page",
    group="http", applies=_http,
)
def parse_error(s0: Probe) -> None:
    s = _hs(s0)
    reply = s.http("POST", b'{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]')
    if reply.status >= 500 or reply.status == 0:
        raise CheckFailed(f"invalid JSON caused {reply.describe()}")
    if reply.ctype != "application/json" or not reply.messages:
        raise CheckFailed(f"expected a JSON-RPC error as application/json, got {reply.describe()}: {trim(reply.body, 160)}")
    expect_error(reply.messages[0], -32700, NULL, id_may_be_omitted=s.cfg.is_mcp)


@check(
    "http.session-id", "http", MUST, "Mcp-Probe-Id from initialize is visible ASCII (and unguessable)",
    _spec(f"{_TRANSPORT} (Probe Management: visible ASCII 0x21-0x7E, cryptographically secure)", "2025-03-26..2025-11-25"),
    "issue a random id (e.g. secrets.token_urlsafe(32)) with the InitializeResult; only characters 0x21-0x7E",
    group="http", applies=_http_handshake,
)
def session_id(s0: Probe) -> None:
    s = _hs(s0)
    sid, _ = _session_id_or_skip(s)
    bad = [c for c in sid if not 0x21 <= ord(c) <= 0x7E]
    if bad:
        raise CheckFailed(f"the session id holds characters outside 0x21-0x7E: {sid!r}")
    _, other = _fresh_session(s)
    if other == sid:
        raise CheckFailed("two initialize requests got the same session id")
    if len(sid) < 16:
        raise CheckFailed(f"the session id {sid!r} is too short to be unguessable", level=SHOULD)


@check(
    "http.session-required", "http", SHOULD, "a request without the session id gets 400",
    _spec(f"{_TRANSPORT} (Probe Management: servers that require a session id SHOULD answer 400 without it)", "2025-03-26..2025-11-25"),
    "answer requests (other than initialize) that lack Mcp-Probe-Id with 400 Bad Request",
    group="http", applies=_http_handshake,
)
def session_required(s0: Probe) -> None:
    s = _hs(s0)
    _, hdrs = _session_id_or_skip(s)
    reply = s.http("POST", _encode(s.request("ping", id="sr-1")), {k: v for k, v in hdrs.items() if k != "mcp-session-id"}, drop=("mcp-session-id",))
    _refused(reply, 400, "a request without Mcp-Probe-Id")


@check(
    "http.session-unknown", "http", MUST, "a request with an unknown session id gets 404",
    _spec(f"{_TRANSPORT} (Probe Management: an ended or unknown session -> 404 Not Found)", "2025-03-26..2025-11-25"),
    "answer 404 for a session id you do not know, so that the client re-initializes",
    group="http", applies=_http_handshake,
)
def session_unknown(s0: Probe) -> None:
    s = _hs(s0)
    _, hdrs = _session_id_or_skip(s)
    hdrs["mcp-session-id"] = "sturdyrpc-check-no-such-session-0000"
    _refused(s.http("POST", _encode(s.request("ping", id="su-1")), hdrs), 404, "a request with an unknown Mcp-Probe-Id")


@check(
    "http.session-delete", "http", MUST, "DELETE ends the session (later requests get 404), or is refused with 405",
    _spec(f"{_TRANSPORT} (Probe Management: DELETE; the server MAY answer 405)", "2025-03-26..2025-11-25"),
    "on DELETE with Mcp-Probe-Id end that session and answer 200/204; afterwards answer its id with 404",
    group="http", applies=_http_handshake,
)
def session_delete(s0: Probe) -> None:
    s = _hs(s0)
    _, hdrs = _session_id_or_skip(s)
    reply = s.http("DELETE", b"", hdrs)
    if reply.status == 405:
        return
    if not 200 <= reply.status < 300:
        raise CheckFailed(f"expected 200/204 (or 405), got {reply.describe()}")
    after = s.http("POST", _encode(s.request("ping", id="sd-1")), hdrs)
    _refused(after, 404, "a request with the id of a deleted session")


@check(
    "http.get-stream", "http", MUST, "GET opens an SSE stream or gets 405",
    _spec(f"{_TRANSPORT} (Listening for Messages: text/event-stream or 405 Method Not Allowed)", "2025-03-26..2025-11-25"),
    "answer GET with Accept: text/event-stream by an SSE stream (200, text/event-stream) or 405",
    group="http", applies=_http_handshake,
)
def get_stream(s0: Probe) -> None:
    s = _hs(s0)
    reply = s.http("GET", b"", {"accept": "text/event-stream"}, headers_only=True)
    if reply.status == 405 or (reply.status == 200 and reply.ctype == "text/event-stream"):
        return
    raise CheckFailed(f"expected an SSE stream or 405, got {reply.describe()}")


@check(
    "http.protocol-version", "http", MUST, "an invalid or unsupported MCP-Protocol-Version header gets 400",
    _spec(f"{_TRANSPORT} (Protocol Version Header: invalid or unsupported -> 400 Bad Request)", "2025-06-18..2026-07-28"),
    "check MCP-Protocol-Version on every request; answer 400 for a value you do not support (2026-07-28: with -32022)",
    group="http", applies=lambda cfg: _http_mcp(cfg) or ("the header exists from 2025-06-18" if (cfg.version or "") < "2025-06-18" else None),
)
def protocol_version(s0: Probe) -> None:
    s = _hs(s0)
    msg = _encode(_probe(s, "pv-1"))
    _refused(s.http("POST", msg, {"mcp-protocol-version": "not-a-version"}), 400, "MCP-Protocol-Version: not-a-version")
    if s.cfg.modern:
        _refused(s.http("POST", msg, {"mcp-protocol-version": "2099-01-01"}), 400, "MCP-Protocol-Version: 2099-01-01", code=-32022)
    else:
        _refused(s.http("POST", msg, {"mcp-protocol-version": "1999-01-01"}), 400, "MCP-Protocol-Version: 1999-01-01")


def _origin_level(cfg: Config) -> str | None:
    return _http(cfg)


@check(
    "http.origin", "http", MUST, "a request from a foreign Origin gets 403",
    _spec(f"{_TRANSPORT} (Security Warning: servers MUST validate Origin; invalid -> 403 from 2025-11-25)", "2025-03-26..2026-07-28") + "; DNS rebinding",
    "validate the Origin header on every request (allow your own origins, localhost by default) and answer 403 otherwise",
    group="http", applies=_origin_level,
)
def origin(s0: Probe) -> None:
    s = _hs(s0)
    reply = s.http("POST", _encode(_probe(s, "or-1")), {"origin": FOREIGN_ORIGIN})
    level = MUST if s.cfg.is_mcp else SHOULD
    if 200 <= reply.status < 300:
        raise CheckFailed(f"a request with Origin: {FOREIGN_ORIGIN} was served ({reply.describe()}): any web page can drive this server", level=level)
    if reply.status != 403:
        strict = s.cfg.modern or (s.cfg.version or "") >= "2025-11-25"
        raise CheckFailed(f"expected 403 for a foreign Origin, got {reply.describe()}", level=level if strict else SHOULD)


@check(
    "http.body-too-large", "http", SHOULD, "a 20 MB body gets 413 (or a clean 4xx) and the server keeps answering",
    "RFC 9110 §15.5.14 (413 Content Too Large); " + _spec("security_best_practices (resource limits)", "2025-06-18..2026-07-28"),
    "cap the request body size and answer 413 beyond it; never buffer unbounded input",
    group="http-big", applies=_http, budget=4.0,
)
def body_too_large(s0: Probe) -> None:
    s = _hs(s0)
    body = _encode(s.request(UNKNOWN, {"p": 0}, id="big-1")).replace(b'"p":0', b'"p":"' + b"x" * (20 * 1024 * 1024) + b'"', 1)
    reply = s.http("POST", body, timeout=max(s.cfg.timeout, 20.0))
    after = s.http("POST", _encode(_probe(s, "big-after")))
    if after.status == 0 or not after.messages:
        raise CheckFailed(f"after a 20 MB body the server stopped answering: {after.describe()}", level=MUST)
    if reply.status >= 500:
        raise CheckFailed(f"a 20 MB body caused {reply.describe()}", level=MUST)
    if reply.status == 0:
        raise CheckFailed(f"the connection was dropped without a status ({reply.error}); answer 413")
    if 200 <= reply.status < 300:
        raise CheckFailed(f"a 20 MB body was accepted ({reply.describe()}): no size limit")
    if reply.status != 413 and not 400 <= reply.status < 500:
        raise CheckFailed(f"expected 413, got {reply.describe()}")


@check(
    "http.no-leak", "http", MUST, "HTTP error bodies carry no traceback, path or exception name",
    _spec("security_best_practices; basic/transports (HTTP errors)", "2025-06-18..2026-07-28") + "; OWASP error handling",
    "answer HTTP-level refusals with fixed text (or a fixed JSON-RPC error); log the details on the server only",
    group="http", applies=_http,
)
def no_leak(s0: Probe) -> None:
    s = _hs(s0)
    probes: list[tuple[str, HTTPReply]] = [
        ("PUT", s.http("PUT", b"{}")),
        ("Content-Type: text/plain", s.http("POST", _encode(_probe(s, "nl-1")), {"content-type": "text/plain"})),
        ("a body that is not UTF-8", s.http("POST", b'{"jsonrpc":"2.0","id":"nl-2","method":"\xff\xfe"}')),
        ("a JSON array of numbers", s.http("POST", b"[1,2,3]")),
        ("an unknown session id", s.http("POST", _encode(_probe(s, "nl-3")), {"mcp-session-id": "sturdyrpc-check-no-such-session"})),
    ]
    for what, reply in probes:
        if reply.status >= 500:
            raise CheckFailed(f"{what}: the server failed with {reply.describe()}")
        text = reply.body.decode("utf-8", "replace")
        found = leaks(text, ignore=(UNKNOWN,))
        if found:
            raise CheckFailed(f"the error body for {what} reveals the server's insides: " + "; ".join(found))


@check(
    "http.header-missing", "http", MUST, "a request without Mcp-Method (or Mcp-Name for tools/call) gets 400 + -32020",
    _spec(f"{_MODERN_HTTP} (Mcp-Method required on every request, Mcp-Name on tools/call; HeaderMismatch -32020)", MODERN_VERSION),
    "require Mcp-Method on every request and Mcp-Name on tools/call / resources/read / prompts/get; answer 400 with -32020",
    group="http", applies=_http_modern,
)
def header_missing(s0: Probe) -> None:
    s = _hs(s0)
    reply = s.http("POST", _encode(s.request("tools/list", {}, id="hm-1")), drop=("mcp-method",))
    _refused(reply, 400, "a request without Mcp-Method", code=-32020)
    reply = s.http("POST", _encode(s.request("tools/call", {"name": NO_SUCH_TOOL, "arguments": {}}, id="hm-2")), drop=("mcp-name",))
    _refused(reply, 400, "tools/call without Mcp-Name", code=-32020)


@check(
    "http.unknown-method", "http", MUST, "an unknown method gets 404 with a -32601 error",
    _spec(f"{_MODERN_HTTP} (an unknown method: 404 Not Found + -32601)", MODERN_VERSION),
    "answer a request for a method you do not have with HTTP 404 and the JSON-RPC error -32601 (with the request's id)",
    group="http", applies=_http_modern,
)
def unknown_method(s0: Probe) -> None:
    s = _hs(s0)
    reply = s.http("POST", _encode(s.request(UNKNOWN, {}, id="um-1")))
    _refused(reply, 404, "an unknown method", code=-32601)
    expect_error(reply.messages[0], -32601, "um-1")


@check(
    "http.get-delete", "http", SHOULD, "GET and DELETE get 405 on a server that speaks only 2026-07-28",
    _spec(f"{_MODERN_HTTP} (POST only; GET and DELETE SHOULD get 405)", MODERN_VERSION),
    "answer GET and DELETE with 405 Method Not Allowed (and Allow: POST) unless you also serve older versions",
    group="http", applies=_http_modern,
)
def get_delete(s0: Probe) -> None:
    s = _hs(s0)
    older = [v for v in s.cfg.discover_versions + s.cfg.handshake_versions if v != MODERN_VERSION]
    for method in ("GET", "DELETE"):
        reply = s.http(method, b"", {"accept": "text/event-stream"} if method == "GET" else None, headers_only=True)
        if reply.status == 405:
            continue
        if reply.status == 0 or reply.status >= 500:
            raise CheckFailed(f"{method}: {reply.describe()}", level=MUST)
        if older and (reply.status < 500):
            continue  # it also serves the handshake era, where GET and DELETE mean something
        raise CheckFailed(f"{method} on a {MODERN_VERSION}-only server: expected 405, got {reply.describe()}")


def header_mismatch(s0: Probe) -> None:
    """``mcp.header-mismatch`` (registered in :mod:`.mcp`): headers that contradict the body."""
    s = _hs(s0)
    cases = [
        ("Mcp-Method: tools/list on a server/discover body", s.request("server/discover", {}, id="hx-1"), {"mcp-method": "tools/list"}),
        ("Mcp-Name: other on a tools/call body", s.request("tools/call", {"name": NO_SUCH_TOOL, "arguments": {}}, id="hx-2"),
         {"mcp-name": "sturdyrpc-check-other"}),
    ]
    for what, msg, hdrs in cases:
        _refused(s.http("POST", _encode(msg), hdrs), 400, what, code=-32020)
