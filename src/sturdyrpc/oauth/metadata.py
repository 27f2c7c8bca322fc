"""Discovery without I/O: which URLs to try, in which order, and what a metadata document says.

- Protected resource metadata (RFC 9728; MCP 2025-06-18 and later): the ``resource_metadata``
  URL of the ``WWW-Authenticate`` challenge when there is one, else the path-based well-known
  URL, then the root one (:func:`protected_resource_metadata_urls`).
- Authorization server metadata (RFC 8414 §3.1, OpenID Connect Discovery 1.0, RFC 8414 §5): the
  priority order of the MCP spec (:func:`authorization_server_metadata_urls`).
- The 2025-03-26 path, for servers without protected resource metadata: the authorization base
  URL is the MCP URL without its path (:func:`legacy_authorization_base`), its RFC 8414 document,
  else the default endpoints ``/authorize``, ``/token``, ``/register``
  (:func:`legacy_default_metadata`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .errors import OAuthError
from .targets import is_loopback_host

__all__ = [
    "ProtectedResourceMetadata",
    "AuthorizationServerMetadata",
    "canonical_resource",
    "resource_allowed",
    "protected_resource_metadata_urls",
    "authorization_server_metadata_urls",
    "legacy_authorization_base",
    "legacy_default_metadata",
    "same_issuer",
    "is_secure_url",
]

PRM_SUFFIX = "/.well-known/oauth-protected-resource"
OAUTH_SUFFIX = "/.well-known/oauth-authorization-server"
OIDC_SUFFIX = "/.well-known/openid-configuration"


def canonical_resource(url: str) -> str:
    """The canonical URI of an MCP server (RFC 8707 §2): lower-case scheme and host, no fragment,
    no trailing slash on the path (the MCP spec's preferred form)."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc:
        raise OAuthError(f"not an absolute URL: {url!r}")
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))


def _origin(url: str) -> str:
    p = urlsplit(url)
    return urlunsplit((p.scheme.lower(), p.netloc.lower(), "", "", ""))


def resource_allowed(resource: str, server_url: str) -> bool:
    """Whether protected resource metadata naming ``resource`` may be used for ``server_url``.

    The same origin, and the resource's path is the server URL's path or a path-segment prefix
    of it (a root resource covers ``/mcp``; ``/mc`` does not cover ``/mcp``)."""
    try:
        r, s = urlsplit(canonical_resource(resource)), urlsplit(canonical_resource(server_url))
    except OAuthError:
        return False
    if (r.scheme, r.netloc) != (s.scheme, s.netloc):
        return False
    rp, sp = r.path.rstrip("/"), s.path.rstrip("/")
    return sp == rp or sp.startswith(rp + "/")


def protected_resource_metadata_urls(server_url: str, resource_metadata: str | None = None) -> list[str]:
    """Where to look for the protected resource metadata of ``server_url``, in order.

    The challenge's ``resource_metadata`` when given (MUST be used); otherwise the path-based
    well-known URL (RFC 9728 §3.1: the suffix inserted between host and path), then the root one."""
    if resource_metadata:
        return [resource_metadata]
    p = urlsplit(server_url)
    path = p.path.rstrip("/")
    urls = []
    if path:
        urls.append(urlunsplit((p.scheme, p.netloc, PRM_SUFFIX + path, p.query, "")))
    urls.append(urlunsplit((p.scheme, p.netloc, PRM_SUFFIX, "", "")))
    return urls


def authorization_server_metadata_urls(issuer: str) -> list[str]:
    """The MCP spec's order for an issuer with a path (``https://as/tenant1``): RFC 8414 path
    insertion, OIDC path insertion, OIDC path appending; without a path: RFC 8414, then OIDC."""
    p = urlsplit(issuer)
    path = p.path.rstrip("/")

    def at(path_: str) -> str:
        return urlunsplit((p.scheme, p.netloc, path_, "", ""))

    if path:
        return [at(OAUTH_SUFFIX + path), at(OIDC_SUFFIX + path), at(path + OIDC_SUFFIX)]
    return [at(OAUTH_SUFFIX), at(OIDC_SUFFIX)]


def legacy_authorization_base(server_url: str) -> str:
    """2025-03-26: the authorization base URL is the MCP server URL with its path discarded."""
    return _origin(server_url)


def same_issuer(a: str, b: str) -> bool:
    """RFC 8414 §3.3 identity, reading an empty path and ``/`` as the same URL (RFC 3986 §6.2.3)."""

    def norm(u: str) -> str:
        p = urlsplit(u)
        return urlunsplit((p.scheme.lower(), p.netloc.lower(), p.path or "/", p.query, p.fragment))

    return norm(a) == norm(b)


