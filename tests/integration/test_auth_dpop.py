"""The resource server's side of DPoP (RFC 9449 §4.3, §7, §9), end to end: JWTs bound by
``cnf.jkt`` from a real identity provider (tests/support/auth.py), the Streamable HTTP app under
uvicorn, and proofs made by the client's own :class:`~sturdyrpc.oauth.dpop.DPoPKey` (or forged
by hand where a check must fail). Each row changes one thing of a valid request."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl

import httpx
import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from support.auth import IdP, init_body, serve_app
from support.http import ACCEPT, free_port
from support.redis import unique_prefix

from sturdyrpc.auth import JWTVerifier, ResourceServer
from sturdyrpc.auth.dpop import DPoPChecker
from sturdyrpc.mcp import MCPServer
from sturdyrpc.mcp_http import mcp_http_app
from sturdyrpc.oauth.dpop import DPoPKey, access_token_hash, htu, jwk_thumbprint
from sturdyrpc.transports.asgi import HTTPSecurity

pytestmark = pytest.mark.timeout(120)

V = "2025-11-25"
NONCE = "server-nonce-1"


@pytest.fixture(scope="module")
def idp() -> Iterator[IdP]:
    provider = IdP()
    provider.add_key("k1")
    with provider.serve():
        yield provider


def _app(idp: IdP, resource: str, nonce: str | None) -> Any:
    server = MCPServer("dpop-test", "1.0")

    @server.tool()
    def ping() -> str:
        """Answers pong."""
        return "pong"

    rs = ResourceServer(JWTVerifier(idp.issuer, idp.jwks_url, resource), resource=resource,
                        authorization_servers=[idp.issuer], dpop=DPoPChecker(nonce=nonce))
    return mcp_http_app(server, security=HTTPSecurity(auth=rs), json_response=True)


@pytest.fixture(scope="module", params=[None, NONCE], ids=["no-nonce", "nonce"])
def served(idp: IdP, request: pytest.FixtureRequest) -> Iterator[tuple[str, str | None]]:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with serve_app(_app(idp, url, request.param), port):
        yield url, request.param


def _post(url: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(url, json=init_body(V), headers={"accept": ACCEPT, "mcp-protocol-version": V, **headers}, timeout=30)


#: (name, how the request differs from a valid one, whether it is accepted, the DPoP error)
CASES = [
    ("valid", {}, True, None),
    ("bearer scheme for a bound token", {"scheme": "Bearer"}, False, "invalid_token"),
    ("no proof", {"proof": None}, False, "invalid_dpop_proof"),
    ("two proofs", {"twice": True}, False, "invalid_dpop_proof"),
    ("another method", {"method": "GET"}, False, "invalid_dpop_proof"),
    ("another URL", {"url": "http://127.0.0.1:1/other"}, False, "invalid_dpop_proof"),
    ("another token's ath", {"ath_of": "some-other-token"}, False, "invalid_dpop_proof"),
    ("an old proof", {"iat": -1000}, False, "invalid_dpop_proof"),
    ("a key the token is not bound to", {"key": "other"}, False, "invalid_dpop_proof"),
    ("signed by another key than the jwk's", {"forged": True}, False, "invalid_dpop_proof"),
    ("the unbound token as DPoP", {"unbound": True}, False, "invalid_token"),
]


@pytest.mark.parametrize(("name", "change", "accepted", "error"), CASES, ids=[c[0] for c in CASES])
def test_a_bound_token_needs_a_valid_proof(idp: IdP, served: tuple[str, str | None], name: str, change: dict[str, Any],
                                           accepted: bool, error: str | None) -> None:
    url, nonce = served
    mine, theirs = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    key = DPoPKey(mine)
    token = idp.token(url, cnf=None if change.get("unbound") else {"jkt": key.thumbprint})
    signing, shown = (theirs, DPoPKey(theirs)) if change.get("key") == "other" else (mine, key)
    claims: dict[str, Any] = {"jti": f"jti-{time.time_ns()}", "htm": change.get("method", "POST"), "htu": htu(change.get("url", url)),
                              "iat": int(time.time()) + change.get("iat", 0),
                              "ath": access_token_hash(change.get("ath_of", token))}
    if nonce is not None:
        claims["nonce"] = nonce
    signer = ec.generate_private_key(ec.SECP256R1()) if change.get("forged") else signing
    proof = pyjwt.encode(claims, signer, algorithm="ES256", headers={"typ": "dpop+jwt", "jwk": shown.public_jwk})
    headers = {"authorization": f"{change.get('scheme', 'DPoP')} {token}"}
    if "proof" not in change:
        headers["dpop"] = f"{proof}, {proof}" if change.get("twice") else proof
    r = _post(url, headers)
    if accepted:
        assert r.status_code == 200, (r.status_code, r.headers, r.text)
        assert r.json()["result"]["protocolVersion"] == V
        assert r.headers.get("dpop-nonce") == nonce  # the current nonce on a success too (RFC 9449 §9)
    else:
        assert r.status_code == 401, (name, r.status_code, r.text)
        challenge = r.headers["www-authenticate"]
        assert challenge.startswith("DPoP ") and f'error="{error}"' in challenge, challenge
        assert "resource_metadata=" in challenge and "ES256" in challenge


def test_a_replayed_proof_is_refused_and_the_nonce_is_asked_for(idp: IdP, served: tuple[str, str | None]) -> None:
    url, nonce = served
    key = DPoPKey()
    token = idp.token(url, cnf={"jkt": key.thumbprint})
    auth = {"authorization": f"DPoP {token}"}
    if nonce is not None:
        first = _post(url, {**auth, "dpop": key.proof("POST", url, access_token=token)})
        assert first.status_code == 401 and first.headers["dpop-nonce"] == NONCE, first.headers
        assert 'error="use_dpop_nonce"' in first.headers["www-authenticate"]
    proof = key.proof("POST", url, access_token=token, nonce=nonce)
    assert _post(url, {**auth, "dpop": proof}).status_code == 200
    again = _post(url, {**auth, "dpop": proof})
    assert again.status_code == 401 and 'error="invalid_dpop_proof"' in again.headers["www-authenticate"]
    assert _post(url, {**auth, "dpop": key.proof("POST", url, access_token=token, nonce=nonce)}).status_code == 200


def test_an_unbound_token_stays_a_bearer_token(idp: IdP, served: tuple[str, str | None]) -> None:
    url, _ = served
    token = idp.token(url)
    assert _post(url, {"authorization": f"Bearer {token}"}).status_code == 200


@contextmanager
def _token_endpoint(idp: IdP, resource: str, nonce: str | None) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """An authorization server that issues DPoP-bound JWTs by ``client_credentials`` (signed
    with the identity provider's key, so the resource server's verifier takes them), asking for
    ``nonce`` in the proof when given; yields its issuer and the proofs' claims it saw."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, doc: Any, headers: dict[str, str] | None = None) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            for k, v in {"content-type": "application/json", "content-length": str(len(body)), **(headers or {})}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            base = f"http://127.0.0.1:{self.server.server_address[1]}"
            self._send(200, {"issuer": base, "authorization_endpoint": base + "/authorize", "token_endpoint": base + "/token",
                             "grant_types_supported": ["client_credentials"], "dpop_signing_alg_values_supported": ["ES256"]})

        def do_POST(self) -> None:
            form = dict(parse_qsl(self.rfile.read(int(self.headers["content-length"])).decode()))
            proof = self.headers.get("dpop")
            header = pyjwt.get_unverified_header(proof) if proof else {}
            claims = pyjwt.decode(proof, pyjwt.PyJWK(header["jwk"]).key, algorithms=["ES256"]) if proof else {}
            seen.append(claims)
            if nonce is not None and claims.get("nonce") != nonce:
                self._send(400, {"error": "use_dpop_nonce"}, {"dpop-nonce": nonce})
                return
            jkt = jwk_thumbprint(header["jwk"])
            token = idp.token(form["resource"], cnf={"jkt": jkt})
            self._send(200, {"access_token": token, "token_type": "DPoP", "expires_in": 300})

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("nonce", [None, "as-and-rs-nonce"])
def test_our_client_and_our_resource_server_agree(idp: IdP, nonce: str | None) -> None:
    """The library's client (client_credentials + DPoP) against the library's resource server,
    both asking for a nonce or neither: every request carries a fresh proof the server accepts."""
    from sturdyrpc.mcp_http.connect import connect_http
    from sturdyrpc.oauth import OAuthClientProvider
    from sturdyrpc.oauth.grants import ClientCredentialsGrant

    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with _token_endpoint(idp, url, nonce) as (issuer, seen):
        server = MCPServer("dpop-e2e", "1.0")

        @server.tool()
        def ping() -> str:
            """Answers pong."""
            return "pong"

        rs = ResourceServer(JWTVerifier(idp.issuer, idp.jwks_url, url), resource=url, authorization_servers=[issuer],
                            dpop=DPoPChecker(nonce=nonce))
        with serve_app(mcp_http_app(server, security=HTTPSecurity(auth=rs)), port):
            async def main() -> None:
                auth = OAuthClientProvider(grant=ClientCredentialsGrant("svc", "pw"), dpop=True)
                try:
                    async with connect_http(url, "2025-11-25", auth=auth) as client:
                        for _ in range(3):
                            assert (await client.call_tool("ping", {}))["content"][0]["text"] == "pong"
                finally:
                    await auth.aclose()
                assert auth.authorizations == 1

            asyncio.run(main())
    assert seen and all(c["htm"] == "POST" and c["htu"] == f"{issuer}/token" for c in seen)
    assert [c.get("nonce") for c in seen] == ([None, nonce] if nonce else [None])


