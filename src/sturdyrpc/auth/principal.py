"""Who a verified access token stands for, and what it may do (sans-I/O).

:func:`identity_of` is the one definition of "the same principal": Streamable HTTP sessions
(local and shared), tasks and ``requestState`` tokens are bound to it, and
:class:`Principal` equality is it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .. import codec

__all__ = ["Principal", "UnidentifiedPrincipal", "identity_of", "parse_scopes", "scopes_of", "missing_scopes"]


class UnidentifiedPrincipal(TypeError):
    """A principal whose identity is not well defined (see :func:`identity_of`): nothing can
    be bound to it, so no session, task or ``requestState`` is made for it."""


@dataclass(frozen=True, eq=False)
class Principal:
    """The verified identity behind an access token.

    Two principals are equal when :func:`identity_of` says they are the same: issuer, subject
    and client id (or the claims :attr:`identified_by` names). A refreshed token (new expiry,
    other scopes) is the same principal, so a Streamable HTTP session opened with the old token
    stays usable with the new one; another client of the same user, or a token of another issuer
    with the same subject, is another principal. ``scopes`` and ``claims`` describe the token of
    the request at hand.
    """

    subject: str
    scopes: frozenset[str] = frozenset()
    client_id: str | None = None
    issuer: str | None = None
    #: The token's claims (JWT) or the introspection response (RFC 7662), as verified.
    claims: Mapping[str, Any] = field(default_factory=dict, repr=False)
    #: ``exp`` of the token (seconds since the epoch), when known.
    expires_at: float | None = None
    #: The claims that identify the principal, ``(name, value)``, as its verifier chose them (an
    #: introspection answer's ``iss``, ``sub``, ``username`` and ``client_id`` as present); empty:
    #: ``iss``, ``sub`` and ``client_id`` from :attr:`issuer`, :attr:`subject` and :attr:`client_id`.
    identified_by: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Principal):
            return NotImplemented
        return self._identity == other._identity

    def __hash__(self) -> int:
        return hash(self._identity)

    @cached_property
    def _identity(self) -> str:
        # Cached: sessions compare it on every request. The principal is frozen, so it never goes stale.
        pairs = self.identified_by or tuple(
            (name, value) for name, value in (("iss", self.issuer), ("sub", self.subject), ("client_id", self.client_id))
            if value is not None)
        return codec.encode(["principal", [[name, value] for name, value in pairs]]).decode()


def identity_of(principal: Any) -> str | None:
    """The one rule for "the same principal": a string, the same in every process, equal for two
    principals exactly when they are the same one. None for no principal (no authentication).

    - a :class:`Principal`: issuer, subject and client id (or the claims its
      :attr:`~Principal.identified_by` names); scopes, expiry and the other claims are left out,
      so a refreshed token of the same client is the same principal;
    - a principal of another type (a custom ``BearerAuth`` verifier's): its type and value, when
      equality is well defined by value: a ``str``, an ``int``, a ``bool``, a finite ``float``,
      and tuples, lists, frozensets, mappings with string keys and frozen dataclasses of these;
      anything else raises :class:`UnidentifiedPrincipal` (an object compared by identity alone
      is never the same across requests, let alone across processes).
    """
    if principal is None:
        return None
    if isinstance(principal, Principal):
        return principal._identity
    return codec.encode(_value_identity(principal)).decode()


def _value_identity(value: Any) -> Any:
    """``value`` as a JSON value naming its type (so ``"1"`` and ``1`` differ), or :class:`UnidentifiedPrincipal`."""
    if value is None or type(value) in (str, int, bool):
        return [type(value).__name__, value]
    if type(value) is float and math.isfinite(value):
        return ["float", value]
    if isinstance(value, Principal):
        return ["principal", value._identity]
    if type(value) in (tuple, list):
        return [type(value).__name__, [_value_identity(v) for v in value]]
    if type(value) is frozenset:
        return ["frozenset", sorted((_value_identity(v) for v in value), key=codec.encode)]
    if isinstance(value, Mapping) and all(type(k) is str for k in value):
        return ["mapping", [[k, _value_identity(value[k])] for k in sorted(value)]]
    params = getattr(type(value), "__dataclass_params__", None)
    if dataclasses.is_dataclass(value) and params is not None and params.frozen and params.eq:
        kind = f"{type(value).__module__}.{type(value).__qualname__}"
        return ["dataclass", kind, [[f.name, _value_identity(getattr(value, f.name))] for f in dataclasses.fields(value) if f.compare]]
    raise UnidentifiedPrincipal(f"a principal of type {type(value).__name__} has no well-defined identity")


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
