"""The ``WWW-Authenticate: Bearer`` challenge (RFC 6750 §3, ``resource_metadata`` from RFC 9728 §5.1)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["bearer_challenge", "ERRORS"]

#: The error codes of RFC 6750 §3.1.
ERRORS = frozenset({"invalid_request", "invalid_token", "insufficient_scope"})


def _quoted(name: str, value: str) -> str:
    # RFC 6750 §3: scope, error and error_description values exclude '"' and '\' (and control
    # characters), so a quoted-string needs no escapes; refuse rather than emit a broken header.
    if any(c in '"\\' or not (0x20 <= ord(c) <= 0x7E) for c in value):
        raise ValueError(f"{name} holds a character a Bearer challenge cannot carry")
    return f'{name}="{value}"'


def bearer_challenge(
    *,
    realm: str | None = None,
    error: str | None = None,
    error_description: str | None = None,
    scope: Iterable[str] | None = None,
    resource_metadata: str | None = None,
) -> str:
    """The value of a ``WWW-Authenticate`` header for the Bearer scheme.

    ``error`` is one of :data:`ERRORS` or None (a request without credentials gets no error
    code, RFC 6750 §3.1); ``scope`` is written space-separated, in the order given (an empty
    collection: no ``scope`` parameter). Parameters appear in a fixed order: realm,
    resource_metadata, scope, error, error_description.
    """
    if error is not None and error not in ERRORS:
        raise ValueError(f"not an RFC 6750 error code: {error!r}")
    params: list[str] = []
    if realm is not None:
        params.append(_quoted("realm", realm))
    if resource_metadata is not None:
        params.append(_quoted("resource_metadata", resource_metadata))
    scopes = list(scope) if scope is not None else []
    if scopes:
        params.append(_quoted("scope", " ".join(scopes)))
    if error is not None:
        params.append(_quoted("error", error))
        if error_description is not None:
            params.append(_quoted("error_description", error_description))
    return "Bearer " + ", ".join(params) if params else "Bearer"
