"""Checking a running HTTP server (``--url``): the session layer over raw HTTP, and the HTTP checks.

:class:`HTTPSession` is a :class:`~.session.Session` whose "process" is the URL: every message
the checks send becomes its own ``POST`` (made with httpx, nothing of the project's MCP client
in between), and every JSON-RPC message that comes back -- a JSON body whatever the status, or
the ``data`` of each SSE event -- is queued exactly like a stdout line, so the message-level
checks run unchanged. The status line of each response is kept too, for the report.

The checker never starts anything for ``--url``, never follows redirects (so it talks to the
URL given and nothing else), ignores proxy settings from the environment, and gives every
request a timeout.
"""

from __future__ import annotations

import base64
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import msgspec

from .driver import Frame, _decode_line, trim
from .model import CheckFailed, CheckSkipped, Level
from .rules import NULL, check, expect_error, leaks
from .session import HANDSHAKE_VERSIONS, MODERN_VERSION, Config, Session

__all__ = ["HTTPSession", "HTTPReply", "is_local_url"]

_encode = msgspec.json.encode
MUST, SHOULD = Level.MUST, Level.SHOULD
UNKNOWN = "sturdyrpc.check/unknown-method"
NO_SUCH_TOOL = "sturdyrpc-check-no-such-tool"
FOREIGN_ORIGIN = "http://sturdyrpc-check.invalid"
#: How long ``send`` waits for a POST to complete before moving on (a slow call keeps running).
HOLD = 0.5
_NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def is_local_url(url: str) -> bool:
    """True for http(s) URLs on 127.0.0.1, ::1 or localhost."""
    host = (urlsplit(url).hostname or "").lower()
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def _header_value(v: str) -> str:
    """A header value; text that is not plain visible ASCII uses the ``=?base64?...?=`` form."""
    if v and all(0x20 <= ord(c) <= 0x7E for c in v) and v == v.strip():
        return v
    return "=?base64?" + base64.b64encode(v.encode()).decode() + "?="


@dataclass
class HTTPReply:
    """One HTTP response: status, headers, raw body and the JSON-RPC messages it carried."""

    status: int
    headers: httpx.Headers
    body: bytes
    messages: list[Any] = field(default_factory=list)
    error: str = ""  # a transport failure (no response at all)

    @property
    def ctype(self) -> str:
        return str(self.headers.get("content-type", "")).split(";", 1)[0].strip().lower()

    def describe(self) -> str:
        if self.error:
            return f"no HTTP response: {self.error}"
        return f"HTTP {self.status} {self.ctype or '(no content-type)'}" + ("" if self.body else " (no body)")


class _HTTPEndpoint:
    """Stands in for the server process: the frames seen, the message queue, and a 'stopped' flag."""

    def __init__(self) -> None:
        self.messages: queue.Queue[Frame | None] = queue.Queue()
        self.frames: list[Frame] = []
        self.noise: list[Frame] = []
        self.stdout_closed = threading.Event()  # set once the session is stopped
        self.stdin_closed = False

    def add(self, frame: Frame, *, queue_it: bool = True) -> None:
        self.frames.append(frame)
        if frame.is_message and queue_it:
            self.messages.put(frame)

    def next_message(self, timeout: float) -> Frame | None:
        try:
            frame = self.messages.get(timeout=timeout) if timeout > 0 else self.messages.get_nowait()
        except queue.Empty:
            return None
        if frame is None:
            self.messages.put(None)
        return frame

    def alive(self) -> bool:
        return not self.stdout_closed.is_set()

    def wait(self, timeout: float) -> int | None:
        return None

    def stderr_tail(self, limit: int = 2000) -> str:
        return ""

    def stop(self) -> None:
        if not self.stdout_closed.is_set():
            self.stdout_closed.set()
            self.messages.put(None)


@dataclass
class _SSE:
    """What an SSE stream carried: the data of each event, the last event id, the retry hint."""

    datas: list[bytes] = field(default_factory=list)
    last_id: str | None = None
    retry_ms: int | None = None