def test_our_client_takes_the_nonce_a_success_carries(idp: IdP) -> None:
    """RFC 9449 §9: a nonce given on a successful answer is the one the next proof carries. A
    server that changes its nonce on every answer (and says so on the answer) refuses nothing
    after the first answer, however many requests follow."""
    from sturdyrpc.mcp_http.connect import connect_http
    from sturdyrpc.oauth import OAuthClientProvider
    from sturdyrpc.oauth.grants import ClientCredentialsGrant

    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    current = {"nonce": "n0", "n": 0}
    statuses: list[tuple[str, int]] = []
    with _token_endpoint(idp, url, None) as (issuer, _seen):
        server = MCPServer("dpop-rotating", "1.0")

        @server.tool()
        def ping() -> str:
            """Answers pong."""
            return "pong"

        rs = ResourceServer(JWTVerifier(idp.issuer, idp.jwks_url, url), resource=url, authorization_servers=[issuer],
                            dpop=DPoPChecker(nonce=lambda: current["nonce"]))
        inner = mcp_http_app(server, security=HTTPSecurity(auth=rs))

        async def rotating(scope: Any, receive: Any, send: Any) -> None:
            async def sending(message: Any) -> None:
                if message["type"] == "http.response.start" and scope["type"] == "http":
                    statuses.append((scope["path"], message["status"]))
                    if message["status"] < 300 and scope["path"] == "/mcp":  # a new nonce from now on, given on this answer
                        current["n"] += 1
                        current["nonce"] = f"n{current['n']}"
                        kept = [(k, v) for k, v in message.get("headers", []) if k != b"dpop-nonce"]
                        message = {**message, "headers": [*kept, (b"dpop-nonce", current["nonce"].encode())]}
                await send(message)
            await inner(scope, receive, sending)

        with serve_app(rotating, port):
            async def main() -> None:
                auth = OAuthClientProvider(grant=ClientCredentialsGrant("svc", "pw"), dpop=True)
                try:
                    async with connect_http(url, "2025-11-25", auth=auth) as client:
                        for _ in range(4):
                            assert (await client.call_tool("ping", {}))["content"][0]["text"] == "pong"
                finally:
                    await auth.aclose()

            asyncio.run(main())
    # the two 401s of the start (no token yet; then no nonce yet), none after the first answer
    first_ok = next(i for i, (path, st) in enumerate(statuses) if path == "/mcp" and st < 300)
    assert [st for _, st in statuses[:first_ok]].count(401) == 2, statuses
    assert all(st < 300 for _, st in statuses[first_ok:]) and len(statuses) - first_ok >= 6, statuses


