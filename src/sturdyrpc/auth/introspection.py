"""Opaque access tokens checked by the authorization server: OAuth 2.0 Token Introspection (RFC 7662).

:func:`principal_from_introspection` is the pure part (introspection response + rules + clock
-> principal or :class:`InvalidToken`); :class:`IntrospectionVerifier` posts the token to the
endpoint (authenticating this resource server, RFC 7662 §2.1) and applies it.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote

from .errors import InvalidToken, VerificationUnavailable
from .fetch import FETCH_TIMEOUT, PostForm, httpx_post_form, within
from .jwt_verify import MAX_TOKEN_BYTES
from .principal import Principal, parse_scopes

__all__ = ["IntrospectionVerifier", "principal_from_introspection"]


def _number(v: Any) -> bool:
    return type(v) in (int, float)


def principal_from_introspection(doc: Any, *, audiences: frozenset[str] | None, issuer: str | None, now: float,
                                 leeway: float = 30.0) -> Principal:
    """The principal an introspection response describes.

    ``active`` must be ``true``; ``exp``/``nbf``, when present, are checked with ``leeway``;
    ``aud`` must name one of ``audiences`` (None: the authorization server is trusted to check
    the audience itself, and a response without ``aud`` is accepted); ``iss``, when ``issuer``
    is given, must equal it. The subject is ``sub``, else ``username``, else ``client_id``; the
    principal is identified by the issuer and each of ``sub``, ``username`` and ``client_id``
    the answer gives (:attr:`Principal.identified_by`).
    """
    if type(doc) is not dict:
        raise InvalidToken("introspection answer is not an object")
    if doc.get("active") is not True:
        raise InvalidToken("inactive")
    exp = doc.get("exp")
    if exp is not None and (not _number(exp) or now > exp + leeway):
        raise InvalidToken("expired")
    nbf = doc.get("nbf")
    if nbf is not None and (not _number(nbf) or now + leeway < nbf):
        raise InvalidToken("not yet valid")
    if audiences is not None:
        aud = doc.get("aud")
        auds = [aud] if type(aud) is str else aud if type(aud) is list else []
        if not any(type(a) is str and a in audiences for a in auds):
            raise InvalidToken("other audience")
    if issuer is not None and doc.get("iss") != issuer:
        raise InvalidToken("other issuer")
    client_id = doc.get("client_id") if type(doc.get("client_id")) is str else None
    subject = next((s for s in (doc.get("sub"), doc.get("username"), client_id) if type(s) is str and s), None)
    if subject is None:
        raise InvalidToken("no subject")
    iss = issuer if issuer is not None else (doc["iss"] if type(doc.get("iss")) is str else None)
    # The answer's whole identity: a subject taken from `username` or `client_id` is not a `sub`.
    named = (("iss", iss), *((k, doc.get(k)) for k in ("sub", "username", "client_id")))
    identified_by = tuple((k, v) for k, v in named if type(v) is str)
    return Principal(subject, parse_scopes(doc.get("scope")), client_id, iss, dict(doc), float(exp) if exp is not None else None,
                     identified_by)


class IntrospectionVerifier:
    """Verifies opaque tokens at an RFC 7662 introspection ``endpoint``.

    This server authenticates to the endpoint with ``client_id``/``client_secret`` (HTTP Basic,
    RFC 7662 §2.1) or with extra ``headers`` (e.g. its own bearer token). ``audience``: the
    values one of which ``aud`` must hold (this server's URL, RFC 8707); None only when the
    authorization server checks audiences itself. Every answer but 200 with JSON, and every
    transport failure, is :class:`VerificationUnavailable` (503), never an acceptance.

    ``cache_ttl`` (seconds, default 0: off): keep an accepted token's principal that long (never
    past its ``exp``; at most ``cache_size`` tokens, kept by hash), trading that much revocation
    delay for one introspection call per token instead of one per request. Refusals are never cached.

    ``timeout``: seconds one introspection call may take, the whole answer included (any
    ``post`` function, yours too, is cut off then: :class:`VerificationUnavailable`, 503).
    """

    def __init__(self, endpoint: str, *, audience: str | Iterable[str] | None, client_id: str | None = None,
                 client_secret: str | None = None, headers: Mapping[str, str] | None = None, issuer: str | None = None,
                 leeway: float = 30.0, clock: Callable[[], float] = time.time, post: PostForm | None = None,
                 cache_ttl: float = 0.0, cache_size: int = 10_000, timeout: float = FETCH_TIMEOUT) -> None:
        if not timeout > 0:
            raise ValueError("timeout must be a positive number of seconds")
        self.endpoint = endpoint
        self.timeout = float(timeout)
        self.cache_ttl = cache_ttl
        self.cache_size = cache_size
        self._cache: dict[bytes, tuple[float, Principal]] = {}
        self.audiences = None if audience is None else frozenset([audience] if isinstance(audience, str) else audience)
        if self.audiences is not None and not self.audiences:
            raise ValueError("audience: give this server's URL (or None to leave the check to the authorization server)")
        self.issuer = issuer
        self.leeway = leeway
        self.clock = clock
        self.post = post if post is not None else httpx_post_form(self.timeout)
        hdrs = {"accept": "application/json"}
        if client_id is not None:
            # RFC 6749 §2.3.1: the id and secret are form-urlencoded before Basic encoding.
            pair = f"{quote(client_id, safe='')}:{quote(client_secret or '', safe='')}"
            hdrs["authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        hdrs.update(headers or {})
        self.headers = hdrs

    async def verify(self, token: str) -> Principal:
        """The principal of ``token``; :class:`InvalidToken` or :class:`VerificationUnavailable`."""
        if len(token) > MAX_TOKEN_BYTES:
            raise InvalidToken("token too long")
        key = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest() if self.cache_ttl > 0 else b""
        if key:
            hit = self._cache.get(key)
            if hit is not None:
                if self.clock() < hit[0]:
                    return hit[1]
                del self._cache[key]
        status, doc = await within(self.timeout, self.post(self.endpoint, {"token": token, "token_type_hint": "access_token"},
                                                           self.headers), "introspection")
        if status != 200 or doc is None:
            raise VerificationUnavailable(f"introspection answered HTTP {status}")
        now = self.clock()
        principal = principal_from_introspection(doc, audiences=self.audiences, issuer=self.issuer, now=now, leeway=self.leeway)
        if key:
            until = now + self.cache_ttl
            if principal.expires_at is not None:
                until = min(until, principal.expires_at)
            if len(self._cache) >= self.cache_size:
                self._cache.pop(next(iter(self._cache)))  # the oldest entry
            self._cache[key] = (until, principal)
        return principal
