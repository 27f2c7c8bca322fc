"""The grants without a user and DPoP proofs of :mod:`sturdyrpc.oauth`, without I/O: what each
request carries (RFC 6749 §4.4 / OAuth 2.1 §4.2, RFC 7523 §2.1-§3, RFC 8693, RFC 9449 §4.2),
checked by decoding and verifying what was built with the public key only."""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from sturdyrpc.oauth.challenge import bearer_challenge
from sturdyrpc.oauth.dpop import DPoPKey, access_token_hash, htu, jwk_thumbprint, use_dpop_nonce_error
from sturdyrpc.oauth.errors import OAuthError
from sturdyrpc.oauth.flow import read_token_response
from sturdyrpc.oauth.grants import (
    CLIENT_ASSERTION_TYPE,
    ID_JAG_TYPE,
    ID_TOKEN_TYPE,
    JWT_BEARER,
    TOKEN_EXCHANGE,
    ClientCredentialsGrant,
    EnterpriseGrant,
    JWTBearerGrant,
    load_private_key,
)
from sturdyrpc.oauth.metadata import AuthorizationServerMetadata

ISSUER = "https://as.example"
RESOURCE = "https://mcp.example/mcp"


def _asm(**extra: Any) -> AuthorizationServerMetadata:
    return AuthorizationServerMetadata.from_json({
        "issuer": ISSUER, "authorization_endpoint": f"{ISSUER}/authorize", "token_endpoint": f"{ISSUER}/token", **extra,
    })


def _all(grant: Any, answers: list[tuple[int, Any]], scope: str | None = None) -> list[Any]:
    """Every request of ``grant``, each answered by the next of ``answers``."""
    steps = grant.requests(_asm(), resource=RESOURCE, scope=scope)
    out = [next(steps)]
    for answer in answers:
        try:
            out.append(steps.send(answer))
        except StopIteration:
            break
    return out


def _pem(key: Any) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()


def test_client_credentials_with_a_secret_is_basic_auth_with_resource_and_scope() -> None:
    [req] = _all(ClientCredentialsGrant("svc id", "s:cret"), [], scope="read write")
    assert req.url == f"{ISSUER}/token" and req.at_authorization_server
    assert req.form == {"grant_type": "client_credentials", "resource": RESOURCE, "scope": "read write"}
    # RFC 6749 §2.3.1: each part form-encoded before base64
    assert base64.b64decode(req.headers["authorization"].removeprefix("Basic ")) == b"svc%20id:s%3Acret"
    post = ClientCredentialsGrant("svc", "pw").authenticate(_asm(token_endpoint_auth_methods_supported=["client_secret_post"]), form := {})
    assert form == {"client_id": "svc", "client_secret": "pw"} and "authorization" not in post