@pytest.mark.parametrize("shared", ["memory", "redis", None])
def test_a_proof_replayed_to_another_worker(idp: IdP, shared: str | None, request: pytest.FixtureRequest) -> None:
    """Two workers (two apps, each its own resource server) behind one URL: with the ``jti``
    values in a store they share, a proof one of them accepted is refused by the other; each
    on its own (no store) remembers only its own. The shared store: the memory one, and a real
    redis-server as ``--store`` uses."""
    from sturdyrpc.store import open_store

    if shared == "redis":
        server = request.getfixturevalue("redis_server")
        store_url = server.url
    else:
        store_url = "memory"
    url = "http://127.0.0.1/mcp"  # the URL both serve under (a load balancer's): the proof's htu

    async def main() -> list[int]:
        store = None if shared is None else open_store(store_url, **({"prefix": unique_prefix()} if shared == "redis" else {}))
        apps = []
        for _ in range(2):
            server = MCPServer("dpop-workers", "1.0")
            rs = ResourceServer(JWTVerifier(idp.issuer, idp.jwks_url, url), resource=url,
                                authorization_servers=[idp.issuer], dpop=DPoPChecker(store=store))
            apps.append(mcp_http_app(server, security=HTTPSecurity(auth=rs), json_response=True))
        key = DPoPKey(ec.generate_private_key(ec.SECP256R1()))
        token = idp.token(url, cnf={"jkt": key.thumbprint})
        proof = key.proof("POST", url, access_token=token)
        headers = {"authorization": f"DPoP {token}", "dpop": proof, "accept": ACCEPT, "mcp-protocol-version": V,
                   "content-type": "application/json", "host": "127.0.0.1"}
        statuses = []
        try:
            for app in (apps[0], apps[1], apps[0]):
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                    r = await c.post("/mcp", content=json.dumps(init_body(V)), headers=headers)
                    statuses.append(r.status_code)
        finally:
            if store is not None:
                await store.aclose()
        return statuses

    statuses = asyncio.run(main())
    # the first worker accepts it; the replay is refused by the other worker only with the shared
    # store, and by the first worker itself always
    assert statuses == ([200, 401, 401] if shared else [200, 200, 401]), statuses


