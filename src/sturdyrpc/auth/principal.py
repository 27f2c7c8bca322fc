"""Who a verified access token stands for, and what it may do (sans-I/O)."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..request_context import current_principal

__all__ = ["Principal", "parse_scopes", "scopes_of", "missing_scopes", "principal_source", "request_principal"]

#: Set by a transport whose connection outlives one HTTP request (a Streamable HTTP session
#: runs its server in a task of its own, which sees only the principal that opened it): a
#: function returning the principal of the connection's latest request.
principal_source: contextvars.ContextVar[Callable[[], Any] | None] = contextvars.ContextVar("sturdyrpc_principal_source", default=None)


def request_principal() -> Any:
    """The principal of the request being served: the connection's latest one where a
    transport tracks it (:data:`principal_source`), else
    :data:`~sturdyrpc.request_context.current_principal` (None without authentication)."""
    source = principal_source.get()
    return source() if source is not None else current_principal.get()


@dataclass(frozen=True)
class Principal:
    """The verified identity behind an access token.

    Two principals are equal when issuer, subject and client id are: a refreshed token (new
    expiry, other scopes) is the same principal, so a Streamable HTTP session opened with the
    old token stays usable with the new one (sessions are bound to their principal).
    ``scopes`` and ``claims`` still describe the token of the request at hand.
    """

    subject: str
    scopes: frozenset[str] = field(default=frozenset(), compare=False)
    client_id: str | None = None
    issuer: str | None = None
    #: The token's claims (JWT) or the introspection response (RFC 7662), as verified.
    claims: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: ``exp`` of the token (seconds since the epoch), when known.
    expires_at: float | None = field(default=None, compare=False)


def parse_scopes(value: Any) -> frozenset[str]:
    """Scopes from a ``scope`` claim (space-separated string, RFC 6749 §3.3 / RFC 9068) or an
    ``scp`` claim (a list of strings, as some identity providers issue). Anything else: none."""
    if isinstance(value, str):
        return frozenset(s for s in value.split(" ") if s)
    if isinstance(value, (list, tuple)):
        return frozenset(s for s in value if isinstance(s, str) and s and " " not in s)
    return frozenset()


def scopes_of(principal: Any) -> frozenset[str] | None:
    """The scopes ``principal`` holds: None when there is no principal (no authentication
    configured: scopes are not enforced); a :class:`Principal`'s scopes; for a principal of
    another type (a custom ``BearerAuth`` verifier), its ``scopes`` attribute when it has one,
    else none."""
    if principal is None:
        return None
    if isinstance(principal, Principal):
        return principal.scopes
    value = getattr(principal, "scopes", None)
    if isinstance(value, (set, frozenset)):
        return frozenset(s for s in value if isinstance(s, str))
    return parse_scopes(value)


def missing_scopes(principal: Any, required: Iterable[str]) -> tuple[str, ...]:
    """The scopes of ``required`` that ``principal`` lacks, sorted (empty: allowed).

    Without a principal (no authentication) nothing is missing: scopes mean something only
    where tokens are checked.
    """
    held = scopes_of(principal)
    if held is None:
        return ()
    return tuple(sorted(s for s in set(required) if s not in held))
