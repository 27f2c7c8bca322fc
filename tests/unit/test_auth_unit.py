"""The sans-I/O parts of the resource server: JWT rules against an injected clock, key sets,
challenges, metadata, principals, introspection answers, and the CLI options."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jwt as pyjwt
import pytest
from support.auth import ec_key, public_jwk, rsa_key

from sturdyrpc.auth import (
    WELL_KNOWN,
    InvalidToken,
    JWTRules,
    KeySet,
    Principal,
    ProtectedResourceMetadata,
    UnknownKey,
    bearer_challenge,
    missing_scopes,
    principal_from_introspection,
    verify_jwt,
    well_known_path,
    well_known_url,
)
from sturdyrpc.auth.metadata import check_resource_url
from sturdyrpc.auth.options import AuthOptionsError, add_auth_arguments, auth_from_args, split_scopes

ISS = "https://idp.example"
AUD = "https://mcp.example.com/mcp"
NOW = 1_800_000_000.0

KEY = rsa_key()
EC = ec_key()
KEYS = KeySet.from_jwks({"keys": [public_jwk(KEY, "r1"), public_jwk(EC, "e1")]})
RULES = JWTRules.build(ISS, AUD)


def token(key: Any = KEY, kid: str | None = "r1", alg: str = "RS256", typ: Any = "JWT", **claims: Any) -> str:
    """A signed token; ``typ`` None: a header without ``typ``."""
    c: dict[str, Any] = {"iss": ISS, "aud": AUD, "sub": "alice", "exp": NOW + 60, "scope": "a b"}
    c.update(claims)
    headers: dict[str, Any] = {"typ": typ}  # PyJWT leaves the member out when it is None
    if kid:
        headers["kid"] = kid
    return pyjwt.encode({k: v for k, v in c.items() if v is not None}, key, algorithm=alg, headers=headers)


def test_expiry_and_not_before_with_leeway_against_the_injected_clock() -> None:
    assert verify_jwt(token(exp=NOW - 29), KEYS, RULES, NOW).subject == "alice"
    with pytest.raises(InvalidToken):
        verify_jwt(token(exp=NOW - 31), KEYS, RULES, NOW)
    assert verify_jwt(token(nbf=NOW + 29), KEYS, RULES, NOW).subject == "alice"
    with pytest.raises(InvalidToken):
        verify_jwt(token(nbf=NOW + 31), KEYS, RULES, NOW)
    strict = JWTRules.build(ISS, AUD, leeway=0)
    with pytest.raises(InvalidToken):
        verify_jwt(token(exp=NOW - 1), KEYS, strict, NOW)
    for bad in ("soon", True, None):
        with pytest.raises(InvalidToken):
            verify_jwt(token(exp=bad), KEYS, RULES, NOW)


def test_an_iat_in_the_future_beyond_the_leeway_is_refused() -> None:
    assert verify_jwt(token(iat=NOW - 3600), KEYS, RULES, NOW).subject == "alice"
    assert verify_jwt(token(iat=NOW + 29), KEYS, RULES, NOW).subject == "alice"  # clock skew
    with pytest.raises(InvalidToken, match="issued in the future"):
        verify_jwt(token(iat=NOW + 31), KEYS, RULES, NOW)
    with pytest.raises(InvalidToken, match="issued in the future"):
        verify_jwt(token(iat=NOW + 1), KEYS, JWTRules.build(ISS, AUD, leeway=0), NOW)
    with pytest.raises(InvalidToken):
        verify_jwt(token(iat="yesterday"), KEYS, RULES, NOW)


def test_typ_must_name_an_access_token() -> None:
    # RFC 9068 access tokens say at+jwt; many identity providers (Keycloak, older Auth0 and Okta
    # setups) still say JWT, or nothing: accepted by default. Another explicit type is another
    # kind of token signed by the same keys, and is no access token.
    for typ in ("at+jwt", "AT+JWT", "application/at+jwt", "Application/At+JWT", "JWT", "jwt", "application/jwt", None):
        assert verify_jwt(token(typ=typ), KEYS, RULES, NOW).subject == "alice", typ
    for typ in ("logout+jwt", "dpop+jwt", "secevent+jwt", "token-introspection+jwt", "JOSE", "id_token+jwt", "at+jwt ",
                "application/", 5, ["at+jwt"]):
        with pytest.raises(InvalidToken):
            verify_jwt(token(typ=typ), KEYS, RULES, NOW)
    strict = JWTRules.build(ISS, AUD, require_at_jwt=True)
    for typ in ("at+jwt", "application/AT+JWT"):
        assert verify_jwt(token(typ=typ), KEYS, strict, NOW).subject == "alice"
    for typ in ("JWT", "application/jwt", None, "dpop+jwt"):
        with pytest.raises(InvalidToken):
            verify_jwt(token(typ=typ), KEYS, strict, NOW)


def test_claims_give_the_principal() -> None:
    p = verify_jwt(token(aud=["https://other.example", AUD], azp="app-7", scope=None, scp=["x", "y"]), KEYS, RULES, NOW)
    assert (p.subject, p.client_id, p.scopes, p.issuer, p.expires_at) == ("alice", "app-7", frozenset({"x", "y"}), ISS, NOW + 60)
    assert p.claims["azp"] == "app-7"
    with pytest.raises(InvalidToken):
        verify_jwt(token(aud=["https://other.example"]), KEYS, RULES, NOW)
    with pytest.raises(InvalidToken):
        verify_jwt(token(aud=None), KEYS, RULES, NOW)
    with pytest.raises(InvalidToken):
        verify_jwt(token(iss=ISS + "/"), KEYS, RULES, NOW)  # exact match, no normalising


def test_algorithms_must_fit_the_key_and_the_allow_list() -> None:
    assert verify_jwt(token(alg="PS256"), KEYS, RULES, NOW).subject == "alice"
    assert verify_jwt(token(EC, "e1", "ES256"), KEYS, RULES, NOW).subject == "alice"
    with pytest.raises(InvalidToken):
        verify_jwt(token(EC, "r1", "ES256"), KEYS, RULES, NOW)  # an EC signature under the RSA key's kid
    with pytest.raises(InvalidToken):
        verify_jwt(token(alg="RS512"), KEYS, JWTRules.build(ISS, AUD, algorithms=["RS256"]), NOW)
    pinned = KeySet.from_jwks({"keys": [{**public_jwk(KEY, "r1"), "alg": "RS384"}]})
    with pytest.raises(InvalidToken):
        verify_jwt(token(alg="RS256"), pinned, RULES, NOW)  # the key says RS384 only
    assert verify_jwt(token(alg="RS384"), pinned, RULES, NOW).subject == "alice"
    for algs in (["none"], ["HS256"], ["RS256", "HS512"], []):
        with pytest.raises(ValueError):
            JWTRules.build(ISS, AUD, algorithms=algs)


def test_kid_rules() -> None:
    with pytest.raises(UnknownKey) as exc:
        verify_jwt(token(kid="r9"), KEYS, RULES, NOW)
    assert exc.value.kid == "r9"
    single = KeySet.from_jwks({"keys": [public_jwk(KEY, "r1")]})
    assert verify_jwt(token(kid=None), single, RULES, NOW).subject == "alice"  # one key fits: no kid needed
    two = KeySet.from_jwks({"keys": [public_jwk(KEY, "r1"), public_jwk(rsa_key(), "r2")]})
    with pytest.raises(InvalidToken):
        verify_jwt(token(kid=None), two, RULES, NOW)  # ambiguous


def test_key_set_keeps_only_public_signature_keys() -> None:
    good = public_jwk(KEY, "ok")
    private = {**public_jwk(KEY, "priv"), "d": "AQAB"}
    doc = {"keys": [good, {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"}, {**public_jwk(KEY, "enc"), "use": "enc"}, private,
                    {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"}, "junk", {**public_jwk(KEY, "ops"), "key_ops": ["encrypt"]}]}
    assert KeySet.from_jwks(doc).kids() == frozenset({"ok"})
    for bad in ({}, {"keys": {}}, [], "x"):
        with pytest.raises(ValueError):
            KeySet.from_jwks(bad)


def test_garbage_tokens() -> None:
    for bad in ("", "a", "a.b", "a.b.c", "x" * 20000, token()[:-5] + "AAAAA"):
        with pytest.raises(InvalidToken):
            verify_jwt(bad, KEYS, RULES, NOW)


def test_bearer_challenge_syntax() -> None:
    assert bearer_challenge() == "Bearer"
    assert bearer_challenge(resource_metadata="https://h/.well-known/oauth-protected-resource/mcp", scope=["a", "b"]) == (
        'Bearer resource_metadata="https://h/.well-known/oauth-protected-resource/mcp", scope="a b"')
    assert bearer_challenge(realm="mcp", error="invalid_token", scope=[]) == 'Bearer realm="mcp", error="invalid_token"'
    assert bearer_challenge(error="insufficient_scope", error_description="more", scope=["x"]) == (
        'Bearer scope="x", error="insufficient_scope", error_description="more"')
    with pytest.raises(ValueError):
        bearer_challenge(error="server_error")
    with pytest.raises(ValueError):
        bearer_challenge(scope=['a"b'])
    with pytest.raises(ValueError):
        bearer_challenge(error="invalid_token", error_description="bad\\thing")


def test_well_known_locations_and_metadata() -> None:
    assert well_known_path("https://h.example/mcp") == WELL_KNOWN + "/mcp"
    assert well_known_path("https://h.example/public/mcp/") == WELL_KNOWN + "/public/mcp"
    assert well_known_path("https://h.example") == WELL_KNOWN
    assert well_known_url("https://h.example:8443/mcp") == "https://h.example:8443/.well-known/oauth-protected-resource/mcp"
    for bad in ("h.example/mcp", "https://h.example/mcp#x", "https://h.example/mcp?a=1", "ftp://h.example"):
        with pytest.raises(ValueError):
            check_resource_url(bad)
    with pytest.raises(ValueError):
        ProtectedResourceMetadata.build(AUD, [])
    doc = ProtectedResourceMetadata.build(AUD, [ISS], ["a", "a", "b"], resource_name="Demo").to_dict()
    assert doc == {"resource": AUD, "authorization_servers": [ISS], "scopes_supported": ["a", "b"],
                   "bearer_methods_supported": ["header"], "resource_name": "Demo"}


def test_principal_identity_and_scopes() -> None:
    a = Principal("alice", frozenset({"x"}), "c1", ISS, {"exp": 1})
    assert a == Principal("alice", frozenset({"y"}), "c1", ISS, {"exp": 2})  # a refreshed token: same principal
    assert a != Principal("alice", frozenset({"x"}), "c2", ISS)  # another client
    assert a != Principal("alice", frozenset({"x"}), "c1", "https://other")
    assert hash(a) == hash(Principal("alice", frozenset(), "c1", ISS))
    assert missing_scopes(a, ["x", "z", "w"]) == ("w", "z")
    assert missing_scopes(None, ["x"]) == ()  # no authentication: nothing enforced
    assert missing_scopes("user-id-string", ["x"]) == ("x",)  # a principal without scopes holds none


def test_introspection_answers() -> None:
    base = {"active": True, "sub": "carol", "aud": AUD, "exp": NOW + 10, "scope": "r w", "client_id": "c"}
    p = principal_from_introspection(base, audiences=frozenset({AUD}), issuer=None, now=NOW)
    assert (p.subject, p.scopes, p.client_id) == ("carol", frozenset({"r", "w"}), "c")
    for change in ({"active": "true"}, {"active": False}, {"exp": NOW - 60}, {"nbf": NOW + 60}, {"aud": "https://x"},
                   {"sub": None, "client_id": None}, {"exp": "later"}):
        with pytest.raises(InvalidToken):
            principal_from_introspection({**base, **change}, audiences=frozenset({AUD}), issuer=None, now=NOW)
    with pytest.raises(InvalidToken):
        principal_from_introspection(base, audiences=frozenset({AUD}), issuer=ISS, now=NOW)  # iss required when configured
    no_aud = {k: v for k, v in base.items() if k != "aud"}
    assert principal_from_introspection(no_aud, audiences=None, issuer=None, now=NOW).subject == "carol"
    with pytest.raises(InvalidToken):
        principal_from_introspection(no_aud, audiences=frozenset({AUD}), issuer=None, now=NOW)


def _parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_auth_arguments(p)
    return p.parse_args(list(argv))


def test_cli_options() -> None:
    assert split_scopes("a,b c,,a") == ["a", "b", "c"]
    assert auth_from_args(_parse(), "http://127.0.0.1:1/mcp") is None
    with pytest.raises(AuthOptionsError):
        auth_from_args(_parse("--auth-issuer", ISS), "http://127.0.0.1:1/mcp")
    rs = auth_from_args(_parse("--auth-issuer", ISS, "--auth-jwks", ISS + "/jwks", "--auth-scopes", "a,b"), "http://127.0.0.1:1/mcp")
    assert rs.resource == "http://127.0.0.1:1/mcp" and rs.required_scopes == ("a", "b")
    assert rs.verifier.rules.audiences == frozenset({"http://127.0.0.1:1/mcp"})
    rs = auth_from_args(_parse("--auth-issuer", ISS, "--auth-jwks", ISS + "/jwks", "--auth-scopes", "a", "--auth-audience", AUD),
                        "http://127.0.0.1:1/mcp", server_wide_scopes=False)
    assert rs.resource == AUD and rs.required_scopes == () and rs.metadata.scopes_supported == ("a",)
    with pytest.raises(AuthOptionsError):
        auth_from_args(_parse("--auth-issuer", ISS, "--auth-jwks", ISS + "/jwks", "--auth-audience", "not a url"), "http://x/mcp")
    # the defaults: a 5 s deadline for a verdict and for a JWKS fetch, the generic typ JWT accepted
    rs = auth_from_args(_parse("--auth-issuer", ISS, "--auth-jwks", ISS + "/jwks"), AUD)
    assert (rs.timeout, rs.verifier.jwks.timeout, rs.verifier.rules.require_at_jwt) == (5.0, 5.0, False)
    rs = auth_from_args(_parse("--auth-issuer", ISS, "--auth-jwks", ISS + "/jwks", "--auth-timeout", "1.5", "--auth-require-at-jwt"), AUD)
    assert (rs.timeout, rs.verifier.jwks.timeout, rs.verifier.rules.require_at_jwt) == (1.5, 1.5, True)
    for bad in ("0", "-1", "301"):
        with pytest.raises(AuthOptionsError):
            auth_from_args(_parse("--auth-issuer", ISS, "--auth-jwks", ISS + "/jwks", "--auth-timeout", bad), AUD)
    with pytest.raises(AuthOptionsError):  # on its own it asks for verification, which needs an issuer
        auth_from_args(_parse("--auth-require-at-jwt"), AUD)


def test_without_pyjwt_one_clear_message(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['jwt'] = None\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH")) if p)
    code = ("import sturdyrpc.auth, sturdyrpc.mcp_http\n"  # importing never needs PyJWT
            "from sturdyrpc.auth import JWTVerifier\n"
            "try:\n    JWTVerifier('https://i', 'https://i/jwks', 'https://r/mcp')\n"
            "except ModuleNotFoundError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "JWT verification needs PyJWT, which is not installed; install it with: pip install 'sturdyrpc[auth]'"
    r = subprocess.run([sys.executable, "-m", "sturdyrpc", "demo", "--mcp", "--http", "127.0.0.1:0", "--auth-issuer", ISS,
                        "--auth-jwks", ISS + "/jwks"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2 and "pip install 'sturdyrpc[auth]'" in r.stderr and "Traceback" not in r.stderr


def test_every_public_name_of_the_package_resolves() -> None:
    import sturdyrpc.auth as auth

    for name in auth.__all__:
        assert getattr(auth, name) is not None, name
    with pytest.raises(AttributeError):
        auth.nope  # noqa: B018