def test_a_shared_store_that_is_down_refuses_with_503(idp: IdP) -> None:
    """Whether a proof was seen cannot be told while the shared store is down: 503, never an
    unchecked 200."""
    from sturdyrpc.store import open_store

    url = "http://127.0.0.1/mcp"

    async def main() -> httpx.Response:
        store = open_store(f"redis://127.0.0.1:{free_port()}/0", op_timeout=1.0)
        server = MCPServer("dpop-down", "1.0")
        rs = ResourceServer(JWTVerifier(idp.issuer, idp.jwks_url, url), resource=url,
                            authorization_servers=[idp.issuer], dpop=DPoPChecker(store=store))
        app = mcp_http_app(server, security=HTTPSecurity(auth=rs), json_response=True)
        key = DPoPKey(ec.generate_private_key(ec.SECP256R1()))
        token = idp.token(url, cnf={"jkt": key.thumbprint})
        headers = {"authorization": f"DPoP {token}", "dpop": key.proof("POST", url, access_token=token), "accept": ACCEPT,
                   "mcp-protocol-version": V, "content-type": "application/json"}
        try:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
                return await c.post("/mcp", content=json.dumps(init_body(V)), headers=headers)
        finally:
            await store.aclose()

    r = asyncio.run(main())
    assert r.status_code == 503, (r.status_code, r.text)
