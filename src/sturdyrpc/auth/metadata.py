"""OAuth 2.0 Protected Resource Metadata (RFC 9728) for an MCP endpoint (sans-I/O)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .. import codec

__all__ = ["ProtectedResourceMetadata", "WELL_KNOWN", "well_known_path", "well_known_url", "check_resource_url"]

#: The well-known path prefix of RFC 9728 §3.
WELL_KNOWN = "/.well-known/oauth-protected-resource"


def check_resource_url(resource: str) -> str:
    """``resource`` if it is a valid resource identifier (RFC 8707 §2: absolute ``http``/``https``
    URI, no fragment; RFC 9728 §1.2 adds no query), else ValueError."""
    parts = urlsplit(resource)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"the resource must be an absolute http(s) URL: {resource!r}")
    if parts.fragment or "#" in resource:
        raise ValueError(f"the resource must not have a fragment: {resource!r}")
    if parts.query:
        raise ValueError(f"the resource must not have a query: {resource!r}")
    return resource


def well_known_path(resource: str) -> str:
    """The path of the metadata document of ``resource`` (RFC 9728 §3.1: the well-known prefix
    inserted between host and path; a trailing slash of the path dropped)."""
    path = urlsplit(resource).path.rstrip("/")
    return WELL_KNOWN + path


def well_known_url(resource: str) -> str:
    """The URL of the metadata document of ``resource`` (what ``resource_metadata`` names)."""
    parts = urlsplit(resource)
    return urlunsplit((parts.scheme, parts.netloc, well_known_path(resource), "", ""))


@dataclass(frozen=True)
class ProtectedResourceMetadata:
    """The metadata document (RFC 9728 §2) of one protected resource."""

    resource: str
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...] = ()
    bearer_methods_supported: tuple[str, ...] = ("header",)
    resource_name: str | None = None
    resource_documentation: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def build(cls, resource: str, authorization_servers: Iterable[str], scopes_supported: Iterable[str] = (),
              **optional: Any) -> ProtectedResourceMetadata:
        """Validated: ``resource`` a resource identifier, at least one authorization server (the
        MCP authorization spec requires one)."""
        servers = tuple(authorization_servers)
        if not servers:
            raise ValueError("at least one authorization server is required")
        for s in servers:
            check_resource_url(s)  # an issuer identifier has the same shape: https URL, no query or fragment
        return cls(check_resource_url(resource), servers, tuple(dict.fromkeys(scopes_supported)), **optional)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"resource": self.resource, "authorization_servers": list(self.authorization_servers)}
        if self.scopes_supported:
            d["scopes_supported"] = list(self.scopes_supported)
        d["bearer_methods_supported"] = list(self.bearer_methods_supported)
        if self.resource_name is not None:
            d["resource_name"] = self.resource_name
        if self.resource_documentation is not None:
            d["resource_documentation"] = self.resource_documentation
        for k, v in self.extra.items():
            d.setdefault(k, v)
        return d

    def to_json(self) -> bytes:
        """The document as sent (``Content-Type: application/json``, RFC 9728 §3.2)."""
        return codec.encode(self.to_dict())