def _sse_read(chunks: Any) -> _SSE:
    """Parse an SSE byte stream (events without data, like priming events, carry no message)."""
    out = _SSE()
    buf = b""
    data: list[bytes] = []
    for chunk in chunks:
        buf += chunk
        while True:
            i = buf.find(b"\n")
            if i < 0:
                break
            line, buf = buf[:i].rstrip(b"\r"), buf[i + 1 :]
            if not line:
                if data:
                    out.datas.append(b"\n".join(data))
                data = []
                continue
            name, _, value = line.partition(b":")
            value = value[1:] if value.startswith(b" ") else value
            if name == b"data":
                data.append(value)
            elif name == b"id":
                out.last_id = value.decode("utf-8", "replace")
            elif name == b"retry" and value.isdigit():
                out.retry_ms = int(value)
    if data:
        out.datas.append(b"\n".join(data))
    return out


class HTTPSession(Session):
    """A conversation with an HTTP JSON-RPC / MCP endpoint (one MCP session in the handshake era)."""

    def __init__(self, cfg: Config, *, handshake: bool = True) -> None:
        assert cfg.url
        self.cfg = cfg
        self.url = cfg.url
        self.endpoint = _HTTPEndpoint()
        self.proc = self.endpoint  # type: ignore[assignment]
        self.spoiled = False
        import itertools

        self._ids = itertools.count(1)
        self._done: set[tuple[str, Any]] = set()
        self._sentinels: set[str] = set()
        self.sent: list[bytes] = []
        self._sent_mark = 0
        self._frame_mark = 0
        self.aborted = threading.Event()
        self.initialize_result: dict[str, Any] | None = None
        self.session_id: str | None = None
        self.negotiated: str | None = None
        self.last: HTTPReply | None = None
        self.client = httpx.Client(timeout=httpx.Timeout(max(cfg.timeout, 1.0)), follow_redirects=False, trust_env=False)
        try:
            if handshake and cfg.is_mcp and not cfg.modern:
                self._handshake()
            elif handshake:
                self._ready()
        except BaseException:
            self.close()
            raise
        self.mark()

    # -- the wire ----------------------------------------------------------------------------

    def headers_for(self, body: bytes) -> dict[str, str]:
        """The headers a correct client sends with ``body`` in the current state."""
        h = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        if self.session_id:
            h["mcp-session-id"] = self.session_id
        try:
            msg = msgspec.json.decode(body)
        except (msgspec.DecodeError, ValueError, RecursionError):
            msg = None
        params = msg.get("params") if type(msg) is dict else None
        meta = params.get("_meta") if type(params) is dict else None
        version = meta.get("io.modelcontextprotocol/protocolVersion") if type(meta) is dict else None
        if type(version) is str or self.cfg.modern:
            h["mcp-protocol-version"] = version if type(version) is str else (self.cfg.version or MODERN_VERSION)
            if type(msg) is dict and type(msg.get("method")) is str:
                if "id" in msg:
                    h["mcp-method"] = _header_value(msg["method"])
                key = _NAMED.get(msg["method"])
                if key and type(params) is dict and type(params.get(key)) is str:
                    h["mcp-name"] = _header_value(params[key])
        elif self.negotiated and self.negotiated >= "2025-06-18":
            h["mcp-protocol-version"] = self.negotiated
        return h

    def http(
        self,
        method: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        *,
        drop: tuple[str, ...] = (),
        timeout: float | None = None,
        queue_it: bool = False,
        headers_only: bool = False,
        record: bool = True,
    ) -> HTTPReply:
        """One raw HTTP request. ``headers`` override the usual ones (``headers_for``), ``drop`` removes some."""
        h = self.headers_for(body) if method == "POST" else {k: v for k, v in self.headers_for(b"").items() if k != "content-type"}
        h.update({k.lower(): v for k, v in (headers or {}).items()})
        for k in drop:
            h.pop(k.lower(), None)
        wait = self.cfg.timeout if timeout is None else timeout
        if record:
            notes = [f"{k}: {v}" for k, v in (headers or {}).items()] + [f"no {k}" for k in drop]
            self.sent.append(f"{method}{' [' + '; '.join(notes) + ']' if notes else ''} ".encode() + body[:4096])
        t0 = time.monotonic()
        try:
            with self.client.stream(method, self.url, content=body or None, headers=h, timeout=httpx.Timeout(wait)) as r:
                sid = r.headers.get("mcp-session-id")
                if sid and self.session_id is None and r.status_code < 300 and method == "POST" and queue_it:
                    self.session_id = sid
                ctype = r.headers.get("content-type", "").split(";", 1)[0].strip().lower()
                reply = HTTPReply(r.status_code, r.headers, b"")
                if headers_only:
                    self.endpoint.add(Frame(reply.describe().encode(), time.monotonic(), error="http"), queue_it=False)
                    self.last = reply
                    return reply
                sse: _SSE | None = None
                if ctype == "text/event-stream":
                    chunks: list[bytes] = []
                    sse = _sse_read(_collect(r.iter_raw(), chunks, t0 + max(wait, 1.0)))
                    datas = sse.datas
                    reply.body = b"".join(chunks)
                else:
                    reply.body = r.read()
                    is_json = ctype in ("application/json", "") or ctype.endswith("+json")
                    datas = [reply.body] if reply.body.strip() and is_json else []
                self.endpoint.add(Frame(reply.describe().encode(), time.monotonic(), error="http"), queue_it=False)
                if reply.body.strip() and not datas:
                    self.endpoint.add(Frame(reply.body, time.monotonic(), error="http-body"), queue_it=False)
                for data in datas:
                    frame = _decode_line(data.strip(), True, time.monotonic())
                    if frame.is_message:
                        reply.messages.append(frame.value)
                    self.endpoint.add(frame, queue_it=queue_it and sse is None)
            if sse is not None:
                if method == "POST" and sse.last_id is not None:
                    self._resume(body, reply, sse, t0 + wait)
                if queue_it:
                    self._queue_stream(body, reply.messages)
        except httpx.TimeoutException:
            reply = HTTPReply(0, httpx.Headers(), b"", error=f"no complete response within {wait:.1f}s")
            self.endpoint.add(Frame(reply.describe().encode(), time.monotonic(), error="http"), queue_it=False)
        except httpx.HTTPError as exc:
            reply = HTTPReply(0, httpx.Headers(), b"", error=f"{type(exc).__name__}: {exc}"[:200])
            self.endpoint.add(Frame(reply.describe().encode(), time.monotonic(), error="http"), queue_it=False)
        self.last = reply
        return reply

    def _queue_stream(self, body: bytes, messages: list[Any]) -> None:
        """Queue what an SSE stream carried. The replies to a batch may come as separate events:
        they are gathered into one array, as the same batch gets on a pipe."""
        try:
            sent = msgspec.json.decode(body)
        except (msgspec.DecodeError, ValueError, RecursionError):
            sent = None
        if type(sent) is list:
            replies = [x for m in messages for x in (m if type(m) is list else [m]) if not (type(x) is dict and "method" in x)]
            others = [m for m in messages if type(m) is dict and "method" in m]
            for m in others:
                self.endpoint.messages.put(Frame(_encode(m), time.monotonic(), m, True))
            if replies:
                self.endpoint.messages.put(Frame(_encode(replies), time.monotonic(), replies, True))
            return
        for m in messages:
            self.endpoint.messages.put(Frame(_encode(m), time.monotonic(), m, True))

    def _resume(self, body: bytes, reply: HTTPReply, sse: _SSE, deadline: float) -> None:
        """The stream ended before the reply (the server closed it, SEP-1699): wait ``retry``,
        then GET with ``Last-Event-ID``, as a client MUST; a few attempts, within the deadline."""
        try:
            sent = msgspec.json.decode(body)
        except (msgspec.DecodeError, ValueError, RecursionError):
            return
        wanted = {m.get("id") for m in (sent if type(sent) is list else [sent]) if type(m) is dict and "method" in m and "id" in m}
        wanted.discard(None)
        for _ in range(5):
            got = {m.get("id") for m in reply.messages if type(m) is dict and "method" not in m}
            if not wanted - got or sse.last_id is None:
                return
            time.sleep(min((sse.retry_ms or 1000) / 1000, 2.0, max(deadline - time.monotonic(), 0)))
            if time.monotonic() >= deadline:
                return
            h = {k: v for k, v in self.headers_for(b"").items() if k != "content-type"}
            h.update({"accept": "text/event-stream", "last-event-id": sse.last_id})
            try:
                with self.client.stream("GET", self.url, headers=h, timeout=httpx.Timeout(max(deadline - time.monotonic(), 0.5))) as r:
                    self.endpoint.add(Frame(f"HTTP {r.status_code} (GET, Last-Event-ID: {sse.last_id})".encode(), time.monotonic(), error="http"), queue_it=False)
                    if r.status_code != 200:
                        return
                    more = _sse_read(_collect(r.iter_raw(), [], deadline))
            except httpx.HTTPError:
                return
            for data in more.datas:
                frame = _decode_line(data.strip(), True, time.monotonic())
                if frame.is_message:
                    reply.messages.append(frame.value)
                self.endpoint.add(frame, queue_it=False)
            sse = _SSE(last_id=more.last_id or sse.last_id, retry_ms=more.retry_ms or sse.retry_ms)
            if more.last_id is None:
                return

    def _post_quietly(self, body: bytes, wait: float) -> None:
        try:
            self.http("POST", body, timeout=wait, queue_it=True, record=False)
        except Exception:  # e.g. the session was closed while this POST ran: nobody waits for it
            pass

    def send(self, data: bytes | Any, *, newline: bool = True, timeout: float | None = None) -> None:
        """POST ``data`` (raw bytes as given, or a JSON value) as one HTTP request; its replies are
        queued as they come. Waits for the response at most a moment, so a slow call keeps running
        while the check goes on (as on a pipe)."""
        if self.proc.stdout_closed.is_set():
            raise CheckFailed("the session was stopped")
        if not isinstance(data, bytes):
            data = _encode(data)
        self.sent.append(data)
        body = data[:-1] if data.endswith(b"\n") else data
        wait = max(self.cfg.timeout, 10.0) if timeout is None else max(timeout, self.cfg.timeout)
        t = threading.Thread(target=self._post_quietly, args=(body, wait), daemon=True, name="check-http-post")
        t.start()
        t.join(HOLD)

    def exit_note(self) -> str:
        if self.last is not None and self.last.error:
            return f" ({self.last.describe()})"
        return ""

    def window(self, limit: int = 5) -> tuple[list[str], list[str]]:
        sent, _ = super().window(limit)
        received = [
            trim(f.raw) for f in self.proc.frames[self._frame_mark :]
            if not (type(f.value) is dict and type(f.value.get("id")) is str and f.value["id"] in self._sentinels)
        ]
        # A sentinel's status line comes just before its reply; keep the report short.
        if len(received) > 2 * limit:
            received = received[: 2 * limit] + [f"... and {len(received) - 2 * limit} more"]
        return sent, received

    def initialize(self, version: str, id: Any = "init-1", timeout: float | None = None) -> dict[str, Any] | None:
        reply = super().initialize(version, id, timeout)
        result = reply.get("result") if reply else None
        if type(result) is dict and type(result.get("protocolVersion")) is str:
            self.negotiated = result["protocolVersion"]
        return reply

    def close(self) -> None:
        if self.session_id and not self.proc.stdout_closed.is_set():
            try:
                self.client.delete(self.url, headers={"mcp-session-id": self.session_id}, timeout=2.0)
            except httpx.HTTPError:
                pass
        self.proc.stop()
        self.client.close()


