"""The grants that need no user at a browser, built without I/O: ``client_credentials`` (OAuth 2.1
§4.2, the MCP extension SEP-1046) with a client secret or ``private_key_jwt`` (RFC 7523 §2.2),
the JWT bearer grant of workload identity federation (RFC 7523 §2.1, SEP-1933), and
enterprise-managed authorization (SEP-990: a token exchange at the enterprise's identity
provider for an ID-JAG, RFC 8693, then the JWT bearer grant with it at the MCP server's
authorization server).

A grant is a generator of :class:`TokenRequest` s (:meth:`Grant.requests`): the provider
(:class:`~sturdyrpc.oauth.provider.OAuthClientProvider`, ``grant=``) sends each one and sends
back its answer ``(status, JSON)``; the answer to the last one is the token response. So the
grants are pure: what to send, and what an intermediate answer means, are decided here.

Signing (client assertions) needs the ``auth`` extra (PyJWT with ``cryptography``); keys are a
PEM file, PEM text or a ``cryptography`` private key object, and never leave the process.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .errors import OAuthError
from .flow import ClientInfo, client_authentication
from .metadata import AuthorizationServerMetadata

__all__ = [
    "TokenRequest",
    "Grant",
    "ClientCredentialsGrant",
    "JWTBearerGrant",
    "EnterpriseGrant",
    "load_private_key",
    "client_assertion",
    "CLIENT_ASSERTION_TYPE",
    "JWT_BEARER",
    "TOKEN_EXCHANGE",
    "ID_TOKEN_TYPE",
    "ID_JAG_TYPE",
]

CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG_TYPE = "urn:ietf:params:oauth:token-type:id-jag"
#: How long a client assertion is good for: it is made for one request.
ASSERTION_LIFETIME = 300

#: An answer from a token endpoint: (HTTP status, the JSON body or None).
Answer = tuple[int, Any]


@dataclass(frozen=True)
class TokenRequest:
    """One POST to a token endpoint: its URL, form and headers. ``at_authorization_server``:
    the MCP server's authorization server (where DPoP proofs go), not an identity provider."""

    url: str
    form: dict[str, str]
    headers: dict[str, str]
    what: str = "the token endpoint"
    at_authorization_server: bool = True


class Grant(Protocol):
    """A grant without a user: the token requests it makes for ``resource``."""

    def requests(self, asm: AuthorizationServerMetadata, *, resource: str, scope: str | None) -> Generator[TokenRequest, Answer, None]:
        """Yield each request; receive its answer; the last answer is the token response."""
        ...


def load_private_key(key: Any) -> Any:
    """A ``cryptography`` private key from ``key``: a key object (returned as is), PEM text or
    bytes, or the path of a PEM file (unencrypted PKCS#8 or traditional)."""
    from cryptography.hazmat.primitives import serialization

    if hasattr(key, "sign") and not isinstance(key, (str, bytes, os.PathLike)):
        return key
    if isinstance(key, str) and key.lstrip().startswith("-----BEGIN"):
        data = key.encode()
    elif isinstance(key, bytes):
        data = key
    elif isinstance(key, (str, os.PathLike)):
        data = Path(key).read_bytes()
    else:
        raise TypeError(f"a private key must be a key object, PEM text or a PEM file path, not {type(key).__name__}")
    try:
        return serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise OAuthError(f"cannot read the private key: {exc}") from None


def client_assertion(client_id: str, audience: str, key: Any, *, algorithm: str = "ES256", key_id: str | None = None,
                     now: float | None = None) -> str:
    """A ``private_key_jwt`` client assertion (RFC 7523 §3): ``iss`` and ``sub`` the client id,
    ``aud`` the authorization server's issuer, a fresh ``jti``, five minutes of validity."""
    import jwt

    iat = int(time.time() if now is None else now)
    claims = {"iss": client_id, "sub": client_id, "aud": audience, "iat": iat, "exp": iat + ASSERTION_LIFETIME,
              "jti": secrets.token_urlsafe(16)}
    headers = {"kid": key_id} if key_id else None
    return jwt.encode(claims, key, algorithm=algorithm, headers=headers)


def _base_form(grant_type: str, resource: str, scope: str | None) -> dict[str, str]:
    form = {"grant_type": grant_type, "resource": resource}
    if scope:
        form["scope"] = scope
    return form


