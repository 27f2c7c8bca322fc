"""The inspector's web app: the page, its static files and a small JSON API, as a bare ASGI app
behind the project's own HTTP layer (:mod:`sturdyrpc.transports.http_layer`).

Every request needs the random token of the URL the command prints (``?token=`` or the
``X-Inspect-Token`` header: the page sends the header, links carry the query), and a request
from a browser page of any origin but the inspector's own is refused (403): the ``Host`` and
``Origin`` checks are those of every sturdyrpc HTTP server, with no localhost origin allowed
beyond the inspector's. The API:

=========================  ==================================================================
``GET /api/state``         status, server info, tools, resources, templates, prompts, elicitations
``GET /api/timeline``      entries from ``since``, summary, state (waits up to ``wait`` s for a change after ``version``)
``GET /api/export``        the session as a ``trace --log`` file (for ``sturdyrpc replay``)
``POST /api/call``         ``{"kind": "tool"|"resource"|"prompt", "name", "arguments"}``
``POST /api/elicitation``  ``{"n", "response"}``: answer the server's elicitation request ``n``
``POST /api/check``        run ``sturdyrpc check`` on the server: its report
``POST /api/refresh``      list what the server offers again
=========================  ==================================================================
"""

from __future__ import annotations

import asyncio
import hmac
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from .. import codec
from ..transports.asgi import LOCAL_HOSTS, ASGIApp, HTTPRefusal, Receive, Scope, Send, header, refuse, respond
from ..transports.http_layer import BodyLimit, HostOriginCheck, Lifespan
from .connector import Inspector

__all__ = ["InspectorApp", "Signal", "TokenCheck", "build_app", "STATIC"]

_TYPES = {".html": b"text/html; charset=utf-8", ".js": b"text/javascript; charset=utf-8", ".css": b"text/css; charset=utf-8",
          ".svg": b"image/svg+xml", ".png": b"image/png"}
