"""The OAuth 2.1 requests of an MCP client, built and read without I/O.

Each function takes what is known (metadata, client information, PKCE, scopes) and returns
what to send (a URL, a form and headers, a JSON body), or reads what came back. The HTTP
calls are made by :class:`~sturdyrpc.oauth.provider.OAuthClientProvider`.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from .challenge import BearerChallenge
from .errors import OAuthError
from .metadata import AuthorizationServerMetadata, ProtectedResourceMetadata
from .pkce import PKCE

__all__ = [
    "ClientInfo",
    "Tokens",
    "select_scope",
    "step_up_scope",
    "choose_auth_method",
    "registration_request",
    "read_registration",
    "authorization_url",
    "read_authorization_response",
    "code_token_request",
    "refresh_token_request",
    "read_token_response",
    "client_authentication",
]

#: RFC 8414 §2: the default when ``token_endpoint_auth_methods_supported`` is omitted.
DEFAULT_AUTH_METHOD = "client_secret_basic"
SUPPORTED_AUTH_METHODS = ("client_secret_basic", "client_secret_post", "none")


@dataclass(frozen=True)
class ClientInfo:
    """A client's identity at one authorization server: pre-registered, a Client ID Metadata
    Document URL, or the result of dynamic registration.

    ``token_endpoint_auth_method`` None means: pick one from the server's metadata.
    """

    client_id: str
    client_secret: str | None = None
    token_endpoint_auth_method: str | None = None
    redirect_uris: tuple[str, ...] = ()
    #: "pre-registered", "metadata-document" or "dynamic".
    kind: str = "pre-registered"

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["redirect_uris"] = list(self.redirect_uris)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ClientInfo:
        return cls(
            client_id=str(d["client_id"]),
            client_secret=d.get("client_secret"),
            token_endpoint_auth_method=d.get("token_endpoint_auth_method"),
            redirect_uris=tuple(d.get("redirect_uris") or ()),
            kind=str(d.get("kind") or "pre-registered"),
        )

    def __repr__(self) -> str:  # the secret stays out of logs and tracebacks
        secret = "***" if self.client_secret else None
        return f"ClientInfo(client_id={self.client_id!r}, client_secret={secret}, method={self.token_endpoint_auth_method!r}, kind={self.kind!r})"


@dataclass(frozen=True)
class Tokens:
    """What the token endpoint granted. ``expires_at`` is a Unix time; ``scope`` is what was
    granted (or, when the server did not say, what was requested: RFC 6749 §5.1)."""

    access_token: str
    token_type: str = "Bearer"
    refresh_token: str | None = None
    expires_at: float | None = None
    scope: str | None = None
    #: The ``resource`` the token was requested for (RFC 8707).
    resource: str | None = None
    #: The issuer that granted it: tokens are never sent to a server of another issuer.
    issuer: str | None = None

    def expired(self, now: float | None = None, leeway: float = 30.0) -> bool:
        """Whether the token is past (or within ``leeway`` seconds of) its expiry."""
        if self.expires_at is None:
            return False
        return (time.time() if now is None else now) >= self.expires_at - leeway

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Tokens:
        token = d.get("access_token")
        if type(token) is not str:
            raise TypeError("no access_token")
        expires = d.get("expires_at")
        return cls(
            access_token=token,
            token_type=str(d.get("token_type") or "Bearer"),
            refresh_token=d.get("refresh_token"),
            expires_at=float(expires) if isinstance(expires, (int, float)) else None,
            scope=d.get("scope"),
            resource=d.get("resource"),
            issuer=d.get("issuer"),
        )

    def __repr__(self) -> str:
        return f"Tokens(token_type={self.token_type!r}, scope={self.scope!r}, expires_at={self.expires_at!r}, refresh={'yes' if self.refresh_token else 'no'})"


def _join(scopes: list[str]) -> str | None:
    return " ".join(scopes) if scopes else None


def select_scope(challenge: BearerChallenge | None, prm: ProtectedResourceMetadata | None) -> str | None:
    """The MCP scope selection strategy: the challenge's ``scope``, else every scope of
    ``scopes_supported``, else None (omit the parameter)."""
    if challenge is not None and challenge.scopes:
        return _join(challenge.scopes)
    if prm is not None and prm.scopes_supported:
        return _join(list(dict.fromkeys(prm.scopes_supported)))
    return None


def step_up_scope(current: str | None, challenge: BearerChallenge) -> str | None:
    """The scope to request after ``403 insufficient_scope``: the challenged scopes (authoritative
    for this request) plus those already held, so that stepping up loses no permission."""
    scopes = list(dict.fromkeys((current or "").split() + challenge.scopes))
    return _join(scopes)


def choose_auth_method(client: ClientInfo, asm: AuthorizationServerMetadata) -> str:
    """How to authenticate at the token endpoint: the registered method when known; a client
    without a secret is public (``none``); else the first of basic / post the server supports."""
    if client.token_endpoint_auth_method:
        if client.token_endpoint_auth_method not in SUPPORTED_AUTH_METHODS:
            raise OAuthError(f"unsupported token endpoint auth method {client.token_endpoint_auth_method!r}")
        return client.token_endpoint_auth_method
    if not client.client_secret:
        return "none"
    supported = asm.token_endpoint_auth_methods_supported or [DEFAULT_AUTH_METHOD]
    for method in ("client_secret_basic", "client_secret_post", "none"):
        if method in supported:
            return method
    raise OAuthError(f"no usable token endpoint auth method among {', '.join(supported)}")


def registration_request(
    asm: AuthorizationServerMetadata, *, client_name: str, redirect_uri: str, scope: str | None = None,
    client_uri: str | None = None,
) -> dict[str, Any]:
    """The RFC 7591 registration body. A public client (``none``) when the server allows it, as
    a native app with a loopback redirect cannot keep a secret; else the method it supports."""
    supported = asm.token_endpoint_auth_methods_supported
    if supported is None or "none" in supported:
        method = "none"
    elif "client_secret_basic" in supported:
        method = "client_secret_basic"
    elif "client_secret_post" in supported:
        method = "client_secret_post"
    else:
        raise OAuthError(f"no usable token endpoint auth method among {', '.join(supported)}")
    host = (urlsplit(redirect_uri).hostname or "").lower()
    body: dict[str, Any] = {
        "client_name": client_name,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": method,
        "application_type": "native" if host in ("127.0.0.1", "localhost", "::1") else "web",
    }
    if scope:
        body["scope"] = scope
    if client_uri:
        body["client_uri"] = client_uri
    return body


def read_registration(doc: Any, request: Mapping[str, Any]) -> ClientInfo:
    """The client information of an RFC 7591 §3.2.1 response to ``request``. A response that
    does not echo ``token_endpoint_auth_method`` registered the one that was asked for."""
    if type(doc) is not dict or type(doc.get("client_id")) is not str or not doc["client_id"]:
        raise OAuthError("the registration response has no client_id")
    secret = doc.get("client_secret")
    method = doc.get("token_endpoint_auth_method")
    uris = doc.get("redirect_uris")
    return ClientInfo(
        client_id=doc["client_id"],
        client_secret=secret if type(secret) is str and secret else None,
        token_endpoint_auth_method=method if type(method) is str else request.get("token_endpoint_auth_method"),
        redirect_uris=tuple(uris) if type(uris) is list else tuple(request.get("redirect_uris") or ()),
        kind="dynamic",
    )


def authorization_url(
    asm: AuthorizationServerMetadata, client: ClientInfo, *, redirect_uri: str, pkce: PKCE, state: str,
    resource: str, scope: str | None,
) -> str:
    """The authorization request (OAuth 2.1 §4.1.1) with PKCE S256, ``state`` and the RFC 8707
    ``resource``; ``scope`` only when there is one to ask for."""
    params = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": redirect_uri,
        "state": state,
        "code_challenge": pkce.challenge,
        "code_challenge_method": pkce.method,
        "resource": resource,
    }
    if scope:
        params["scope"] = scope
    if asm.authorization_endpoint is None:
        raise OAuthError("the authorization server lists no authorization_endpoint: the authorization code grant cannot be used")
    p = urlsplit(asm.authorization_endpoint)
    query = (p.query + "&" if p.query else "") + urlencode(params, quote_via=quote)
    return urlunsplit((p.scheme, p.netloc, p.path, query, ""))


def read_authorization_response(
    params: Mapping[str, str], expected_state: str, *, issuer: str | None = None, iss_required: bool = False,
) -> str:
    """The code of the redirect's query; an ``error``, a missing code or another ``state`` fail
    (a response with a wrong state is discarded: it may be an injection). RFC 9207: an ``iss``
    in the response must be ``issuer``, and must be there when the server says it sends one
    (``iss_required``): a response from another authorization server is a mix-up attack."""
    if params.get("state") != expected_state:
        raise OAuthError("the authorization response's state does not match the request (discarded)")
    if issuer is not None and ("iss" in params or iss_required) and params.get("iss") != issuer:
        raise OAuthError("the authorization response's iss is not the authorization server's issuer (RFC 9207; discarded)")
    if "error" in params:
        desc = params.get("error_description")
        raise OAuthError(f"authorization denied: {params['error']}" + (f" ({desc})" if desc else ""), error=params["error"])
    code = params.get("code")
    if not code:
        raise OAuthError("the authorization response carries no code")
    return code


def client_authentication(client: ClientInfo, method: str, form: dict[str, str]) -> dict[str, str]:
    """The headers of a token request authenticated by ``method`` (``client_id`` / ``client_secret``
    added to ``form`` for ``client_secret_post`` and ``none``)."""
    headers = {"content-type": "application/x-www-form-urlencoded", "accept": "application/json"}
    if method == "client_secret_basic":
        if not client.client_secret:
            raise OAuthError("client_secret_basic needs a client secret")
        # RFC 6749 §2.3.1: each part form-urlencoded before base64
        raw = f"{quote(client.client_id, safe='')}:{quote(client.client_secret, safe='')}"
        headers["authorization"] = "Basic " + base64.b64encode(raw.encode()).decode("ascii")
    elif method == "client_secret_post":
        if not client.client_secret:
            raise OAuthError("client_secret_post needs a client secret")
        form["client_id"] = client.client_id
        form["client_secret"] = client.client_secret
    else:
        form["client_id"] = client.client_id
    return headers


def code_token_request(
    asm: AuthorizationServerMetadata, client: ClientInfo, *, code: str, redirect_uri: str, pkce: PKCE, resource: str,
) -> tuple[dict[str, str], dict[str, str]]:
    """The form and headers exchanging a code (OAuth 2.1 §4.1.3) with the verifier and ``resource``."""
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "code_verifier": pkce.verifier,
        "resource": resource,
    }
    headers = client_authentication(client, choose_auth_method(client, asm), form)
    return form, headers


def refresh_token_request(
    asm: AuthorizationServerMetadata, client: ClientInfo, *, refresh_token: str, resource: str, scope: str | None = None,
) -> tuple[dict[str, str], dict[str, str]]:
    """The form and headers of a refresh (OAuth 2.1 §4.3) with the same ``resource``."""
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token, "resource": resource}
    if scope:
        form["scope"] = scope
    headers = client_authentication(client, choose_auth_method(client, asm), form)
    return form, headers


def read_token_response(
    status: int, doc: Any, *, requested_scope: str | None, resource: str, issuer: str, previous_refresh: str | None = None,
    now: float | None = None, dpop: bool = False,
) -> Tokens:
    """The tokens of a successful response (OAuth 2.1 §3.2.3), or :class:`OAuthError` with the
    server's ``error`` (§3.2.4). A refresh response without a new refresh token keeps the old one.
    ``dpop``: the request carried a DPoP proof, so a ``DPoP`` token type (a bound token) is expected too."""
    if type(doc) is not dict:
        raise OAuthError(f"the token endpoint answered HTTP {status} without a JSON object")
    if status != 200 or "error" in doc:
        err = doc.get("error") if type(doc.get("error")) is str else None
        desc = doc.get("error_description") if type(doc.get("error_description")) is str else None
        raise OAuthError(
            f"the token endpoint refused (HTTP {status}: {err or 'no error code'}" + (f", {desc}" if desc else "") + ")", error=err,
        )
    token = doc.get("access_token")
    if type(token) is not str or not token:
        raise OAuthError("the token response has no access_token")
    ttype = doc.get("token_type")
    accepted = ("bearer", "dpop") if dpop else ("bearer",)
    if type(ttype) is not str or ttype.lower() not in accepted:
        raise OAuthError(f"unsupported token_type {ttype!r} ({' or '.join(a.title() if a == 'bearer' else 'DPoP' for a in accepted)} expected)")
    expires_in = doc.get("expires_in")
    expires_at = None
    if isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool) and expires_in > 0:
        expires_at = (time.time() if now is None else now) + float(expires_in)
    refresh = doc.get("refresh_token")
    scope = doc.get("scope")
    return Tokens(
        access_token=token,
        token_type="DPoP" if ttype.lower() == "dpop" else "Bearer",
        refresh_token=refresh if type(refresh) is str and refresh else previous_refresh,
        expires_at=expires_at,
        scope=scope if type(scope) is str else requested_scope,
        resource=resource,
        issuer=issuer,
    )