def is_secure_url(url: str) -> bool:
    """OAuth 2.1 §1.5 as MCP applies it: https, or http to a loopback host (``127.0.0.0/8``,
    ``::1``, ``localhost``: local development, loopback redirect URIs)."""
    try:
        p = urlsplit(url)
        host = p.hostname
    except ValueError:
        return False
    if p.scheme == "https":
        return bool(host)
    return p.scheme == "http" and is_loopback_host(host)


def _str_list(v: Any) -> list[str] | None:
    if type(v) is list and all(type(x) is str for x in v):
        return list(v)
    return None


def _opt_str(doc: dict[str, Any], key: str) -> str | None:
    v = doc.get(key)
    return v if type(v) is str and v else None


@dataclass(frozen=True)
class ProtectedResourceMetadata:
    """The members of RFC 9728 metadata an MCP client acts on."""

    resource: str
    authorization_servers: list[str]
    scopes_supported: list[str] | None = None

    @classmethod
    def from_json(cls, doc: Any) -> ProtectedResourceMetadata:
        """Validate and read a decoded document; :class:`OAuthError` says what is wrong."""
        if type(doc) is not dict:
            raise OAuthError("protected resource metadata is not a JSON object")
        resource = _opt_str(doc, "resource")
        if resource is None:
            raise OAuthError("protected resource metadata has no 'resource'")
        servers = _str_list(doc.get("authorization_servers"))
        if not servers:
            raise OAuthError("protected resource metadata names no authorization server")
        return cls(resource, servers, _str_list(doc.get("scopes_supported")))


@dataclass(frozen=True)
class AuthorizationServerMetadata:
    """The members of RFC 8414 / OpenID provider metadata the client acts on."""

    issuer: str
    #: None when the document lists none: RFC 8414 makes it optional for an authorization server
    #: without a grant that uses it (only the grants without a user can be used then).
    authorization_endpoint: str | None
    token_endpoint: str
    registration_endpoint: str | None = None
    scopes_supported: list[str] | None = None
    code_challenge_methods_supported: list[str] | None = None
    token_endpoint_auth_methods_supported: list[str] | None = None
    grant_types_supported: list[str] | None = None
    client_id_metadata_document_supported: bool = False
    #: RFC 9207: the authorization response carries ``iss``.
    authorization_response_iss_parameter_supported: bool = False
    #: False for the 2025-03-26 default endpoints (no document was found): PKCE is assumed.
    from_document: bool = True
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, doc: Any) -> AuthorizationServerMetadata:
        """Validate and read a decoded document; :class:`OAuthError` says what is wrong."""
        if type(doc) is not dict:
            raise OAuthError("authorization server metadata is not a JSON object")
        missing = [k for k in ("issuer", "token_endpoint") if _opt_str(doc, k) is None]
        if missing:
            raise OAuthError(f"authorization server metadata lacks {', '.join(missing)}")
        return cls(
            issuer=doc["issuer"],
            authorization_endpoint=_opt_str(doc, "authorization_endpoint"),
            token_endpoint=doc["token_endpoint"],
            registration_endpoint=_opt_str(doc, "registration_endpoint"),
            scopes_supported=_str_list(doc.get("scopes_supported")),
            code_challenge_methods_supported=_str_list(doc.get("code_challenge_methods_supported")),
            token_endpoint_auth_methods_supported=_str_list(doc.get("token_endpoint_auth_methods_supported")),
            grant_types_supported=_str_list(doc.get("grant_types_supported")),
            client_id_metadata_document_supported=doc.get("client_id_metadata_document_supported") is True,
            authorization_response_iss_parameter_supported=doc.get("authorization_response_iss_parameter_supported") is True,
            extra=doc,
        )

    def require_secure_endpoints(self) -> None:
        """Authorization server endpoints MUST be served over HTTPS (loopback http aside)."""
        for name in ("issuer", "authorization_endpoint", "token_endpoint", "registration_endpoint"):
            value = getattr(self, name)
            if value is not None and not is_secure_url(value):
                raise OAuthError(f"the authorization server's {name} {value!r} is not https")

    def require_pkce_s256(self) -> None:
        """MCP: without ``code_challenge_methods_supported`` the client MUST refuse to proceed;
        S256 is the method we use, so it must be listed."""
        if not self.from_document:
            return
        methods = self.code_challenge_methods_supported
        if methods is None:
            raise OAuthError("the authorization server does not advertise PKCE (no code_challenge_methods_supported)")
        if "S256" not in methods:
            raise OAuthError(f"the authorization server does not support PKCE S256 (only {', '.join(methods) or 'none'})")


def legacy_default_metadata(base: str) -> AuthorizationServerMetadata:
    """2025-03-26 "fallbacks for servers without metadata discovery": the default endpoints."""
    return AuthorizationServerMetadata(
        issuer=base,
        authorization_endpoint=base + "/authorize",
        token_endpoint=base + "/token",
        registration_endpoint=base + "/register",
        from_document=False,
    )