#: The front end, committed under the package (no build step, nothing from a CDN): name -> (bytes, type).
STATIC: dict[str, tuple[bytes, bytes]] = {
    f.name: (f.read_bytes(), _TYPES[f.name[f.name.rfind("."):]])
    for f in resources.files(__package__).joinpath("static").iterdir()
    if f.is_file() and f.name[f.name.rfind("."):] in _TYPES
}
_SECURITY_HEADERS = [
    (b"content-security-policy",
     b"default-src 'self'; img-src 'self' data:; media-src 'self' data:; object-src 'none'; frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]
#: The longest a timeline request waits for a new entry (seconds).
MAX_WAIT = 10.0
_NO_TOKEN = HTTPRefusal(403, -32600, "Forbidden: the inspector's token is missing or wrong")


class Signal:
    """Something new to show: :meth:`notify` (the session's ``on_entry``, the inspector's
    ``on_change``) wakes every :meth:`wait`."""

    def __init__(self) -> None:
        self._tick = asyncio.Event()
        #: How many times it was notified: a page that saw this many waits for the next one.
        self.version = 0

    def notify(self, *_: Any) -> None:
        self.version += 1
        self._tick.set()
        self._tick = asyncio.Event()

    async def wait(self, seen: int, timeout: float) -> None:
        """Return once notified more than ``seen`` times (at once if it already was), or after
        ``timeout`` seconds: a notification between two requests of a page is not missed."""
        if self.version != seen:
            return
        try:
            await asyncio.wait_for(self._tick.wait(), timeout)
        except TimeoutError:
            pass


class InspectorApp:
    """The routes of the module docstring (the checks in front of it: :func:`build_app`);
    ``signal``: notified of new entries and changes, which wakes the waiting timeline requests;
    ``deadline``: seconds after which a request without a reply is marked unanswered."""

    def __init__(self, inspector: Inspector, token: str, signal: Signal, *, deadline: float = 10.0) -> None:
        self.inspector = inspector
        self.token = token  # the page is served with it (its links and requests carry it)
        self.signal = signal
        #: Seconds after which a request without a reply is marked unanswered.
        self.deadline = deadline

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        method, path = scope["method"], scope["path"]
        if method == "GET":
            await self._get(path, query, send)
        elif method == "POST" and path.startswith("/api/"):
            await self._post(path, scope.get("sturdyrpc.body", b""), send)
        else:
            await refuse(send, HTTPRefusal(405, -32600, "Method not allowed"))

    async def _get(self, path: str, query: dict[str, list[str]], send: Send) -> None:
        if path in ("/", "/index.html"):
            page = STATIC["index.html"][0].replace(b"__TOKEN__", self.token.encode())
            await respond(send, 200, page, STATIC["index.html"][1], extra=_SECURITY_HEADERS)
        elif path.startswith("/static/") and path[8:] in STATIC:
            body, kind = STATIC[path[8:]]
            await respond(send, 200, body, kind, extra=_SECURITY_HEADERS)
        elif path == "/api/state":
            await self._json(send, self.inspector.state())
        elif path == "/api/timeline":
            await self._timeline(query, send)
        elif path == "/api/export":
            name = b'attachment; filename="sturdyrpc-inspect.ndjson"'
            await respond(send, 200, self.inspector.session.export(), b"application/x-ndjson",
                          extra=[*_SECURITY_HEADERS, (b"content-disposition", name)])
        else:
            await refuse(send, HTTPRefusal(404, -32600, "Not found"))

    async def _timeline(self, query: dict[str, list[str]], send: Send) -> None:
        try:
            since = int((query.get("since") or ["0"])[0])
            wait = min(MAX_WAIT, float((query.get("wait") or ["0"])[0]))
            seen = int((query.get("version") or ["-1"])[0])
        except ValueError:
            await refuse(send, HTTPRefusal(400, -32600, "since, wait and version must be numbers"))
            return
        session = self.inspector.session
        if wait > 0:
            await self.signal.wait(seen, wait)
        version = self.signal.version  # before reading: a change from now on is the next answer's
        await self._json(send, {"entries": session.since(since), "next": len(session.entries), "summary": session.summary(deadline=self.deadline),
                                "state": self.inspector.state(), "version": version})

    async def _post(self, path: str, body: bytes, send: Send) -> None:
        try:
            data = codec.decode(body) if body else {}
        except codec.DecodeFailure:
            data = None
        if type(data) is not dict:
            await refuse(send, HTTPRefusal(400, -32700, "the body must be a JSON object"))
            return
        inspector = self.inspector
        if path == "/api/call":
            args = data.get("arguments") or {}
            if type(data.get("kind")) is not str or type(data.get("name")) is not str or type(args) is not dict:
                await refuse(send, HTTPRefusal(400, -32602, "kind and name must be strings, arguments an object"))
                return
            await self._json(send, await inspector.call(data["kind"], data["name"], args))
        elif path == "/api/elicitation":
            n, response = data.get("n"), data.get("response")
            ok = type(n) is int and type(response) is dict and inspector.answer(n, response)
            await self._json(send, {"answered": ok}, 200 if ok else 409)
        elif path == "/api/check":
            await self._json(send, await inspector.run_check())
        elif path == "/api/refresh":
            await inspector.refresh()
            await self._json(send, inspector.state())
        else:
            await refuse(send, HTTPRefusal(404, -32600, "Not found"))

    @staticmethod
    async def _json(send: Send, value: Any, status: int = 200) -> None:
        await respond(send, status, codec.encode(value), b"application/json", extra=_SECURITY_HEADERS)


class TokenCheck:
    """Refuses (403) a request that does not carry ``token``: in the ``X-Inspect-Token`` header,
    or else the ``token`` query parameter (links and the page's static files carry it so)."""

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            sent = header(scope, b"x-inspect-token")
            if sent is None:
                query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
                sent = (query.get("token") or [""])[0].encode("latin-1", "replace")
            if not hmac.compare_digest(sent, self.token):
                await refuse(send, _NO_TOKEN)
                return
        await self.app(scope, receive, send)


def build_app(app: InspectorApp, *, port: int, max_body_bytes: int = 4 * 1024 * 1024) -> ASGIApp:
    """``app`` behind the checks every request passes, outermost first: ``Host`` a localhost name
    and ``Origin`` (when a browser sends one) exactly ``http://127.0.0.1:PORT``, then the token,
    then the body (bounded, read only for a request that passed both)."""
    inner: ASGIApp = BodyLimit(app, max_bytes=max_body_bytes, timeout=30.0)
    inner = TokenCheck(inner, token=app.token)
    inner = HostOriginCheck(inner, allowed_hosts=LOCAL_HOSTS, allowed_origins=(f"http://127.0.0.1:{port}",),
                            allow_localhost_origins=False)
    return Lifespan(inner)
