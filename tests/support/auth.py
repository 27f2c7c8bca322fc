"""A real identity provider for the auth tests: RSA/EC keys generated here, JWTs signed with
PyJWT, a JWKS and an RFC 7662 introspection endpoint served over HTTP on 127.0.0.1 (keys can
be rotated and the endpoints broken mid-test), and our ASGI apps served by uvicorn in a thread."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from support.http import serve_in_thread


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def public_jwk(key: Any, kid: str) -> dict[str, Any]:
    alg = jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else jwt.algorithms.ECAlgorithm
    jwk = json.loads(alg.to_jwk(key.public_key()))
    jwk.update({"kid": kid, "use": "sig"})
    return dict(jwk)


class IdP:
    """Keys, a JWKS document and introspection answers, served by :meth:`serve`."""

    def __init__(self) -> None:
        self.keys: dict[str, Any] = {}
        self.published: list[str] = []  # kids in the JWKS
        self.jwks_fetches = 0
        self.jwks_status = 200
        self.jwks_body: bytes | None = None  # overrides the document (garbage tests)
        self.introspection: dict[str, dict[str, Any]] = {}  # token -> answer
        self.introspection_status = 200
        self.introspection_client = ("mcp-server", "s3cret")
        self.introspection_calls = 0
        self.port = 0
        self.issuer = ""

    def add_key(self, kid: str, key: Any = None, *, publish: bool = True) -> Any:
        self.keys[kid] = key if key is not None else rsa_key()
        if publish:
            self.published.append(kid)
        return self.keys[kid]

    def rotate(self, old: str, new: str) -> None:
        """Publish ``new`` and withdraw ``old`` (a new key must exist first: :meth:`add_key` with publish=False)."""
        self.published = [k for k in self.published if k != old] + [new]

    def jwks(self) -> dict[str, Any]:
        return {"keys": [public_jwk(self.keys[k], k) for k in self.published]}

    def sign(self, claims: dict[str, Any], kid: str | None, *, alg: str | None = None, key: Any = None,
             headers: dict[str, Any] | None = None) -> str:
        k = key if key is not None else self.keys[kid] if kid is not None else None
        if alg is None:
            alg = "RS256" if isinstance(k, rsa.RSAPrivateKey) else "ES256"
        h = dict(headers or {})
        if kid is not None:
            h["kid"] = kid
        return jwt.encode(claims, k, algorithm=alg, headers=h)

    def claims(self, audience: str, *, scope: str | None = "mcp:tools", sub: str = "alice", **extra: Any) -> dict[str, Any]:
        now = int(time.time())
        c: dict[str, Any] = {"iss": self.issuer, "aud": audience, "sub": sub, "iat": now, "exp": now + 300,
                             "client_id": "client-1"}
        if scope is not None:
            c["scope"] = scope
        c.update(extra)
        return {k: v for k, v in c.items() if v is not None}

    def token(self, audience: str, kid: str = "k1", **kw: Any) -> str:
        return self.sign(self.claims(audience, **kw), kid)

    @contextmanager
    def serve(self) -> Iterator[IdP]:
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path != "/jwks":
                    self._send(404, b"{}")
                    return
                idp.jwks_fetches += 1
                body = idp.jwks_body if idp.jwks_body is not None else json.dumps(idp.jwks()).encode()
                self._send(idp.jwks_status, body)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                form = parse_qs(self.rfile.read(length).decode())
                if self.path != "/introspect":
                    self._send(404, b"{}")
                    return
                idp.introspection_calls += 1
                user, secret = idp.introspection_client
                expected = "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()
                if self.headers.get("authorization") != expected:
                    self._send(401, b'{"error":"invalid_client"}')
                    return
                if idp.introspection_status != 200:
                    self._send(idp.introspection_status, b"{}")
                    return
                token = form.get("token", [""])[0]
                self._send(200, json.dumps(idp.introspection.get(token, {"active": False})).encode())

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = server.server_address[1]
        self.issuer = f"http://127.0.0.1:{self.port}"
        thread = threading.Thread(target=server.serve_forever, daemon=True, name="test-idp")
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/jwks"

    @property
    def introspection_url(self) -> str:
        return f"{self.issuer}/introspect"


@contextmanager
def serve_app(app: Any, port: int | None = None) -> Iterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 in a thread; yields ``http://127.0.0.1:PORT``."""
    with serve_in_thread(app, port) as base:
        yield base


def replies(r: Any) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a response, JSON or SSE."""
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        out = []
        for line in r.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                out.append(json.loads(line[5:]))
        return out
    body = r.json()
    return body if isinstance(body, list) else [body]


def init_body(version: str = "2025-11-25") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


class DripServer:
    """An HTTP endpoint on 127.0.0.1 that answers every request (any method, any path) with
    ``200`` and ``body`` sent ``repeat`` times, ``chunk`` bytes (one by default) every ``interval``
    seconds: dripped, each read of a client returns something, so only a deadline for the whole
    answer cuts it off; with ``interval=0`` and a large ``repeat``, a flood that only a size cap
    cuts off. ``chunked``: no ``Content-Length`` (chunked transfer coding), so the client learns
    the size only by reading. Served by an asyncio loop in a thread; ``connections`` counts the
    requests it got, ``sent`` the body bytes it wrote before the client went away."""

    def __init__(self, body: bytes = b'{"keys": []}' * 64, interval: float = 0.3, chunk: int = 1, *, repeat: int = 1,
                 chunked: bool = False) -> None:
        self.body = body
        self.interval = interval
        self.chunk = chunk
        self.repeat = repeat
        self.chunked = chunked
        self.connections = 0
        self.sent = 0
        self.port = 0
        self._stopping = False

    async def _handle(self, reader: Any, writer: Any) -> None:
        import asyncio

        try:
            await reader.readuntil(b"\r\n\r\n")
            self.connections += 1
            framing = b"transfer-encoding: chunked" if self.chunked else b"content-length: %d" % (len(self.body) * self.repeat)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n%s\r\n\r\n" % framing)
            for _ in range(self.repeat):
                for i in range(0, len(self.body), self.chunk):
                    if self._stopping:
                        return
                    piece = self.body[i:i + self.chunk]
                    writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if self.chunked else piece)
                    await writer.drain()
                    self.sent += len(piece)
                    if self.interval:
                        await asyncio.sleep(self.interval)
            if self.chunked:
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    @contextmanager
    def serve(self) -> Iterator[DripServer]:
        import asyncio

        loop = asyncio.new_event_loop()
        started = threading.Event()
        holder: dict[str, Any] = {}

        async def main() -> None:
            stop = holder["stop"] = asyncio.Event()
            server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            started.set()
            await stop.wait()
            self._stopping = True  # each drip ends at its next byte
            server.close()
            drips = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            if drips:
                await asyncio.wait(drips, timeout=5)

        def run() -> None:
            loop.run_until_complete(main())
            loop.close()

        thread = threading.Thread(target=run, daemon=True, name="test-drip")
        thread.start()
        assert started.wait(10), "the drip server did not start"
        try:
            yield self
        finally:
            loop.call_soon_threadsafe(holder["stop"].set)
            thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
