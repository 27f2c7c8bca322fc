"""The OAuth 2.1 client (sturdyrpc.oauth): the pure parts, then the whole flow against a real
authorization server and protected MCP server on 127.0.0.1 (tests/support/oauth.py)."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.http import free_port
from support.oauth import browser_get, serve_protected

from sturdyrpc.errors import RPCError
from sturdyrpc.mcp.client import NegotiationFailed
from sturdyrpc.mcp_http.connect import connect_http
from sturdyrpc.oauth import (
    CallbackRedirectHandler,
    FileTokenStore,
    FollowRedirectHandler,
    LoopbackRedirectHandler,
    MemoryTokenStore,
    OAuthClientProvider,
    OAuthError,
    parse_www_authenticate,
)
from sturdyrpc.oauth.challenge import bearer_challenge
from sturdyrpc.oauth.flow import (
    ClientInfo,
    choose_auth_method,
    code_token_request,
    read_authorization_response,
    select_scope,
    step_up_scope,
)
from sturdyrpc.oauth.metadata import (
    AuthorizationServerMetadata,
    ProtectedResourceMetadata,
    authorization_server_metadata_urls,
    canonical_resource,
    protected_resource_metadata_urls,
    resource_allowed,
)
from sturdyrpc.oauth.pkce import PKCE, s256_challenge

pytestmark = pytest.mark.timeout(60)

REDIRECT = "http://127.0.0.1:3000/callback"


# ------------------------------------------------------------------ pure parts


def test_www_authenticate_several_challenges_quoting_and_case() -> None:
    chs = parse_www_authenticate(['Basic realm="a, b", BEARER Scope="x y" , error=insufficient_scope',
                                  'Bearer resource_metadata="https://h/m"'])
    assert [c.scheme for c in chs] == ["Basic", "BEARER", "Bearer"]
    assert chs[0].params == {"realm": "a, b"}
    b = bearer_challenge(['Basic realm="a, b", BEARER Scope="x y" , error=insufficient_scope'])
    assert b is not None and b.scopes == ["x", "y"] and b.error == "insufficient_scope"
    esc = bearer_challenge('Bearer error_description="say \\"no\\"", scope="a"')
    assert esc is not None and esc.error_description == 'say "no"' and esc.scope == "a"
    assert bearer_challenge('Basic realm="x"') is None
    assert bearer_challenge("Negotiate abc==, Bearer scope=q").scope == "q"  # type: ignore[union-attr]


_tok = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.!#$%&*+^`|~", min_size=1, max_size=12)
_val = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=20)


@given(st.lists(st.tuples(_tok, st.dictionaries(_tok.map(str.lower), _val, max_size=4)), min_size=1, max_size=3))
def test_www_authenticate_round_trip(challenges: list[tuple[str, dict[str, str]]]) -> None:
    """Any challenges written with quoted-string values (commas, quotes, backslashes inside) parse back exactly."""

    def quote(v: str) -> str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'

    header = ", ".join(f"{scheme} " + ", ".join(f"{k}={quote(v)}" for k, v in params.items()) if params else scheme
                       for scheme, params in challenges)
    parsed = parse_www_authenticate(header)
    assert [(c.scheme, c.params) for c in parsed] == challenges


def test_discovery_urls_follow_the_spec_order() -> None:
    assert protected_resource_metadata_urls("https://ex.com/public/mcp") == [
        "https://ex.com/.well-known/oauth-protected-resource/public/mcp",
        "https://ex.com/.well-known/oauth-protected-resource",
    ]
    assert protected_resource_metadata_urls("https://ex.com/") == ["https://ex.com/.well-known/oauth-protected-resource"]
    assert protected_resource_metadata_urls("https://ex.com/mcp", "https://ex.com/custom.json") == ["https://ex.com/custom.json"]
    assert authorization_server_metadata_urls("https://auth.ex.com/tenant1") == [
        "https://auth.ex.com/.well-known/oauth-authorization-server/tenant1",
        "https://auth.ex.com/.well-known/openid-configuration/tenant1",
        "https://auth.ex.com/tenant1/.well-known/openid-configuration",
    ]
    assert authorization_server_metadata_urls("https://auth.ex.com") == [
        "https://auth.ex.com/.well-known/oauth-authorization-server",
        "https://auth.ex.com/.well-known/openid-configuration",
    ]


def test_resource_matching_and_canonical_uri() -> None:
    assert canonical_resource("HTTPS://MCP.Example.com/mcp/#frag") == "https://mcp.example.com/mcp"
    assert resource_allowed("https://h", "https://h/mcp")
    assert resource_allowed("https://h/mcp", "https://h/mcp/")
    assert not resource_allowed("https://h/mc", "https://h/mcp")
    assert not resource_allowed("https://other/mcp", "https://h/mcp")
    assert not resource_allowed("http://h/mcp", "https://h/mcp")


def test_pkce_rfc7636_vector_and_generated_pairs() -> None:
    # RFC 7636 Appendix B
    assert s256_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk") == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    a, b = PKCE.generate(), PKCE.generate()
    assert a.verifier != b.verifier and 43 <= len(a.verifier) <= 128
    assert a.challenge == s256_challenge(a.verifier) and a.method == "S256"
    with pytest.raises(ValueError):
        PKCE.from_verifier("short")


def test_scope_selection_and_step_up() -> None:
    prm = ProtectedResourceMetadata("https://h/mcp", ["https://as"], ["a", "b"])
    assert select_scope(bearer_challenge('Bearer scope="x"'), prm) == "x"
    assert select_scope(bearer_challenge("Bearer"), prm) == "a b"
    assert select_scope(None, ProtectedResourceMetadata("https://h/mcp", ["https://as"])) is None
    up = bearer_challenge('Bearer error="insufficient_scope", scope="b c"')
    assert up is not None and step_up_scope("a b", up) == "a b c"


def _asm(**kw: Any) -> AuthorizationServerMetadata:
    doc = {"issuer": "https://as", "authorization_endpoint": "https://as/a", "token_endpoint": "https://as/t",
           "code_challenge_methods_supported": ["S256"], **kw}
    return AuthorizationServerMetadata.from_json(doc)


def test_token_endpoint_auth_methods() -> None:
    pkce = PKCE.generate()
    secret = ClientInfo("id:1", "s3cr&t")
    assert choose_auth_method(secret, _asm()) == "client_secret_basic"  # RFC 8414 default
    assert choose_auth_method(secret, _asm(token_endpoint_auth_methods_supported=["client_secret_post"])) == "client_secret_post"
    assert choose_auth_method(ClientInfo("pub"), _asm()) == "none"
    form, headers = code_token_request(_asm(), secret, code="c", redirect_uri=REDIRECT, pkce=pkce, resource="https://h/mcp")
    # RFC 6749 §2.3.1: id and secret form-encoded, then base64
    assert base64.b64decode(headers["authorization"][6:]) == b"id%3A1:s3cr%26t"
    assert "client_secret" not in form and form["resource"] == "https://h/mcp" and form["code_verifier"] == pkce.verifier
    post = ClientInfo("id", "hunter2", "client_secret_post")
    form, headers = code_token_request(_asm(), post, code="c", redirect_uri=REDIRECT, pkce=pkce, resource="r")
    assert form["client_secret"] == "hunter2" and "authorization" not in headers
    assert "hunter2" not in repr(post)


def test_authorization_response_checks_state_and_error() -> None:
    assert read_authorization_response({"code": "c", "state": "s"}, "s") == "c"
    with pytest.raises(OAuthError, match="state"):
        read_authorization_response({"code": "c", "state": "other"}, "s")
    with pytest.raises(OAuthError, match="access_denied"):
        read_authorization_response({"error": "access_denied", "state": "s"}, "s")
    # RFC 9207 mix-up defence
    assert read_authorization_response({"code": "c", "state": "s", "iss": "https://as"}, "s", issuer="https://as") == "c"
    assert read_authorization_response({"code": "c", "state": "s"}, "s", issuer="https://as") == "c"
    with pytest.raises(OAuthError, match="iss"):
        read_authorization_response({"code": "c", "state": "s", "iss": "https://evil"}, "s", issuer="https://as")
    with pytest.raises(OAuthError, match="iss"):
        read_authorization_response({"code": "c", "state": "s"}, "s", issuer="https://as", iss_required=True)


def test_endpoints_and_redirect_uri_must_be_https_or_loopback() -> None:
    _asm(issuer="https://as", token_endpoint="http://localhost:8080/t").require_secure_endpoints()
    with pytest.raises(OAuthError, match="token_endpoint"):
        _asm(token_endpoint="http://as.example.com/token").require_secure_endpoints()
    with pytest.raises(ValueError, match="redirect URI"):
        OAuthClientProvider(FollowRedirectHandler("http://example.com/callback"))
    OAuthClientProvider(FollowRedirectHandler("https://app.example.com/callback"))


def test_pkce_must_be_advertised() -> None:
    with pytest.raises(OAuthError, match="PKCE"):
        _asm(code_challenge_methods_supported=None).require_pkce_s256()
    with pytest.raises(OAuthError, match="S256"):
        _asm(code_challenge_methods_supported=["plain"]).require_pkce_s256()


def test_file_store_is_private_and_survives(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "oauth.json"

    async def go() -> None:
        s = FileTokenStore(path)
        await s.set("tokens https://h/mcp", {"tokens": {"access_token": "t"}})
        await s.set("client https://as", {"client_id": "c"})
        await s.delete("client https://as")
        assert await FileTokenStore(path).get("tokens https://h/mcp") == {"tokens": {"access_token": "t"}}
        assert await FileTokenStore(path).get("client https://as") is None

    asyncio.run(go())
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    path.write_text("not json")
    assert asyncio.run(FileTokenStore(path).get("x")) is None


# ------------------------------------------------------------------ the whole flow


def _provider(**kw: Any) -> OAuthClientProvider:
    return OAuthClientProvider(FollowRedirectHandler(REDIRECT), **kw)


def test_full_flow_registration_pkce_resource_and_step_up() -> None:
    port = free_port()
    with serve_protected(port) as (auth_server, rs):
        url = f"http://127.0.0.1:{port}/mcp"

        async def go() -> None:
            auth = _provider()
            async with connect_http(url, auth=auth) as client:
                names = [t["name"] for t in await client.list_tools()]
                assert "echo" in names
                result = await client.call_tool("echo", {"text": "hi"})  # needs mcp:write: 403, step-up
                assert "hi" in str(result)
            await auth.aclose()
            assert auth.authorizations == 2

        asyncio.run(go())
        assert auth_server.count("register") == 1
        reg = auth_server.of("register")[0]
        assert reg["redirect_uris"] == [REDIRECT] and reg["token_endpoint_auth_method"] == "none"
        first, second = auth_server.of("authorize")
        assert first["scope"] == "mcp:read"  # from the 401 challenge
        assert set(second["scope"].split()) == {"mcp:read", "mcp:write"}  # challenged + held
        for a in (first, second):
            assert a["resource"] == rs.resource and a["code_challenge_method"] == "S256" and a["state"]
        tokens = auth_server.of("token")
        assert [t["grant_type"] for t in tokens] == ["authorization_code", "authorization_code"]
        assert all(t["resource"] == rs.resource and t["has_verifier"] and t["auth_method"] == "none" for t in tokens)
        assert ("POST tools/call", 403) in rs.seen


def test_keys_rotated_mid_session_the_client_refreshes(tmp_path: Path) -> None:
    port = free_port()
    with serve_protected(port) as (auth_server, rs):
        url = f"http://127.0.0.1:{port}/mcp"
        rs.needs = {}

        async def go() -> None:
            auth = _provider()
            async with connect_http(url, auth=auth) as client:
                await client.list_tools()
                fetches = rs.jwks_fetches
                auth_server.rotate()  # the old key leaves the JWKS: our token no longer verifies
                rs.forget_keys()  # its JWKS cache expired
                await client.list_tools()
                assert rs.jwks_fetches > fetches  # the resource server looked the new keys up
            await auth.aclose()
            assert auth.authorizations == 1  # a refresh, not a new authorization

        asyncio.run(go())
        grants = [t["grant_type"] for t in auth_server.of("token")]
        assert grants == ["authorization_code", "refresh_token"]
        assert auth_server.of("token")[1]["resource"] == rs.resource
        assert ("POST tools/list", 401) in rs.seen


def test_expired_token_is_refreshed_before_use() -> None:
    port = free_port()
    # expires_in 10 s is inside the client's 30 s leeway: every later request refreshes first
    with serve_protected(port, token_ttl=10) as (auth_server, rs):
        rs.needs = {}

        async def go() -> None:
            auth = _provider()
            async with connect_http(f"http://127.0.0.1:{port}/mcp", auth=auth) as client:
                await client.list_tools()
            await auth.aclose()

        asyncio.run(go())
        grants = [t["grant_type"] for t in auth_server.of("token")]
        assert grants[0] == "authorization_code" and grants.count("refresh_token") >= 1
        assert auth_server.count("authorize") == 1
        assert all(s != 401 for _, s in rs.seen[1:])  # refreshed before sending, never refused


def test_step_up_that_never_succeeds_stops_after_the_retry_limit() -> None:
    port = free_port()
    with serve_protected(port, withheld={"mcp:write"}) as (auth_server, rs):

        async def go() -> None:
            auth = _provider()
            async with connect_http(f"http://127.0.0.1:{port}/mcp", auth=auth) as client:
                await client.list_tools()
                with pytest.raises(RPCError):
                    await client.call_tool("echo", {"text": "hi"})
            await auth.aclose()

        asyncio.run(go())
        # one authorization for list_tools' 401; tools/call: sent, then retried after each of at
        # most three step-ups (max_authorizations), then given up
        assert auth_server.count("authorize") == 1 + 3
        assert [s for m, s in rs.seen if m == "POST tools/call"] == [403] * 4


def test_tokens_and_registration_persist_in_the_file_store(tmp_path: Path) -> None:
    port = free_port()
    path = tmp_path / "oauth.json"
    with serve_protected(port) as (auth_server, rs):
        rs.needs = {}

        async def session() -> int:
            auth = _provider(store=FileTokenStore(path))
            async with connect_http(f"http://127.0.0.1:{port}/mcp", auth=auth) as client:
                await client.list_tools()
            await auth.aclose()
            return auth.authorizations

        assert asyncio.run(session()) == 1
        assert asyncio.run(session()) == 0  # the stored token is used: no new authorization
        assert auth_server.count("register") == 1
        text = path.read_text()
        assert "client " + auth_server.issuer in text and "tokens " + rs.resource in text


def test_pre_registered_confidential_client_and_no_registration() -> None:
    port = free_port()
    with serve_protected(port, auth_methods=["client_secret_post"]) as (auth_server, rs):
        rs.needs = {}
        auth_server.clients["pre"] = {"client_id": "pre", "client_secret": "pw", "redirect_uris": [REDIRECT],
                                      "token_endpoint_auth_method": "client_secret_post"}

        async def go() -> None:
            auth = _provider(client_id="pre", client_secret="pw")
            async with connect_http(f"http://127.0.0.1:{port}/mcp", auth=auth) as client:
                await client.list_tools()
            await auth.aclose()

        asyncio.run(go())
        assert auth_server.count("register") == 0
        assert auth_server.of("token")[0]["auth_method"] == "client_secret_post"


@pytest.mark.parametrize("problem", ["no-pkce", "issuer", "resource", "denied", "mix-up"])
def test_unsafe_metadata_is_refused_before_any_authorization(problem: str) -> None:
    port = free_port()
    opts: dict[str, Any] = {"advertise_pkce": False} if problem == "no-pkce" else {}
    if problem == "issuer":
        opts["issuer_override"] = "https://evil.example"
    if problem == "denied":
        opts["deny"] = True
    if problem == "mix-up":
        opts["response_iss"] = "https://other-as.example"
    with serve_protected(port, **opts) as (auth_server, rs):
        if problem == "resource":
            rs.resource_override = "http://127.0.0.1:1/mcp"

        async def go() -> str:
            auth = _provider()
            try:
                async with connect_http(f"http://127.0.0.1:{port}/mcp", auth=auth) as client:
                    await client.list_tools()
            except NegotiationFailed as exc:  # server/discover, the first request, could not be authorized
                return str(exc)
            finally:
                await auth.aclose()
            return ""

        message = asyncio.run(go())
        assert message.startswith("Authorization failed"), message
        expected = {"no-pkce": "PKCE", "issuer": "issuer", "resource": "protected resource metadata", "denied": "access_denied",
                    "mix-up": "iss"}
        assert expected[problem] in message
        if problem in ("denied", "mix-up"):
            assert auth_server.count("authorize") == 1  # asked once: no second sign-in for a fallback initialize
        else:
            assert auth_server.count("authorize") == 0 and auth_server.count("register") == 0
        assert [s for _, s in rs.seen] == [401]


def test_client_identity_priority_pre_registered_then_metadata_document_then_registration() -> None:
    port = free_port()
    doc_url = "https://client.example/oauth/client.json"
    with serve_protected(port, cimd=True) as (auth_server, rs):
        rs.needs = {}
        auth_server.clients["pre"] = {"client_id": "pre", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}

        async def session(**kw: Any) -> None:
            auth = _provider(**kw)
            async with connect_http(f"http://127.0.0.1:{port}/mcp", auth=auth) as client:
                await client.list_tools()
            await auth.aclose()

        asyncio.run(session(client_id="pre", client_metadata_url=doc_url))
        asyncio.run(session(client_metadata_url=doc_url))
        asyncio.run(session())
        assert [a["client_id"] for a in auth_server.of("authorize")][:2] == ["pre", doc_url]
        assert auth_server.count("register") == 1  # only the last one, with neither
        with pytest.raises(ValueError, match="https URL with a path"):
            _provider(client_metadata_url="https://client.example")


def test_legacy_2025_03_26_defaults_and_issuer_identity() -> None:
    from sturdyrpc.oauth.metadata import legacy_authorization_base, legacy_default_metadata, same_issuer

    base = legacy_authorization_base("https://api.example.com/v1/mcp")
    assert base == "https://api.example.com"
    md = legacy_default_metadata(base)
    assert (md.authorization_endpoint, md.token_endpoint, md.registration_endpoint) == (
        "https://api.example.com/authorize", "https://api.example.com/token", "https://api.example.com/register")
    md.require_pkce_s256()  # no document, nothing to check: PKCE is used regardless
    assert same_issuer("https://as.example", "https://as.example/")
    assert not same_issuer("https://as.example/tenant1", "https://as.example/")


def test_loopback_listener_and_callback_handler() -> None:
    port = free_port()
    with serve_protected(port) as (auth_server, rs):
        rs.needs = {}
        out = io.StringIO()
        handler = LoopbackRedirectHandler(open_browser=False, out=out)

        async def go() -> None:
            auth = OAuthClientProvider(handler)

            async def browser() -> None:
                while "http" not in out.getvalue():
                    await asyncio.sleep(0.02)
                auth_url = out.getvalue().split()[-1]
                stray = await asyncio.to_thread(browser_get, f"{handler.redirect_uri}?code=forged&state=wrong")
                assert stray.status_code == 400  # ignored: the listener keeps waiting
                page = await asyncio.to_thread(browser_get, auth_url)
                assert page.status_code == 200 and "Authorization complete" in page.text

            async def connect() -> None:
                async with connect_http(f"http://127.0.0.1:{port}/mcp", auth=auth) as c:
                    await c.list_tools()

            await asyncio.gather(connect(), browser())
            await auth.aclose()

        asyncio.run(go())
        handler.close()
        assert auth_server.of("register")[0]["redirect_uris"] == [handler.redirect_uri]
        assert handler.redirect_uri.startswith("http://127.0.0.1:")

        seen: list[str] = []

        async def callback(auth_url: str) -> str:
            seen.append(auth_url)
            r = await asyncio.to_thread(lambda: __import__("httpx").get(auth_url))
            return str(r.headers["location"])

        async def go2() -> None:
            auth = OAuthClientProvider(CallbackRedirectHandler(REDIRECT, callback), store=MemoryTokenStore())
            async with connect_http(f"http://127.0.0.1:{port}/mcp", auth=auth) as client:
                await client.list_tools()
            await auth.aclose()

        asyncio.run(go2())
        assert len(seen) == 1 and seen[0].startswith(auth_server.issuer + "/authorize?")


# ------------------------------------------------------------------ the command line


def test_cli_url_authorizes_through_the_loopback_listener_then_reuses_the_token(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    port = free_port()
    store = tmp_path / "oauth.json"
    cmd = [sys.executable, "-m", "sturdyrpc", "mcp", "tools", "--url", f"http://127.0.0.1:{port}/mcp", "--no-browser",
           "--token-store", str(store), "--timeout", "40"]
    with serve_protected(port) as (auth_server, rs):
        rs.needs = {}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if line.strip().startswith("http"):
                break
        page = browser_get(line.strip())  # the user's browser: the authorization server, then the loopback listener
        assert page.status_code == 200
        out, err = proc.communicate(timeout=40)
        assert proc.returncode == 0, "".join(lines) + err
        assert "echo(" in out
        assert auth_server.count("authorize") == 1
        redirect = auth_server.of("register")[0]["redirect_uris"][0]
        assert redirect.startswith("http://127.0.0.1:") and redirect.endswith("/callback")

        saved = json.loads(store.read_text())
        token = saved["tokens " + rs.resource]["tokens"]["access_token"]
        assert stat.S_IMODE(os.stat(store).st_mode) == 0o600
        assert token not in out + err + "".join(lines)  # secrets never on stdout or stderr

        again = subprocess.run(cmd, capture_output=True, text=True, timeout=40)
        assert again.returncode == 0 and "echo(" in again.stdout, again.stderr
        assert "authorize" not in again.stderr and auth_server.count("authorize") == 1


def test_cli_url_usage_errors() -> None:
    import subprocess
    import sys

    base = [sys.executable, "-m", "sturdyrpc", "mcp", "tools"]
    both = subprocess.run([*base, "--url", "http://127.0.0.1:1/mcp", "--", "x"], capture_output=True, text=True, timeout=30)
    assert both.returncode == 2 and "either --url" in both.stderr
    scheme = subprocess.run([*base, "--url", "ftp://h/mcp"], capture_output=True, text=True, timeout=30)
    assert scheme.returncode == 2
    env = {k: v for k, v in os.environ.items() if k != "NO_SUCH_SECRET_VAR"}
    unset = subprocess.run([*base, "--url", "http://127.0.0.1:1/mcp", "--client-id", "x", "--client-secret-env", "NO_SUCH_SECRET_VAR"],
                           capture_output=True, text=True, timeout=30, env=env)
    assert unset.returncode == 2 and "NO_SUCH_SECRET_VAR" in unset.stderr
    url = ["--url", "http://127.0.0.1:1/mcp"]
    for opts, message in [
        (["--client-credentials"], "--client-credentials needs --client-id"),
        (["--client-credentials", "--client-id", "c"], "exactly one of --client-secret-env and --private-key"),
        (["--client-credentials", "--assertion-file", "f"], "give only one of --client-credentials, --assertion-file"),
        (["--idp-token-endpoint", "https://idp/token", "--client-id", "c"], "--idp-token-endpoint needs --id-token-file"),
        (["--private-key", "k.pem"], "--private-key goes with --client-credentials"),
        (["--client-credentials", "--client-id", "c", "--private-key", "/no/such/key.pem"], "cannot set up authorization"),
    ]:
        r = subprocess.run([*base, *url, *opts], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and message in r.stderr, (opts, r.stderr)


def test_refused_refresh_token_falls_back_to_a_new_authorization() -> None:
    port = free_port()
    with serve_protected(port) as (auth_server, rs):
        rs.needs = {}

        async def go() -> int:
            auth = _provider()
            async with connect_http(f"http://127.0.0.1:{port}/mcp", auth=auth) as client:
                await client.list_tools()
                auth_server.refresh_tokens.clear()  # revoked
                auth_server.rotate()
                rs.forget_keys()
                await client.list_tools()
            await auth.aclose()
            return auth.authorizations

        assert asyncio.run(go()) == 2
        grants = [(t["grant_type"], t["auth_method"]) for t in auth_server.of("token")]
        assert [g for g, _ in grants] == ["authorization_code", "refresh_token", "authorization_code"]


def test_every_http_request_carries_the_token_and_concurrent_401s_share_one_flow() -> None:
    port = free_port()
    with serve_protected(port) as (auth_server, rs):
        rs.needs = {}

        async def go() -> None:
            auth = _provider()
            # the handshake era: a session, the standalone GET stream, and DELETE at the end
            async with connect_http(f"http://127.0.0.1:{port}/mcp", "2025-11-25", auth=auth) as client:
                await client.list_tools()
                auth_server.refresh_tokens.clear()
                auth_server.rotate()
                rs.forget_keys()  # every request now gets 401 until a new authorization
                await asyncio.gather(*(client.list_tools() for _ in range(4)))
            await auth.aclose()
            assert auth.authorizations == 2

        asyncio.run(go())
        assert auth_server.count("authorize") == 2
        lists = [status for m, status in rs.seen if m == "POST tools/list"]
        assert lists.count(200) == 5 and lists.count(401) <= 4
        # the standalone GET stream and the closing DELETE carried the token too
        assert ("GET None", 200) in rs.seen and ("DELETE None", 200) in rs.seen