@pytest.mark.parametrize("given", ["object", "pem", "file", "bytes"])
def test_client_credentials_with_a_private_key_signs_an_rfc7523_assertion(given: str, tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    source: Any = {"object": key, "pem": _pem(key), "bytes": _pem(key).encode(), "file": tmp_path / "key.pem"}[given]
    (tmp_path / "key.pem").write_text(_pem(key))
    [req] = _all(ClientCredentialsGrant("svc", private_key=source, key_id="k1"), [])
    form = req.form
    assert form["grant_type"] == "client_credentials" and form["client_assertion_type"] == CLIENT_ASSERTION_TYPE
    assert form["client_id"] == "svc" and "authorization" not in req.headers
    claims = jwt.decode(form["client_assertion"], key.public_key(), algorithms=["ES256"], audience=ISSUER)
    assert claims["iss"] == claims["sub"] == "svc" and claims["exp"] - claims["iat"] == 300 and claims["jti"]
    assert jwt.get_unverified_header(form["client_assertion"])["kid"] == "k1"
    again = _all(ClientCredentialsGrant("svc", private_key=key), [])[0].form["client_assertion"]
    assert jwt.decode(again, key.public_key(), algorithms=["ES256"], audience=ISSUER)["jti"] != claims["jti"]


def test_an_rsa_key_with_rs256() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    [req] = _all(ClientCredentialsGrant("svc", private_key=_pem(key), signing_algorithm="RS256"), [])
    assert jwt.decode(req.form["client_assertion"], key.public_key(), algorithms=["RS256"], audience=ISSUER)["sub"] == "svc"


def test_client_credentials_needs_exactly_one_credential_and_a_readable_key(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ClientCredentialsGrant("svc")
    with pytest.raises(ValueError, match="exactly one"):
        ClientCredentialsGrant("svc", "pw", private_key=ec.generate_private_key(ec.SECP256R1()))
    (tmp_path / "bad.pem").write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    with pytest.raises(OAuthError, match="cannot read the private key"):
        load_private_key(tmp_path / "bad.pem")
    with pytest.raises(FileNotFoundError):
        load_private_key(tmp_path / "missing.pem")
    with pytest.raises(TypeError):
        load_private_key(42)
    assert "pw" not in repr(ClientCredentialsGrant("svc", "pw"))


def test_jwt_bearer_grant_sends_the_current_assertion() -> None:
    tokens = iter(["first.jwt", "second.jwt"])
    grant = JWTBearerGrant(lambda: next(tokens), client_id="workload")
    for expected in ("first.jwt", "second.jwt"):
        [req] = _all(grant, [])
        assert req.form == {"grant_type": JWT_BEARER, "resource": RESOURCE, "assertion": expected, "client_id": "workload"}
    [req] = _all(JWTBearerGrant("a.b.c"), [], scope="s")
    assert req.form == {"grant_type": JWT_BEARER, "resource": RESOURCE, "scope": "s", "assertion": "a.b.c"}


def test_enterprise_grant_exchanges_the_id_token_then_presents_the_id_jag() -> None:
    grant = EnterpriseGrant("https://idp.example/token", "user.id.token", ClientCredentialsGrant("mcp-client", "pw"),
                            idp_client_id="idp-client")
    exchange, bearer = _all(grant, [(200, {"access_token": "the.id.jag", "issued_token_type": ID_JAG_TYPE, "token_type": "N_A"})])
    assert exchange.url == "https://idp.example/token" and not exchange.at_authorization_server
    assert exchange.form == {"grant_type": TOKEN_EXCHANGE, "requested_token_type": ID_JAG_TYPE, "audience": ISSUER,
                             "resource": RESOURCE, "subject_token": "user.id.token", "subject_token_type": ID_TOKEN_TYPE,
                             "client_id": "idp-client"}
    assert bearer.url == f"{ISSUER}/token" and bearer.at_authorization_server
    assert bearer.form == {"grant_type": JWT_BEARER, "resource": RESOURCE, "assertion": "the.id.jag"}
    assert base64.b64decode(bearer.headers["authorization"][6:]) == b"mcp-client:pw"


@pytest.mark.parametrize(("answer", "message"), [
    ((400, {"error": "invalid_grant"}), "refused the token exchange .HTTP 400: invalid_grant"),
    ((200, {"access_token": "x", "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"}), "not an ID-JAG"),
    ((200, {"issued_token_type": ID_JAG_TYPE}), "no access_token"),
    ((502, None), "without a JSON object"),
])
def test_enterprise_grant_stops_at_a_failed_exchange(answer: tuple[int, Any], message: str) -> None:
    grant = EnterpriseGrant("https://idp.example/token", "t", ClientCredentialsGrant("c", "pw"))
    with pytest.raises(OAuthError, match=message):
        _all(grant, [answer])


def test_dpop_proof_is_rfc9449_and_its_key_stays_private() -> None:
    key = DPoPKey()
    assert "d" not in key.public_jwk and key.thumbprint == jwk_thumbprint(key.public_jwk)
    now = time.time()
    proof = key.proof("post", "https://mcp.example/mcp?x=1#frag", access_token="tok", nonce="n-1", now=now)
    header = jwt.get_unverified_header(proof)
    assert header["typ"] == "dpop+jwt" and header["alg"] == "ES256" and header["jwk"] == key.public_jwk
    public = jwt.PyJWK(header["jwk"]).key
    claims = jwt.decode(proof, public, algorithms=["ES256"])
    assert claims["htm"] == "POST" and claims["htu"] == "https://mcp.example/mcp" and claims["iat"] == int(now)
    assert claims["ath"] == access_token_hash("tok") and claims["nonce"] == "n-1" and claims["jti"]
    token_proof = jwt.decode(key.proof("POST", f"{ISSUER}/token"), public, algorithms=["ES256"])
    assert "ath" not in token_proof and "nonce" not in token_proof and token_proof["jti"] != claims["jti"]
    assert key.thumbprint in repr(key) and "d=" not in repr(key)
    with pytest.raises(ValueError, match="P-256"):
        DPoPKey(ec.generate_private_key(ec.SECP384R1()))


def test_rfc7638_thumbprint_and_rfc9449_hashes() -> None:
    # RFC 7638 §3.1's example key and thumbprint
    n = ("0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMs"
         "tn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n"
         "91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw")
    assert jwk_thumbprint({"kty": "RSA", "n": n, "e": "AQAB", "alg": "RS256", "kid": "2011-04-29"}) == \
        "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs"
    # RFC 9449 §7.1's access token and its ath
    assert access_token_hash("Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU") == "fUHyO2r2Z3DZ53EsNrWBb0xWXoaNy59IiKCAqksmQEo"
    assert htu("HTTPS://Server.Example.com") == "https://server.example.com/"
    with pytest.raises(ValueError):
        jwk_thumbprint({"kty": "oct", "k": "x"})


def test_token_responses_and_challenges_of_dpop() -> None:
    answer = {"access_token": "at", "token_type": "DPoP", "expires_in": 60}
    assert read_token_response(200, answer, requested_scope=None, resource=RESOURCE, issuer=ISSUER, dpop=True).token_type == "DPoP"
    with pytest.raises(OAuthError, match="Bearer expected"):
        read_token_response(200, answer, requested_scope=None, resource=RESOURCE, issuer=ISSUER)
    bearer = read_token_response(200, {**answer, "token_type": "bearer"}, requested_scope=None, resource=RESOURCE, issuer=ISSUER, dpop=True)
    assert bearer.token_type == "Bearer"  # a server without DPoP: the token is a plain bearer token
    assert use_dpop_nonce_error(400, {"error": "use_dpop_nonce"}) and not use_dpop_nonce_error(401, {"error": "use_dpop_nonce"})
    ch = bearer_challenge(['DPoP error="use_dpop_nonce", resource_metadata="https://mcp.example/.well-known/x"'])
    assert ch is not None and ch.scheme == "dpop" and ch.error == "use_dpop_nonce" and ch.resource_metadata
    assert bearer_challenge(['DPoP error="x"'], schemes=("bearer",)) is None


def test_metadata_without_an_authorization_endpoint_serves_the_grants_without_a_user() -> None:
    # RFC 8414 §2: authorization_endpoint is REQUIRED only when a grant that uses it is supported
    from sturdyrpc.oauth.flow import ClientInfo, authorization_url
    from sturdyrpc.oauth.pkce import PKCE

    md = AuthorizationServerMetadata.from_json({"issuer": "https://as.example", "token_endpoint": "https://as.example/token",
                                                "grant_types_supported": ["client_credentials"]})
    assert md.authorization_endpoint is None and md.token_endpoint == "https://as.example/token"
    with pytest.raises(OAuthError, match="authorization_endpoint"):
        authorization_url(md, ClientInfo("c"), redirect_uri="http://127.0.0.1:1/cb", pkce=PKCE.generate(), state="s",
                          resource="https://rs.example/mcp", scope=None)
    with pytest.raises(OAuthError, match="token_endpoint"):
        AuthorizationServerMetadata.from_json({"issuer": "https://as.example", "authorization_endpoint": "https://as.example/a"})
