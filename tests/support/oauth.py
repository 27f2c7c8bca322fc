"""A real authorization server and a protected MCP server on 127.0.0.1, for the OAuth client tests.

One ASGI app, run on uvicorn in a thread (``serve_protected``):

- ``/as/...``: an authorization server with the issuer ``BASE/as`` (a path: discovery must use
  path insertion), RFC 8414 metadata, dynamic registration, an authorization endpoint that
  approves at once (redirect with a code), a token endpoint checking PKCE S256, the client's
  authentication, ``redirect_uri`` and ``resource``, rotating refresh tokens, and a JWKS whose
  keys can be rotated (:meth:`AuthServer.rotate`): access tokens are ES256 JWTs.
- ``/mcp``: the sturdyrpc MCP demo behind a resource server that verifies those JWTs against the
  JWKS (fetched over HTTP, fetched again for an unknown ``kid``), checks ``aud`` and the scopes each
  method needs, and answers 401 / 403 with RFC 6750 / RFC 9728 challenges; its protected resource
  metadata is at ``/.well-known/oauth-protected-resource/mcp``.

Everything the authorization server saw is in ``AuthServer.events`` (no secrets are kept there).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode

import httpx
import jwt
import uvicorn
from cryptography.hazmat.primitives.asymmetric import ec

from sturdyrpc.demos.mcp_http import make_demo_app

Scope = dict[str, Any]


def _s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


@dataclass
class AuthServer:
    base: str
    token_ttl: int = 3600
    auth_methods: list[str] = field(default_factory=lambda: ["none", "client_secret_basic", "client_secret_post"])
    advertise_pkce: bool = True
    issuer_override: str | None = None
    #: the user refuses: the redirect carries error=access_denied
    deny: bool = False
    #: Client ID Metadata Documents: an https client_id is accepted as a public client (a real
    #: server fetches the document and checks its redirect_uris; this one trusts loopback ones)
    cimd: bool = False
    #: RFC 9207: the ``iss`` its authorization responses carry (a mix-up attack sends another)
    response_iss: str | None = None
    #: scopes the server will never grant (a user who refuses part of the request)
    withheld: set[str] = field(default_factory=set)
    #: members put over those of its metadata document (endpoints elsewhere)
    metadata_extra: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    clients: dict[str, dict[str, Any]] = field(default_factory=dict)
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    refresh_tokens: dict[str, dict[str, Any]] = field(default_factory=dict)
    keys: dict[str, Any] = field(default_factory=dict)
    kid: str = ""

    def __post_init__(self) -> None:
        self.rotate()

    @property
    def issuer(self) -> str:
        return self.base + "/as"

    def rotate(self) -> None:
        """A new signing key; the old one leaves the JWKS (tokens signed with it stop verifying)."""
        self.kid = secrets.token_hex(4)
        self.keys = {self.kid: ec.generate_private_key(ec.SECP256R1())}

    def jwks(self) -> dict[str, Any]:
        out = []
        for kid, key in self.keys.items():
            jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
            jwk.update(kid=kid, use="sig", alg="ES256")
            out.append(jwk)
        return {"keys": out}

    def metadata(self) -> dict[str, Any]:
        md: dict[str, Any] = {
            "issuer": self.issuer_override or self.issuer,
            "authorization_endpoint": self.issuer + "/authorize",
            "token_endpoint": self.issuer + "/token",
            "registration_endpoint": self.issuer + "/register",
            "jwks_uri": self.issuer + "/jwks",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_methods_supported": self.auth_methods,
            "scopes_supported": ["mcp:read", "mcp:write", "mcp:admin"],
            "authorization_response_iss_parameter_supported": True,
        }
        if self.advertise_pkce:
            md["code_challenge_methods_supported"] = ["S256"]
        if self.cimd:
            md["client_id_metadata_document_supported"] = True
        md.update(self.metadata_extra)
        return md

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.events if k == kind)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for k, e in self.events if k == kind]

    # ---------------------------------------------------------------- endpoints

    def register(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.events.append(("register", dict(body)))
        method = body.get("token_endpoint_auth_method", "client_secret_basic")
        client_id = "client-" + secrets.token_hex(4)
        info = {"client_id": client_id, "redirect_uris": body.get("redirect_uris", []), "token_endpoint_auth_method": method}
        if method != "none":
            info["client_secret"] = secrets.token_urlsafe(16)
        self.clients[client_id] = info
        return 201, info

    def authorize(self, query: dict[str, str]) -> tuple[int, dict[str, str], str]:
        self.events.append(("authorize", dict(query)))
        cid = query.get("client_id", "")
        if self.cimd and cid.startswith("https://") and query.get("redirect_uri", "").startswith("http://127.0.0.1:"):
            self.clients.setdefault(cid, {"client_id": cid, "redirect_uris": [query["redirect_uri"]], "token_endpoint_auth_method": "none"})
        client = self.clients.get(cid)
        if client is None or query.get("redirect_uri") not in client["redirect_uris"]:
            return 400, {}, "unknown client or redirect_uri"
        if query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            return 400, {}, "PKCE S256 required"
        if self.deny:
            loc = query["redirect_uri"] + "?" + urlencode({"error": "access_denied", "state": query.get("state", ""),
                                                           "iss": self.response_iss or self.issuer})
            return 302, {"location": loc}, ""
        scopes = [s for s in query.get("scope", "").split() if s not in self.withheld]
        code = secrets.token_urlsafe(16)
        self.codes[code] = {"client_id": client["client_id"], "redirect_uri": query["redirect_uri"],
                            "challenge": query["code_challenge"], "scope": " ".join(scopes), "resource": query.get("resource")}
        loc = query["redirect_uri"] + "?" + urlencode({"code": code, "state": query.get("state", ""),
                                                       "iss": self.response_iss or self.issuer})
        return 302, {"location": loc}, ""

    def _client_auth(self, form: dict[str, str], authorization: str | None) -> tuple[dict[str, Any] | None, str]:
        if authorization and authorization.startswith("Basic "):
            from urllib.parse import unquote

            cid, _, secret = base64.b64decode(authorization[6:]).decode().partition(":")
            cid, secret = unquote(cid), unquote(secret)
            c = self.clients.get(cid)
            ok = c is not None and c.get("client_secret") == secret and c["token_endpoint_auth_method"] == "client_secret_basic"
            return (c if ok else None), "client_secret_basic"
        c = self.clients.get(form.get("client_id", ""))
        if "client_secret" in form:
            ok = c is not None and c.get("client_secret") == form["client_secret"] and c["token_endpoint_auth_method"] == "client_secret_post"
            return (c if ok else None), "client_secret_post"
        ok = c is not None and c["token_endpoint_auth_method"] == "none"
        return (c if ok else None), "none"

    def _issue(self, client_id: str, scope: str, resource: str | None) -> dict[str, Any]:
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": "user-1", "aud": resource, "client_id": client_id, "scope": scope,
                  "iat": now, "exp": now + max(self.token_ttl, 60), "jti": secrets.token_hex(8)}
        token = jwt.encode(claims, self.keys[self.kid], algorithm="ES256", headers={"kid": self.kid})
        rt = secrets.token_urlsafe(16)
        self.refresh_tokens[rt] = {"client_id": client_id, "scope": scope, "resource": resource}
        out = {"access_token": token, "token_type": "Bearer", "expires_in": self.token_ttl, "refresh_token": rt}
        if scope:
            out["scope"] = scope
        return out

    def token(self, form: dict[str, str], authorization: str | None) -> tuple[int, dict[str, Any]]:
        client, method = self._client_auth(form, authorization)
        grant = form.get("grant_type")
        self.events.append(("token", {"grant_type": grant, "auth_method": method, "resource": form.get("resource"),
                                      "has_verifier": "code_verifier" in form, "scope": form.get("scope")}))
        if client is None:
            return 401, {"error": "invalid_client"}
        if grant == "authorization_code":
            code = self.codes.pop(form.get("code", ""), None)
            if (code is None or code["client_id"] != client["client_id"] or code["redirect_uri"] != form.get("redirect_uri")
                    or _s256(form.get("code_verifier", "")) != code["challenge"] or code["resource"] != form.get("resource")):
                return 400, {"error": "invalid_grant"}
            return 200, self._issue(client["client_id"], code["scope"], code["resource"])
        if grant == "refresh_token":
            rt = self.refresh_tokens.pop(form.get("refresh_token", ""), None)  # rotated: one use each
            if rt is None or rt["client_id"] != client["client_id"] or rt["resource"] != form.get("resource"):
                return 400, {"error": "invalid_grant"}
            return 200, self._issue(client["client_id"], rt["scope"], rt["resource"])
        return 400, {"error": "unsupported_grant_type"}


@dataclass
class ResourceServer:
    base: str
    auth: AuthServer
    #: scopes each JSON-RPC method needs (others: ``default``)
    needs: dict[str, list[str]] = field(default_factory=lambda: {"tools/call": ["mcp:read", "mcp:write"]})
    default: list[str] = field(default_factory=lambda: ["mcp:read"])
    scope_in_challenge: bool = True
    resource_override: str | None = None
    #: the ``resource_metadata`` its challenges name instead of its own document (an attacker's choice)
    metadata_url_override: str | None = None
    #: members put over those of its protected resource metadata
    prm_extra: dict[str, Any] = field(default_factory=dict)
    jwks_fetches: int = 0
    seen: list[tuple[str, int]] = field(default_factory=list)
    _jwks: dict[str, Any] = field(default_factory=dict)

    @property
    def resource(self) -> str:
        return self.base + "/mcp"

    def prm(self) -> dict[str, Any]:
        return {"resource": self.resource_override or self.resource, "authorization_servers": [self.auth.issuer],
                "scopes_supported": ["mcp:read"], **self.prm_extra}

    def challenge(self, scopes: list[str], error: str | None = None) -> str:
        parts = [f'resource_metadata="{self.metadata_url_override or self.base + "/.well-known/oauth-protected-resource/mcp"}"']
        if self.scope_in_challenge:
            parts.append(f'scope="{" ".join(scopes)}"')
        if error:
            parts.append(f'error="{error}"')
        return "Bearer " + ", ".join(parts)

    def forget_keys(self) -> None:
        """Drop the cached JWKS (as when its cache lifetime ends)."""
        self._jwks = {}

    async def _key(self, kid: str) -> Any:
        if kid not in self._jwks:
            async with httpx.AsyncClient() as c:  # an unknown kid: the keys may have been rotated
                self.jwks_fetches += 1
                doc = (await c.get(self.auth.issuer + "/jwks")).json()
            self._jwks = {k["kid"]: jwt.PyJWK(k).key for k in doc["keys"]}
        return self._jwks.get(kid)

    async def check(self, authorization: str | None, method: str | None) -> tuple[int, str | None]:
        needed = self.needs.get(method or "", self.default)
        if not authorization or not authorization.startswith("Bearer "):
            return 401, self.challenge(needed)
        token = authorization[7:]
        try:
            key = await self._key(jwt.get_unverified_header(token).get("kid", ""))
            if key is None:
                raise jwt.InvalidTokenError("unknown key")
            claims = jwt.decode(token, key, algorithms=["ES256"], audience=self.resource, issuer=self.auth.issuer)
        except jwt.InvalidTokenError:
            return 401, self.challenge(needed, "invalid_token")
        granted = set(str(claims.get("scope", "")).split())
        if not set(needed) <= granted:
            return 403, self.challenge(needed, "insufficient_scope")
        return 200, None


def make_app(auth: AuthServer, rs: ResourceServer) -> Callable[..., Any]:
    mcp = make_demo_app()

    async def read_body(receive: Callable[..., Any]) -> bytes:
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                return body

    async def send_json(send: Callable[..., Any], status: int, doc: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(doc).encode() if doc is not None else b""
        h = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        h += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
        await send({"type": "http.response.start", "status": status, "headers": h})
        await send({"type": "http.response.body", "body": data})

    async def app(scope: Scope, receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        query = dict(parse_qsl(scope.get("query_string", b"").decode()))
        if path == "/.well-known/oauth-protected-resource/mcp":
            return await send_json(send, 200, rs.prm())
        if path == "/.well-known/oauth-authorization-server/as":
            return await send_json(send, 200, auth.metadata())
        if path == "/as/jwks":
            return await send_json(send, 200, auth.jwks())
        if path == "/as/register" and method == "POST":
            status, doc = auth.register(json.loads(await read_body(receive)))
            return await send_json(send, status, doc)
        if path == "/as/authorize":
            status, h, text = auth.authorize(query)
            return await send_json(send, status, {"error": text} if text else None, h)
        if path == "/as/token" and method == "POST":
            form = dict(parse_qsl((await read_body(receive)).decode()))
            status, doc = auth.token(form, headers.get("authorization"))
            return await send_json(send, status, doc)
        if path == "/mcp":
            body = await read_body(receive)
            try:
                rpc = json.loads(body) if body else None
            except ValueError:
                rpc = None
            rpc_method = rpc.get("method") if isinstance(rpc, dict) else None
            status, challenge = await rs.check(headers.get("authorization"), rpc_method)
            rs.seen.append((f"{method} {rpc_method}", status))
            if challenge is not None:
                return await send_json(send, status, {"error": "unauthorized"}, {"www-authenticate": challenge})
            sent = False

            async def replay() -> dict[str, Any]:
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            return await mcp(scope, replay, send)
        return await send_json(send, 404, {"error": "not found"})

    return app


@contextmanager
def serve_protected(port: int, **auth_options: Any) -> Iterator[tuple[AuthServer, ResourceServer]]:
    """The authorization server and the protected MCP server at ``http://127.0.0.1:port``."""
    base = f"http://127.0.0.1:{port}"
    auth = AuthServer(base, **auth_options)
    rs = ResourceServer(base, auth)
    server = uvicorn.Server(uvicorn.Config(make_app(auth, rs), host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True, name=f"oauth-test-{port}")
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield auth, rs
    finally:
        server.should_exit = True
        server.force_exit = True
        thread.join(10)


def browser_get(url: str) -> httpx.Response:
    """What a browser does with an authorization URL: follow the redirects (to the loopback listener)."""
    with httpx.Client(follow_redirects=True, timeout=30) as c:
        return c.get(url)