@dataclass(frozen=True)
class ClientCredentialsGrant:
    """``client_credentials`` for a client acting on its own behalf (a service, no user).

    ``client_secret``: authenticated by ``client_secret_basic`` (or ``client_secret_post`` when
    that is all the server supports). ``private_key``: ``private_key_jwt`` instead, signed with
    ``signing_algorithm`` (a PEM file path, PEM text or a ``cryptography`` key object)."""

    client_id: str
    client_secret: str | None = field(default=None, repr=False)
    private_key: Any = field(default=None, repr=False)
    signing_algorithm: str = "ES256"
    key_id: str | None = None

    def __post_init__(self) -> None:
        if (self.client_secret is None) == (self.private_key is None):
            raise ValueError("client_credentials needs exactly one of client_secret and private_key")
        if self.private_key is not None:
            object.__setattr__(self, "private_key", load_private_key(self.private_key))

    def requests(self, asm: AuthorizationServerMetadata, *, resource: str, scope: str | None) -> Generator[TokenRequest, Answer, None]:
        form = _base_form("client_credentials", resource, scope)
        yield TokenRequest(asm.token_endpoint, form, self.authenticate(asm, form))

    def authenticate(self, asm: AuthorizationServerMetadata, form: dict[str, str]) -> dict[str, str]:
        """The headers (and form fields) that authenticate this client at ``asm``'s token endpoint."""
        if self.private_key is None:
            supported = asm.token_endpoint_auth_methods_supported or ["client_secret_basic"]
            method = "client_secret_post" if "client_secret_basic" not in supported and "client_secret_post" in supported else "client_secret_basic"
            return client_authentication(ClientInfo(self.client_id, self.client_secret), method, form)
        form["client_id"] = self.client_id
        form["client_assertion_type"] = CLIENT_ASSERTION_TYPE
        form["client_assertion"] = client_assertion(self.client_id, asm.issuer, self.private_key,
                                                    algorithm=self.signing_algorithm, key_id=self.key_id)
        return {"content-type": "application/x-www-form-urlencoded", "accept": "application/json"}


def _text(value: str | Callable[[], str]) -> str:
    return value() if callable(value) else value


@dataclass(frozen=True)
class JWTBearerGrant:
    """The JWT bearer grant of workload identity federation: the workload's identity token (a
    JWT its platform issued, whose audience is the authorization server) is the ``assertion``.

    ``assertion``: the JWT, or a callable returning the current one (platforms rotate them:
    e.g. read from a file each time). ``client_id``: sent when the server needs to know it."""

    assertion: str | Callable[[], str] = field(repr=False)
    client_id: str | None = None

    def requests(self, asm: AuthorizationServerMetadata, *, resource: str, scope: str | None) -> Generator[TokenRequest, Answer, None]:
        form = _base_form(JWT_BEARER, resource, scope)
        form["assertion"] = _text(self.assertion)
        if self.client_id:
            form["client_id"] = self.client_id
        yield TokenRequest(asm.token_endpoint, form, {"content-type": "application/x-www-form-urlencoded", "accept": "application/json"})


@dataclass(frozen=True)
class EnterpriseGrant:
    """Enterprise-managed authorization (SEP-990): the user's ID token from the enterprise's
    identity provider is exchanged there (RFC 8693) for an Identity Assertion JWT Authorization
    Grant (ID-JAG) for the MCP server's authorization server, which the client then presents
    with the JWT bearer grant, authenticated with its own credentials there.

    ``idp_token_endpoint``: the identity provider's token endpoint. ``id_token``: the user's ID
    token (or a callable returning the current one). ``idp_client_id`` / ``idp_client_secret``:
    this client at the identity provider. ``client``: this client at the MCP server's
    authorization server (:class:`ClientCredentialsGrant` for its credentials)."""

    idp_token_endpoint: str
    id_token: str | Callable[[], str] = field(repr=False)
    client: ClientCredentialsGrant
    idp_client_id: str | None = None
    idp_client_secret: str | None = field(default=None, repr=False)

    def requests(self, asm: AuthorizationServerMetadata, *, resource: str, scope: str | None) -> Generator[TokenRequest, Answer, None]:
        form = {"grant_type": TOKEN_EXCHANGE, "requested_token_type": ID_JAG_TYPE, "audience": asm.issuer,
                "resource": resource, "subject_token": _text(self.id_token), "subject_token_type": ID_TOKEN_TYPE}
        if scope:
            form["scope"] = scope
        headers = {"content-type": "application/x-www-form-urlencoded", "accept": "application/json"}
        if self.idp_client_id:
            method = "client_secret_basic" if self.idp_client_secret else "none"
            headers = client_authentication(ClientInfo(self.idp_client_id, self.idp_client_secret), method, form)
        status, doc = yield TokenRequest(self.idp_token_endpoint, form, headers, what="the identity provider's token endpoint",
                                         at_authorization_server=False)
        id_jag = read_id_jag(status, doc)
        form = _base_form(JWT_BEARER, resource, scope)
        form["assertion"] = id_jag
        yield TokenRequest(asm.token_endpoint, form, self.client.authenticate(asm, form))


def read_id_jag(status: int, doc: Any) -> str:
    """The ID-JAG of a token exchange response (RFC 8693 §2.2.1), or :class:`OAuthError`."""
    if type(doc) is not dict:
        raise OAuthError(f"the identity provider answered the token exchange with HTTP {status} without a JSON object")
    if status != 200 or "error" in doc:
        err = doc.get("error") if type(doc.get("error")) is str else None
        raise OAuthError(f"the identity provider refused the token exchange (HTTP {status}: {err or 'no error code'})", error=err)
    token = doc.get("access_token")
    if type(token) is not str or not token:
        raise OAuthError("the token exchange response has no access_token")
    if doc.get("issued_token_type") != ID_JAG_TYPE:
        raise OAuthError(f"the token exchange issued {doc.get('issued_token_type')!r}, not an ID-JAG")
    return token
