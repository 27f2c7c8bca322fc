"""Checking a running HTTP server (``--url``): the probe over raw HTTP (the checks are in :mod:`.http`).

:class:`HTTPProbe` is a :class:`~.probe.Probe` whose "process" is the URL: every message
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
from typing import Any, cast

import httpx
import msgspec

from .config import MODERN_VERSION, Config
from .driver import Frame, ServerProcess, _decode_line, trim
from .model import CheckFailed
from .probe import Probe

__all__ = ["HTTPProbe", "HTTPReply"]

_encode = msgspec.json.encode
#: How long ``send`` waits for a POST to complete before moving on (a slow call keeps running).
HOLD = 0.5
_NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri",
          # SEP-2663: the tasks extension's requests are routed by task id
          "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId"}


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


class HTTPProbe(Probe):
    """A conversation with an HTTP JSON-RPC / MCP endpoint (one MCP session in the handshake era)."""

    def __init__(self, cfg: Config, *, handshake: bool = True) -> None:
        assert cfg.url
        self.url = cfg.url
        self.endpoint = _HTTPEndpoint()
        self.session_id: str | None = None
        self.negotiated: str | None = None
        self.last: HTTPReply | None = None
        self.client = httpx.Client(timeout=httpx.Timeout(max(cfg.timeout, 1.0)), follow_redirects=False, trust_env=False)
        # The endpoint reads like a server process (frames, next_message, stop): the probe's
        # bookkeeping and exchanges work on it unchanged.
        super().__init__(cfg, handshake=handshake, endpoint=cast(ServerProcess, self.endpoint))

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