def _collect(chunks: Any, into: list[bytes], deadline: float) -> Any:
    for c in chunks:
        into.append(c)
        yield c
        if time.monotonic() > deadline:
            return


# =============================================================================================
# The HTTP checks (area "http"). Spec files are relative to docs/specification/ of the MCP spec.
# =============================================================================================

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


def _hs(s: Session) -> HTTPSession:
    if not isinstance(s, HTTPSession):
        raise CheckSkipped("HTTP only")
    return s


def _probe(s: HTTPSession, id: str) -> dict[str, Any]:
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


def _fresh_session(s: HTTPSession) -> tuple[HTTPReply, str | None]:
    """initialize without a session id (a new session); returns the reply and the issued id."""
    version = s.cfg.version or HANDSHAKE_VERSIONS[-1]
    body = _encode({"jsonrpc": "2.0", "id": s.new_id("init"), "method": "initialize",
                    "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "sturdyrpc-check", "version": "0.1.0"}}})
    reply = s.http("POST", body, drop=("mcp-session-id", "mcp-protocol-version"))
    sid = reply.headers.get("mcp-session-id")
    if sid:
        hdrs = {"mcp-session-id": sid}
        if version >= "2025-06-18":
            hdrs["mcp-protocol-version"] = version
        s.http("POST", _encode({"jsonrpc": "2.0", "method": "notifications/initialized"}), hdrs)
    return reply, sid


def _session_id_or_skip(s: HTTPSession) -> tuple[str, dict[str, str]]:
    reply, sid = _fresh_session(s)
    if reply.status != 200:
        raise CheckFailed(f"initialize was not served: {reply.describe()}")
    if not sid:
        raise CheckSkipped("the server issues no Mcp-Session-Id (stateless)")
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
def notification_accepted(s0: Session) -> None:
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
def response_accepted(s0: Session) -> None:
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
def request_reply(s0: Session) -> None:
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
def accept(s0: Session) -> None:
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
def parse_error(s0: Session) -> None:
    s = _hs(s0)
    reply = s.http("POST", b'{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]')
    if reply.status >= 500 or reply.status == 0:
        raise CheckFailed(f"invalid JSON caused {reply.describe()}")
    if reply.ctype != "application/json" or not reply.messages:
        raise CheckFailed(f"expected a JSON-RPC error as application/json, got {reply.describe()}: {trim(reply.body, 160)}")
    expect_error(reply.messages[0], -32700, NULL, id_may_be_omitted=s.cfg.is_mcp)


@check(
    "http.session-id", "http", MUST, "Mcp-Session-Id from initialize is visible ASCII (and unguessable)",
    _spec(f"{_TRANSPORT} (Session Management: visible ASCII 0x21-0x7E, cryptographically secure)", "2025-03-26..2025-11-25"),
    "issue a random id (e.g. secrets.token_urlsafe(32)) with the InitializeResult; only characters 0x21-0x7E",
    group="http", applies=_http_handshake,
)
def session_id(s0: Session) -> None:
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
    _spec(f"{_TRANSPORT} (Session Management: servers that require a session id SHOULD answer 400 without it)", "2025-03-26..2025-11-25"),
    "answer requests (other than initialize) that lack Mcp-Session-Id with 400 Bad Request",
    group="http", applies=_http_handshake,
)
def session_required(s0: Session) -> None:
    s = _hs(s0)
    _, hdrs = _session_id_or_skip(s)
    reply = s.http("POST", _encode(s.request("ping", id="sr-1")), {k: v for k, v in hdrs.items() if k != "mcp-session-id"}, drop=("mcp-session-id",))
    _refused(reply, 400, "a request without Mcp-Session-Id")


@check(
    "http.session-unknown", "http", MUST, "a request with an unknown session id gets 404",
    _spec(f"{_TRANSPORT} (Session Management: an ended or unknown session -> 404 Not Found)", "2025-03-26..2025-11-25"),
    "answer 404 for a session id you do not know, so that the client re-initializes",
    group="http", applies=_http_handshake,
)
def session_unknown(s0: Session) -> None:
    s = _hs(s0)
    _, hdrs = _session_id_or_skip(s)
    hdrs["mcp-session-id"] = "sturdyrpc-check-no-such-session-0000"
    _refused(s.http("POST", _encode(s.request("ping", id="su-1")), hdrs), 404, "a request with an unknown Mcp-Session-Id")


@check(
    "http.session-delete", "http", MUST, "DELETE ends the session (later requests get 404), or is refused with 405",
    _spec(f"{_TRANSPORT} (Session Management: DELETE; the server MAY answer 405)", "2025-03-26..2025-11-25"),
    "on DELETE with Mcp-Session-Id end that session and answer 200/204; afterwards answer its id with 404",
    group="http", applies=_http_handshake,
)
def session_delete(s0: Session) -> None:
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
def get_stream(s0: Session) -> None:
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
def protocol_version(s0: Session) -> None:
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
def origin(s0: Session) -> None:
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
def body_too_large(s0: Session) -> None:
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
def no_leak(s0: Session) -> None:
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
def header_missing(s0: Session) -> None:
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
def unknown_method(s0: Session) -> None:
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
def get_delete(s0: Session) -> None:
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


def header_mismatch(s0: Session) -> None:
    """``mcp.header-mismatch`` (registered in :mod:`.mcp`): headers that contradict the body."""
    s = _hs(s0)
    cases = [
        ("Mcp-Method: tools/list on a server/discover body", s.request("server/discover", {}, id="hx-1"), {"mcp-method": "tools/list"}),
        ("Mcp-Name: other on a tools/call body", s.request("tools/call", {"name": NO_SUCH_TOOL, "arguments": {}}, id="hx-2"),
         {"mcp-name": "sturdyrpc-check-other"}),
    ]
    for what, msg, hdrs in cases:
        _refused(s.http("POST", _encode(msg), hdrs), 400, what, code=-32020)
