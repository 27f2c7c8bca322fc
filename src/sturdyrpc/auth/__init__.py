"""OAuth 2.1 resource-server support for the Streamable HTTP server (MCP authorization).

- :class:`Principal`: who a verified token stands for (subject, scopes, client id, claims);
  :func:`identity_of`: the one rule for "the same principal" (what sessions, tasks and
  ``requestState`` are bound to).
- Verifiers (:class:`TokenVerifier`): :class:`JWTVerifier` (JWTs checked against the issuer's
  JWKS; needs the ``auth`` extra, PyJWT), :class:`IntrospectionVerifier` (opaque tokens, RFC
  7662), :class:`FunctionVerifier` (your own function).
- :class:`ResourceServer`: put it in ``HTTPSecurity(auth=...)``: 401/403 with RFC 6750/9728
  challenges, server-wide scopes, the RFC 9728 metadata document.

The pure parts (:func:`verify_jwt`, :func:`principal_from_introspection`,
:func:`bearer_challenge`, :class:`ProtectedResourceMetadata`) do no I/O. Importing this
package never needs PyJWT; building a JWT verifier without it raises ModuleNotFoundError with
``pip install 'sturdyrpc[auth]'``. See ``docs/AUTH.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .challenge import bearer_challenge
    from .errors import InvalidToken, UnknownKey, VerificationUnavailable
    from .introspection import IntrospectionVerifier, principal_from_introspection
    from .jwks import JWKSCache, JWTVerifier
    from .jwt_verify import DEFAULT_ALGORITHMS, JWTRules, KeySet, verify_jwt
    from .metadata import WELL_KNOWN, ProtectedResourceMetadata, well_known_path, well_known_url
    from .principal import Principal, UnidentifiedPrincipal, identity_of, missing_scopes, parse_scopes, scopes_of
    from .resource_server import ResourceServer, insufficient_scope_refusal
    from .verifier import FunctionVerifier, TokenVerifier

#: Where each public name lives: imported on first use, so that a command importing
#: ``sturdyrpc.auth.options`` for its argument parser pays for nothing else.
_HOMES = {
    "bearer_challenge": ".challenge",
    "InvalidToken": ".errors",
    "UnknownKey": ".errors",
    "VerificationUnavailable": ".errors",
    "IntrospectionVerifier": ".introspection",
    "principal_from_introspection": ".introspection",
    "JWKSCache": ".jwks",
    "JWTVerifier": ".jwks",
    "DEFAULT_ALGORITHMS": ".jwt_verify",
    "JWTRules": ".jwt_verify",
    "KeySet": ".jwt_verify",
    "verify_jwt": ".jwt_verify",
    "WELL_KNOWN": ".metadata",
    "ProtectedResourceMetadata": ".metadata",
    "well_known_path": ".metadata",
    "well_known_url": ".metadata",
    "Principal": ".principal",
    "UnidentifiedPrincipal": ".principal",
    "identity_of": ".principal",
    "missing_scopes": ".principal",
    "parse_scopes": ".principal",
    "scopes_of": ".principal",
    "ResourceServer": ".resource_server",
    "insufficient_scope_refusal": ".resource_server",
    "FunctionVerifier": ".verifier",
    "TokenVerifier": ".verifier",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "Principal",
    "identity_of",
    "UnidentifiedPrincipal",
    "parse_scopes",
    "scopes_of",
    "missing_scopes",
    "InvalidToken",
    "UnknownKey",
    "VerificationUnavailable",
    "TokenVerifier",
    "FunctionVerifier",
    "JWTVerifier",
    "JWKSCache",
    "JWTRules",
    "KeySet",
    "verify_jwt",
    "DEFAULT_ALGORITHMS",
    "IntrospectionVerifier",
    "principal_from_introspection",
    "ResourceServer",
    "insufficient_scope_refusal",
    "ProtectedResourceMetadata",
    "WELL_KNOWN",
    "well_known_path",
    "well_known_url",
    "bearer_challenge",
]
