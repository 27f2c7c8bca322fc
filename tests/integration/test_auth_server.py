"""The MCP server as an OAuth 2.1 resource server (docs/AUTH.md), end to end: a real identity
provider (keys generated here, a JWKS and an introspection endpoint over HTTP on 127.0.0.1),
real JWTs signed with PyJWT, and the Streamable HTTP app under uvicorn."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import jwt as pyjwt
import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from support.auth import IdP, ec_key, init_body, replies, serve_app
from support.http import ACCEPT, free_port

from sturdyrpc.auth import (
    FunctionVerifier,
    IntrospectionVerifier,
    InvalidToken,
    JWKSCache,
    JWTVerifier,
    Principal,
    ResourceServer,
)
from sturdyrpc.mcp import MCPContext, MCPServer
from sturdyrpc.mcp_http import mcp_http_app
from sturdyrpc.request_context import request_principal
from sturdyrpc.transports.asgi import HTTPSecurity

pytestmark = pytest.mark.timeout(120)

V = "2025-11-25"
UNAUTHORIZED = b'{"jsonrpc":"2.0","error":{"code":-32600,"message":"Unauthorized"}}'
FORBIDDEN = b'{"jsonrpc":"2.0","error":{"code":-32600,"message":"Forbidden: insufficient scope"}}'


class Calls:
    def __init__(self) -> None:
        self.seen: list[str] = []


def make_server(calls: Calls) -> MCPServer:
    server = MCPServer("auth-test", "1.0")

    @server.tool()
    async def whoami() -> str:
        """The verified principal of the request."""
        calls.seen.append("whoami")
        p = request_principal()
        assert isinstance(p, Principal)
        return f"{p.subject}|{p.client_id}|{' '.join(sorted(p.scopes))}"

    @server.tool(scopes=["files:write"])
    async def write(text: str) -> str:
        """Needs files:write."""
        calls.seen.append("write")
        return f"wrote {text}"

    @server.resource("file:///secret.txt", scopes=["files:read"])
    def secret() -> str:
        calls.seen.append("secret")
        return "s3cret"

    @server.resource("file:///public.txt")
    def public() -> str:
        return "hello"

    @server.prompt(scopes=["files:read"])
    def summarize(topic: str) -> str:
        calls.seen.append("summarize")
        return f"Summarize {topic}"

    return server


@pytest.fixture
def idp() -> Iterator[IdP]:
    provider = IdP()
    provider.add_key("k1")
    with provider.serve():
        yield provider


def jwt_app(idp: IdP, port: int, calls: Calls, *, scopes: tuple[str, ...] = (), refresh_interval: float = 0.0,
            **options: Any) -> Any:
    resource = f"http://127.0.0.1:{port}/mcp"
    verifier = JWTVerifier(idp.issuer, idp.jwks_url, resource, jwks=JWKSCache(idp.jwks_url, refresh_interval=refresh_interval))
    rs = ResourceServer(verifier, resource=resource, authorization_servers=[idp.issuer], scopes=scopes,
                        scopes_supported=["files:read", "files:write"])
    options.setdefault("json_response", True)
    return mcp_http_app(make_server(calls), security=HTTPSecurity(auth=rs), **options)


class Client:
    """One MCP session over HTTP with a given token."""

    def __init__(self, c: httpx.Client, url: str, token: str | None) -> None:
        self.c, self.url, self.token, self.sid, self.next_id = c, url, token, None, 1

    def headers(self) -> dict[str, str]:
        h = {"accept": ACCEPT, "mcp-protocol-version": V}
        if self.token is not None:
            h["authorization"] = f"Bearer {self.token}"
        if self.sid is not None:
            h["mcp-session-id"] = self.sid
        return h

    def initialize(self) -> httpx.Response:
        r = self.c.post(self.url, json=init_body(V), headers=self.headers())
        if r.status_code == 200:
            self.sid = r.headers.get("mcp-session-id")  # none when the server is stateless
            self.c.post(self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers())
        return r

    def request(self, method: str, params: dict[str, Any] | None = None) -> httpx.Response:
        self.next_id += 1
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            body["params"] = params
        return self.c.post(self.url, json=body, headers=self.headers())

    def result(self, method: str, params: dict[str, Any] | None = None) -> Any:
        r = self.request(method, params)
        assert r.status_code == 200, (r.status_code, r.text)
        return replies(r)[-1]["result"]


# ---------------------------------------------------------------------------- metadata


def test_metadata_served_at_both_well_known_paths_without_a_token(idp: IdP) -> None:
    port = free_port()
    with serve_app(jwt_app(idp, port, Calls(), scopes=("mcp",)), port) as base, httpx.Client(timeout=10) as c:
        for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
            r = c.get(base + path)
            assert r.status_code == 200 and r.headers["content-type"] == "application/json"
            assert r.json() == {
                "resource": f"{base}/mcp",
                "authorization_servers": [idp.issuer],
                "scopes_supported": ["mcp", "files:read", "files:write"],
                "bearer_methods_supported": ["header"],
            }
        assert c.post(base + "/.well-known/oauth-protected-resource/mcp").status_code == 405
        # other well-known paths are not ours: the endpoint's normal refusal (401 first: no token)
        assert c.get(base + "/.well-known/oauth-protected-resource/other").status_code == 401


# ---------------------------------------------------------------------------- 401


def test_missing_token_gets_the_exact_challenge(idp: IdP) -> None:
    port = free_port()
    with serve_app(jwt_app(idp, port, Calls()), port) as base, httpx.Client(timeout=10) as c:
        r = c.post(base + "/mcp", json=init_body(), headers={"accept": ACCEPT})
        assert r.status_code == 401 and r.content == UNAUTHORIZED
        assert r.headers["www-authenticate"] == (
            f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp", scope="files:read files:write"'
        )
        # GET and DELETE need the token too
        assert c.get(base + "/mcp", headers={"accept": "text/event-stream"}).status_code == 401
        assert c.delete(base + "/mcp").status_code == 401


def test_bad_tokens_are_401_with_no_internals_and_reach_no_handler(idp: IdP) -> None:
    port = free_port()
    calls = Calls()
    app = jwt_app(idp, port, calls)
    aud = f"http://127.0.0.1:{port}/mcp"
    stranger = IdP()  # another issuer's key: never published by ours
    stranger.add_key("k1")
    stranger.issuer = idp.issuer
    idp.add_key("ec1", ec_key())
    idp.add_key("hidden", publish=False)
    public_pem = idp.keys["k1"].public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    now = int(time.time())
    tokens = {
        "garbage": "not-a-jwt",
        "three garbage parts": "abc.def.ghi",
        "other issuer": idp.sign(idp.claims(aud, iss="https://evil.example"), "k1"),
        "other audience": idp.sign(idp.claims("https://other.example/mcp"), "k1"),
        "expired": idp.sign(idp.claims(aud, exp=now - 3600, iat=now - 7200), "k1"),
        "not yet valid": idp.sign(idp.claims(aud, nbf=now + 3600), "k1"),
        "no exp": idp.sign({k: v for k, v in idp.claims(aud).items() if k != "exp"}, "k1"),
        "no sub": idp.sign({k: v for k, v in idp.claims(aud).items() if k != "sub"}, "k1"),
        "unknown kid": idp.sign(idp.claims(aud), "hidden"),
        "signed by a stranger with our kid": stranger.sign(idp.claims(aud), "k1"),
        "alg none": pyjwt.encode(idp.claims(aud), None, algorithm="none", headers={"kid": "k1"}),
        "HS256 with the public key as secret": _hs256(idp.claims(aud), public_pem),
        "RS256 header on an EC key": _swap_alg(idp.sign(idp.claims(aud), "ec1"), "RS256"),
        "tampered payload": _tamper(idp.sign(idp.claims(aud), "k1")),
    }
    with serve_app(app, port) as base, httpx.Client(timeout=10) as c:
        for name, tok in tokens.items():
            r = c.post(base + "/mcp", json=init_body(), headers={"accept": ACCEPT, "authorization": f"Bearer {tok}"})
            assert r.status_code == 401, name
            assert r.content == UNAUTHORIZED, name  # fixed body: no reason, no key id, no exception text
            challenge = r.headers["www-authenticate"]
            assert challenge.endswith(', error="invalid_token"') and "hidden" not in challenge, (name, challenge)
        for value, error in (("Basic YWxpY2U6cHc=", None), ("Token abc", None), ("Bearer", "invalid_request"),
                             ("bearer", "invalid_request"), ("Bearer a b", "invalid_token"), ("Bearer " + "x" * 20000, "invalid_token")):
            r = c.post(base + "/mcp", json=init_body(), headers={"accept": ACCEPT, "authorization": value})
            assert r.status_code == 401 and r.content == UNAUTHORIZED, value
            assert r.headers["www-authenticate"].endswith('scope="files:read files:write"' if error is None else f'error="{error}"'), value
        # the token in the query string never counts
        good = idp.token(aud)
        r = c.post(base + f"/mcp?access_token={good}", json=init_body(), headers={"accept": ACCEPT})
        assert r.status_code == 401
    assert calls.seen == [] and not app.sessions


def _hs256(claims: dict[str, Any], secret: bytes) -> str:
    """An HS256 token keyed with the RSA public key's PEM (the classic key-confusion attack),
    built by hand: PyJWT itself refuses to use a PEM as an HMAC secret."""
    import base64
    import hashlib
    import hmac
    import json

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    body = b64(json.dumps(claims).encode())
    sig = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(sig)}"


def _swap_alg(token: str, alg: str) -> str:
    import base64
    import json

    head, body, sig = token.split(".")
    h = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    h["alg"] = alg
    new = base64.urlsafe_b64encode(json.dumps(h).encode()).rstrip(b"=").decode()
    return f"{new}.{body}.{sig}"


def _tamper(token: str) -> str:
    import base64
    import json

    head, body, sig = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["scope"] = "files:read files:write admin"
    new = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{head}.{new}.{sig}"


# ---------------------------------------------------------------------------- valid tokens, rotation


def test_valid_token_principal_reaches_the_handler_and_keys_rotate_mid_test(idp: IdP) -> None:
    port = free_port()
    calls = Calls()
    aud = f"http://127.0.0.1:{port}/mcp"
    with serve_app(jwt_app(idp, port, calls), port) as base, httpx.Client(timeout=10) as c:
        alice = Client(c, base + "/mcp", idp.token(aud, scope="files:read"))
        assert alice.initialize().status_code == 200
        res = alice.result("tools/call", {"name": "whoami", "arguments": {}})
        assert res["content"][0]["text"] == "alice|client-1|files:read"
        assert idp.jwks_fetches == 1  # cached from now on
        alice.result("tools/list")
        assert idp.jwks_fetches == 1

        # The issuer rotates: k2 published, k1 withdrawn. A k2 token makes the server refetch once.
        idp.add_key("k2", publish=False)
        idp.rotate("k1", "k2")
        bob = Client(c, base + "/mcp", idp.token(aud, kid="k2", sub="bob", scope="files:read"))
        assert bob.initialize().status_code == 200
        assert bob.result("tools/call", {"name": "whoami", "arguments": {}})["content"][0]["text"] == "bob|client-1|files:read"
        assert idp.jwks_fetches == 2
        # k1 is gone from the refreshed set: alice's old token no longer verifies
        r = alice.request("tools/list")
        assert r.status_code == 401 and r.content == UNAUTHORIZED
        # a token whose kid the issuer never published: one more refetch, then 401
        idp.add_key("k3", publish=False)
        r = c.post(base + "/mcp", json=init_body(), headers={"accept": ACCEPT, "authorization": f"Bearer {idp.token(aud, kid='k3')}"})
        assert r.status_code == 401 and r.content == UNAUTHORIZED
    assert calls.seen == ["whoami", "whoami"]


@pytest.mark.parametrize("json_response", [True, False])
def test_ctx_principal_follows_the_token_of_each_request(idp: IdP, json_response: bool) -> None:
    # A session opened with one token and used with a stepped-up one (same subject, more scopes):
    # ctx.principal is the latest request's, not a snapshot of the first.
    port = free_port()
    aud = f"http://127.0.0.1:{port}/mcp"
    server = make_server(Calls())

    @server.tool()
    async def my_scopes(ctx: MCPContext) -> str:
        """ctx.principal: the principal of the request at hand."""
        return " ".join(sorted(ctx.principal.scopes))

    rs = ResourceServer(JWTVerifier(idp.issuer, idp.jwks_url, aud), resource=aud, authorization_servers=[idp.issuer])
    app = mcp_http_app(server, security=HTTPSecurity(auth=rs), json_response=json_response)
    with serve_app(app, port) as base, httpx.Client(timeout=10) as c:
        s = Client(c, base + "/mcp", idp.token(aud, scope="files:read"))
        assert s.initialize().status_code == 200
        assert s.result("tools/call", {"name": "my_scopes", "arguments": {}})["content"][0]["text"] == "files:read"
        s.token = idp.token(aud, scope="files:read files:write")
        assert s.result("tools/call", {"name": "my_scopes", "arguments": {}})["content"][0]["text"] == "files:read files:write"


def test_unknown_kids_do_not_turn_into_a_flood_of_fetches(idp: IdP) -> None:
    port = free_port()
    aud = f"http://127.0.0.1:{port}/mcp"
    idp.add_key("never", publish=False)
    with serve_app(jwt_app(idp, port, Calls(), refresh_interval=3600), port) as base, httpx.Client(timeout=10) as c:
        assert Client(c, base + "/mcp", idp.token(aud)).initialize().status_code == 200
        for _ in range(5):
            r = c.post(base + "/mcp", json=init_body(), headers={"accept": ACCEPT, "authorization": f"Bearer {idp.token(aud, kid='never')}"})
            assert r.status_code == 401
        assert idp.jwks_fetches == 1


def test_jwks_failures_never_let_a_token_through(idp: IdP) -> None:
    port = free_port()
    calls = Calls()
    aud = f"http://127.0.0.1:{port}/mcp"
    good = idp.token(aud)
    with serve_app(jwt_app(idp, port, calls), port) as base, httpx.Client(timeout=10) as c:
        for status, body in ((500, None), (200, b"<html>not json</html>"), (200, b'{"keys": "nope"}'), (200, b'{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}')):
            idp.jwks_status, idp.jwks_body = status, body
            r = c.post(base + "/mcp", json=init_body(), headers={"accept": ACCEPT, "authorization": f"Bearer {good}"})
            assert r.status_code == 503, (status, body, r.text)
            assert r.headers["retry-after"] == "5"
            assert r.json() == {"jsonrpc": "2.0", "error": {"code": -32000, "message": "Service unavailable: the access token cannot be verified now"}}
        # the issuer is back: the same token works
        idp.jwks_status, idp.jwks_body = 200, None
        assert Client(c, base + "/mcp", good).initialize().status_code == 200
    assert calls.seen == []


# ---------------------------------------------------------------------------- scopes


def test_scopes_hide_what_the_token_may_not_use_and_calls_get_403_then_step_up(idp: IdP) -> None:
    port = free_port()
    calls = Calls()
    aud = f"http://127.0.0.1:{port}/mcp"
    with serve_app(jwt_app(idp, port, calls), port) as base, httpx.Client(timeout=10) as c:
        weak = Client(c, base + "/mcp", idp.token(aud, scope="mcp:tools"))
        assert weak.initialize().status_code == 200
        assert [t["name"] for t in weak.result("tools/list")["tools"]] == ["whoami"]
        assert [r["uri"] for r in weak.result("resources/list")["resources"]] == ["file:///public.txt"]
        assert weak.result("prompts/list")["prompts"] == []
        for method, params, needed in (
            ("tools/call", {"name": "write", "arguments": {"text": "x"}}, "files:write"),
            ("resources/read", {"uri": "file:///secret.txt"}, "files:read"),
            ("resources/subscribe", {"uri": "file:///secret.txt"}, "files:read"),
            ("prompts/get", {"name": "summarize", "arguments": {"topic": "t"}}, "files:read"),
            ("completion/complete", {"ref": {"type": "ref/prompt", "name": "summarize"}, "argument": {"name": "topic", "value": ""}}, "files:read"),
        ):
            r = weak.request(method, params)
            assert r.status_code == 403 and r.content == FORBIDDEN, method
            assert r.headers["www-authenticate"] == (
                f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp", '
                f'scope="{" ".join(sorted({"mcp:tools", needed}))}", error="insufficient_scope", '
                'error_description="The access token lacks a required scope"'
            ), method
        assert weak.result("resources/read", {"uri": "file:///public.txt"})["contents"][0]["text"] == "hello"
        assert calls.seen == []

        # Step-up: a new token for the same user with more scopes works on the same session,
        # and the session's lists follow the token of the latest request.
        weak.token = idp.token(aud, scope="mcp:tools files:read files:write")
        assert sorted(t["name"] for t in weak.result("tools/list")["tools"]) == ["whoami", "write"]
        assert [p["name"] for p in weak.result("prompts/list")["prompts"]] == ["summarize"]
        assert weak.result("tools/call", {"name": "whoami", "arguments": {}})["content"][0]["text"] == (
            "alice|client-1|files:read files:write mcp:tools")
        assert weak.result("tools/call", {"name": "write", "arguments": {"text": "x"}})["content"][0]["text"] == "wrote x"
        assert weak.result("resources/read", {"uri": "file:///secret.txt"})["contents"][0]["text"] == "s3cret"
        assert weak.result("prompts/get", {"name": "summarize", "arguments": {"topic": "t"}})["messages"]
        # a token of another subject cannot use the session (sessions are bound to the principal)
        weak.token = idp.token(aud, sub="mallory", scope="mcp:tools files:read files:write")
        assert weak.request("tools/list").status_code == 404
        # and a narrower token for the same user narrows the lists again
        weak.token = idp.token(aud, scope="mcp:tools")
        assert [t["name"] for t in weak.result("tools/list")["tools"]] == ["whoami"]
    assert calls.seen == ["whoami", "write", "secret", "summarize"]


def test_a_2025_03_26_batch_with_one_forbidden_call_runs_nothing(idp: IdP) -> None:
    port = free_port()
    calls = Calls()
    aud = f"http://127.0.0.1:{port}/mcp"
    with serve_app(jwt_app(idp, port, calls), port) as base, httpx.Client(timeout=10) as c:
        s = Client(c, base + "/mcp", idp.token(aud, scope="files:read"))
        r = c.post(s.url, json=init_body("2025-03-26"), headers=s.headers())
        s.sid = r.headers["mcp-session-id"]
        h = {**s.headers(), "mcp-protocol-version": "2025-03-26"}
        c.post(s.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)
        batch = [{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}},
                 {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "write", "arguments": {"text": "x"}}}]
        r = c.post(s.url, json=batch, headers=h)
        assert r.status_code == 403 and 'scope="files:read files:write"' in r.headers["www-authenticate"]
        r = c.post(s.url, json=batch[:1], headers=h)
        assert r.status_code == 200 and replies(r)[0]["result"]["content"][0]["text"] == "alice|client-1|files:read"
    assert calls.seen == ["whoami"]


def test_new_session_lists_with_its_token_scopes(idp: IdP) -> None:
    port = free_port()
    aud = f"http://127.0.0.1:{port}/mcp"
    with serve_app(jwt_app(idp, port, Calls(), json_response=False), port) as base, httpx.Client(timeout=10) as c:
        strong = Client(c, base + "/mcp", idp.token(aud, scope="files:read files:write"))
        assert strong.initialize().status_code == 200
        assert sorted(t["name"] for t in strong.result("tools/list")["tools"]) == ["whoami", "write"]
        assert [p["name"] for p in strong.result("prompts/list")["prompts"]] == ["summarize"]


def test_server_wide_scope_is_required_on_every_request(idp: IdP) -> None:
    port = free_port()
    aud = f"http://127.0.0.1:{port}/mcp"
    with serve_app(jwt_app(idp, port, Calls(), scopes=("mcp",)), port) as base, httpx.Client(timeout=10) as c:
        r = c.post(base + "/mcp", json=init_body(), headers={"accept": ACCEPT})
        assert r.status_code == 401 and 'scope="mcp"' in r.headers["www-authenticate"]  # 401s ask for the required scopes
        r = c.post(base + "/mcp", json=init_body(), headers={"accept": ACCEPT, "authorization": f"Bearer {idp.token(aud, scope='files:read')}"})
        assert r.status_code == 403 and r.content == FORBIDDEN
        assert r.headers["www-authenticate"] == (
            f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp", scope="files:read mcp", '
            'error="insufficient_scope", error_description="The access token lacks a required scope"'
        )
        assert Client(c, base + "/mcp", idp.token(aud, scope="mcp")).initialize().status_code == 200


def test_2026_07_28_requests_are_checked_the_same_way(idp: IdP) -> None:
    port = free_port()
    calls = Calls()
    aud = f"http://127.0.0.1:{port}/mcp"
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}

    def post(c: httpx.Client, token: str, method: str, name: str | None, **params: Any) -> httpx.Response:
        h = {"accept": ACCEPT, "mcp-protocol-version": "2026-07-28", "mcp-method": method, "authorization": f"Bearer {token}"}
        if name is not None:
            h["mcp-name"] = name
            params["name"] = name
        return c.post(base + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}, headers=h)

    with serve_app(jwt_app(idp, port, calls), port) as base, httpx.Client(timeout=10) as c:
        weak, strong = idp.token(aud, scope="files:read"), idp.token(aud, scope="files:write")
        r = post(c, weak, "tools/call", "write", arguments={"text": "x"})
        assert r.status_code == 403 and 'error="insufficient_scope"' in r.headers["www-authenticate"]
        assert [t["name"] for t in post(c, weak, "tools/list", None).json()["result"]["tools"]] == ["whoami"]
        r = post(c, strong, "tools/call", "write", arguments={"text": "x"})
        assert r.status_code == 200 and r.json()["result"]["content"][0]["text"] == "wrote x"
        assert post(c, "junk", "tools/list", None).status_code == 401
    assert calls.seen == ["write"]


def test_listen_agrees_only_to_updates_of_resources_the_token_may_read(idp: IdP) -> None:
    # 2026-07-28 subscriptions/listen: the acknowledgement leaves out a resource whose scopes the
    # token lacks, so its updates never reach the caller.
    port = free_port()
    aud = f"http://127.0.0.1:{port}/mcp"
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    body = {"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen",
            "params": {"notifications": {"resourceSubscriptions": ["file:///secret.txt", "file:///public.txt"]}, "_meta": meta}}

    def acknowledged(c: httpx.Client, token: str) -> Any:
        h = {"accept": ACCEPT, "mcp-protocol-version": "2026-07-28", "mcp-method": "subscriptions/listen",
             "authorization": f"Bearer {token}"}
        with c.stream("POST", base + "/mcp", json=body, headers=h) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith("data:") and line[5:].strip():
                    msg = json.loads(line[5:])
                    assert msg["method"] == "notifications/subscriptions/acknowledged"
                    return msg["params"]["notifications"]
        raise AssertionError("no acknowledgement")

    with serve_app(jwt_app(idp, port, Calls(), json_response=False), port) as base, httpx.Client(timeout=10) as c:
        assert acknowledged(c, idp.token(aud, scope="files:write")) == {"resourceSubscriptions": ["file:///public.txt"]}
        assert acknowledged(c, idp.token(aud, scope="files:read")) == {
            "resourceSubscriptions": ["file:///secret.txt", "file:///public.txt"]}


# ---------------------------------------------------------------------------- introspection, custom verifiers


def test_introspection_verifier_for_opaque_tokens(idp: IdP) -> None:
    port = free_port()
    calls = Calls()
    resource = f"http://127.0.0.1:{port}/mcp"
    now = int(time.time())
    idp.introspection = {
        "opaque-good": {"active": True, "sub": "carol", "client_id": "c9", "scope": "files:read", "aud": resource, "exp": now + 300},
        "opaque-inactive": {"active": False},
        "opaque-other-aud": {"active": True, "sub": "carol", "aud": "https://other.example/mcp", "exp": now + 300},
        "opaque-expired": {"active": True, "sub": "carol", "aud": resource, "exp": now - 3600},
        "opaque-no-aud": {"active": True, "sub": "carol", "exp": now + 300},
    }
    verifier = IntrospectionVerifier(idp.introspection_url, audience=resource, client_id="mcp-server", client_secret="s3cret")
    rs = ResourceServer(verifier, resource=resource, authorization_servers=[idp.issuer])
    app = mcp_http_app(make_server(calls), security=HTTPSecurity(auth=rs), json_response=True)
    with serve_app(app, port) as base, httpx.Client(timeout=10) as c:
        carol = Client(c, base + "/mcp", "opaque-good")
        assert carol.initialize().status_code == 200
        assert carol.result("tools/call", {"name": "whoami", "arguments": {}})["content"][0]["text"] == "carol|c9|files:read"
        for tok in ("opaque-inactive", "opaque-other-aud", "opaque-expired", "opaque-no-aud", "never-issued"):
            r = c.post(base + "/mcp", json=init_body(), headers={"accept": ACCEPT, "authorization": f"Bearer {tok}"})
            assert r.status_code == 401 and r.content == UNAUTHORIZED, tok
        # the introspection endpoint failing (or refusing our credentials) never lets a token through
        idp.introspection_status = 500
        assert carol.request("tools/list").status_code == 503
        idp.introspection_status = 200
        idp.introspection_client = ("mcp-server", "rotated")
        assert carol.request("tools/list").status_code == 503
    assert calls.seen == ["whoami"]


def test_pluggable_verifier_and_a_verifier_that_crashes() -> None:
    port = free_port()
    calls = Calls()
    resource = f"http://127.0.0.1:{port}/mcp"

    def verify(token: str) -> Principal | None:
        if token == "boom":
            raise RuntimeError("secret internal detail")
        return Principal("dave", frozenset({"files:write"}), "cli") if token == "letmein" else None

    rs = ResourceServer(FunctionVerifier(verify), resource=resource, authorization_servers=["https://idp.example"])
    app = mcp_http_app(make_server(calls), security=HTTPSecurity(auth=rs), json_response=True)
    with serve_app(app, port) as base, httpx.Client(timeout=10) as c:
        dave = Client(c, base + "/mcp", "letmein")
        assert dave.initialize().status_code == 200
        assert dave.result("tools/call", {"name": "write", "arguments": {"text": "y"}})["content"][0]["text"] == "wrote y"
        for tok in ("boom", "nope"):
            r = c.post(base + "/mcp", json=init_body(), headers={"accept": ACCEPT, "authorization": f"Bearer {tok}"})
            assert r.status_code == 401 and r.content == UNAUTHORIZED and b"secret" not in r.content
    assert calls.seen == ["write"]


def test_scopes_are_not_enforced_without_authentication() -> None:
    """On stdio or HTTP without auth there is no principal: everything is listed and callable."""
    import asyncio

    calls = Calls()
    app = mcp_http_app(make_server(calls), json_response=True)

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as c:
            h = {"accept": ACCEPT}
            r = await c.post("/mcp", json=init_body(), headers=h)
            h = {**h, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": V}
            r = await c.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=h)
            assert sorted(t["name"] for t in r.json()["result"]["tools"]) == ["whoami", "write"]
            r = await c.post("/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "write", "arguments": {"text": "z"}}}, headers=h)
            assert r.json()["result"]["content"][0]["text"] == "wrote z"
            # no metadata document without a ResourceServer
            assert (await c.get("/.well-known/oauth-protected-resource")).status_code == 404
            await app.aclose()

    asyncio.run(go())
    assert calls.seen == ["write"]


# ---------------------------------------------------------------------------- the CLI


def test_demo_cli_behind_an_identity_provider(idp: IdP) -> None:
    from support.http import demo_http_cmd, server_process

    port = free_port()
    aud = f"http://127.0.0.1:{port}/mcp"
    cmd = demo_http_cmd(port, mcp=True) + ["--auth-issuer", idp.issuer, "--auth-jwks", idp.jwks_url, "--auth-scopes", "mcp:tools"]
    with server_process(cmd, port), httpx.Client(timeout=10) as c:
        base = f"http://127.0.0.1:{port}"
        meta = c.get(base + "/.well-known/oauth-protected-resource/mcp").json()
        assert meta == {"resource": aud, "authorization_servers": [idp.issuer], "scopes_supported": ["mcp:tools"],
                        "bearer_methods_supported": ["header"]}
        r = c.post(base + "/mcp", json=init_body(), headers={"accept": ACCEPT})
        assert r.status_code == 401 and r.headers["www-authenticate"] == (
            f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp", scope="mcp:tools"')
        # a token without the scope may connect, sees no tools, and calling one is 403
        weak = Client(c, aud, idp.token(aud, scope="profile"))
        assert weak.initialize().status_code == 200
        assert weak.result("tools/list")["tools"] == []
        r = weak.request("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        assert r.status_code == 403 and 'error="insufficient_scope"' in r.headers["www-authenticate"]
        assert 'scope="mcp:tools profile"' in r.headers["www-authenticate"]
        # with the scope: the tools are there and work (SSE replies: the demo's default)
        ok = Client(c, aud, idp.token(aud, scope="mcp:tools"))
        assert ok.initialize().status_code == 200
        assert "echo" in [t["name"] for t in ok.result("tools/list")["tools"]]
        assert ok.result("tools/call", {"name": "echo", "arguments": {"text": "hi"}})["content"][0]["text"] == "hi"
        # the audience defaults to the server's own URL: a token for another resource is refused
        assert Client(c, aud, idp.token("http://127.0.0.1:1/mcp")).initialize().status_code == 401


@pytest.mark.parametrize("workers", [1, 2])
def test_run_cli_serves_your_server_behind_an_identity_provider(idp: IdP, workers: int, tmp_path: Any) -> None:
    # `sturdyrpc run file.py:server --auth-*`: the scopes are required on every request (the
    # server's, not the demo's per-tool reading); with 2 workers each worker verifies on its own.
    import sys

    from support.http import server_process

    app = tmp_path / "authapp.py"
    app.write_text("from sturdyrpc.mcp import MCPContext, MCPServer\nserver = MCPServer('a', '1')\n"
                   "@server.tool()\nasync def whoami(ctx: MCPContext) -> str:\n    return ctx.principal.subject\n")
    port = free_port()
    aud = f"http://127.0.0.1:{port}/mcp"
    cmd = [sys.executable, "-m", "sturdyrpc", "run", f"{app}:server", "--http", f"127.0.0.1:{port}",
           "--auth-issuer", idp.issuer, "--auth-jwks", idp.jwks_url, "--auth-scopes", "mcp:use"]
    if workers > 1:
        cmd += ["--workers", str(workers), "--stateless"]
    with server_process(cmd, port), httpx.Client(timeout=10) as c:
        r = c.post(aud, json=init_body(), headers={"accept": ACCEPT})
        assert r.status_code == 401 and 'scope="mcp:use"' in r.headers["www-authenticate"]
        assert "resource_metadata=" in r.headers["www-authenticate"]
        weak = Client(c, aud, idp.token(aud, scope="profile"))
        r = weak.initialize()
        assert r.status_code == 403 and 'error="insufficient_scope"' in r.headers["www-authenticate"]
        ok = Client(c, aud, idp.token(aud, scope="mcp:use", sub="alice"))
        assert ok.initialize().status_code == 200
        for _ in range(4):  # with 2 workers, new connections land on both: each verifies the token
            with httpx.Client(timeout=10) as fresh:
                ok.c = fresh
                assert ok.result("tools/call", {"name": "whoami", "arguments": {}})["content"][0]["text"] == "alice"


def test_demo_cli_refuses_incomplete_auth_options() -> None:
    import subprocess
    import sys

    for extra in (["--auth-issuer", "https://idp.example"], ["--auth-scopes", "a"]):
        r = subprocess.run([sys.executable, "-m", "sturdyrpc", "demo", "--mcp", "--http", "127.0.0.1:0", *extra],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "--auth-issuer and --auth-jwks are both needed" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "sturdyrpc", "demo", "--mcp", "--auth-issuer", "https://idp.example"],
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "need --http" in r.stderr


def test_mounted_under_starlette_with_the_metadata_routed_at_the_root() -> None:
    import asyncio

    from starlette.applications import Starlette
    from starlette.routing import Route

    resource = "http://127.0.0.1:8000/api/mcp"
    rs = ResourceServer(FunctionVerifier(lambda t: Principal("eve") if t == "ok" else None), resource=resource,
                        authorization_servers=["https://idp.example"])
    mcp_app = mcp_http_app(make_server(Calls()), path=None, json_response=True, security=HTTPSecurity(auth=rs))
    app = Starlette(routes=[Route("/api/mcp", endpoint=mcp_app),
                            Route("/.well-known/oauth-protected-resource/api/mcp", endpoint=rs.metadata_app),
                            Route("/.well-known/oauth-protected-resource", endpoint=rs.metadata_app)])

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as c:
            for path in ("/.well-known/oauth-protected-resource/api/mcp", "/.well-known/oauth-protected-resource"):
                r = await c.get(path)
                assert r.status_code == 200 and r.json()["resource"] == resource
            r = await c.post("/api/mcp", json=init_body(), headers={"accept": ACCEPT})
            assert r.status_code == 401 and r.headers["www-authenticate"] == (
                'Bearer resource_metadata="http://127.0.0.1:8000/.well-known/oauth-protected-resource/api/mcp"')
            r = await c.post("/api/mcp", json=init_body(), headers={"accept": ACCEPT, "authorization": "Bearer ok"})
            assert r.status_code == 200
            await mcp_app.aclose()

    asyncio.run(go())


def test_introspection_cache_keeps_accepted_tokens_for_its_ttl_only(idp: IdP) -> None:
    import asyncio

    now = [1_800_000_000.0]
    resource = "https://mcp.example.com/mcp"
    idp.introspection = {"t1": {"active": True, "sub": "carol", "aud": resource, "exp": now[0] + 100}}
    cached = IntrospectionVerifier(idp.introspection_url, audience=resource, client_id="mcp-server", client_secret="s3cret",
                                   clock=lambda: now[0], cache_ttl=60)
    uncached = IntrospectionVerifier(idp.introspection_url, audience=resource, client_id="mcp-server", client_secret="s3cret",
                                     clock=lambda: now[0])

    async def go() -> None:
        for v in (cached, cached, uncached, uncached):
            assert (await v.verify("t1")).subject == "carol"
        assert idp.introspection_calls == 3  # the cached verifier asked once
        idp.introspection["t1"] = {"active": False}  # revoked: the cache hides it for its ttl, no longer
        assert (await cached.verify("t1")).subject == "carol"
        now[0] += 61
        with pytest.raises(InvalidToken):
            await cached.verify("t1")
        with pytest.raises(InvalidToken):
            await cached.verify("never-issued")
        with pytest.raises(InvalidToken):
            await cached.verify("never-issued")  # refusals are not cached: asked again
        assert idp.introspection_calls == 6

    asyncio.run(go())
