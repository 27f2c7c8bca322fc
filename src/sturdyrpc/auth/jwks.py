"""JWT verification against an issuer's JWKS: the key cache (I/O) around :func:`verify_jwt`.

The key set is fetched on first use and kept for ``ttl`` seconds. A token naming an unknown
``kid`` (the issuer rotated its keys) triggers one refresh, at most once per
``refresh_interval`` seconds (a flood of made-up ``kid`` values cannot turn into a flood of
fetches). Fetch failures never let a token through: with no usable key set the request gets
503; a key set older than ``ttl`` keeps serving while the issuer cannot be reached, for at most
``max_stale`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from .errors import InvalidToken, UnknownKey, VerificationUnavailable
from .fetch import GetJSON, httpx_get_json
from .jwt_verify import DEFAULT_ALGORITHMS, JWTRules, KeySet, require_pyjwt, verify_jwt
from .principal import Principal

__all__ = ["JWKSCache", "JWTVerifier"]

log = logging.getLogger("sturdyrpc.auth")


class JWKSCache:
    """The signing keys published at ``url``, fetched when needed."""

    def __init__(self, url: str, *, fetch: GetJSON | None = None, ttl: float = 300.0, refresh_interval: float = 10.0,
                 max_stale: float = 3600.0, clock: Callable[[], float] = time.monotonic) -> None:
        require_pyjwt()
        self.url = url
        self.fetch = fetch if fetch is not None else httpx_get_json()
        self.ttl = ttl
        self.refresh_interval = refresh_interval
        self.max_stale = max_stale
        self.clock = clock
        self._keys: KeySet | None = None
        self._fetched_at = 0.0  # when the key set in hand was fetched
        self._tried_at: float | None = None  # the last attempt, successful or not
        self._lock = asyncio.Lock()

    async def keys(self) -> KeySet:
        """The key set, fetched first if there is none or it is older than ``ttl``."""
        if self._keys is not None and self.clock() - self._fetched_at < self.ttl:
            return self._keys
        return await self._refresh()

    async def refresh_for(self, kid: str | None) -> KeySet | None:
        """A fresh key set because a token named ``kid``, which the cached set lacks; None when
        a refresh happened too recently to try again (the token is then refused)."""
        if self._tried_at is not None and self.clock() - self._tried_at < self.refresh_interval:
            return None
        return await self._refresh()

    async def _refresh(self) -> KeySet:
        async with self._lock:
            now = self.clock()
            if self._tried_at is not None and now - self._tried_at < self.refresh_interval:
                # Fetched or tried moments ago (maybe while this request waited for the lock):
                # a down issuer is not asked again for every request.
                return self._usable(now, "JWKS fetched moments ago")
            self._tried_at = now
            try:
                keys = KeySet.from_jwks(await self.fetch(self.url))
            except VerificationUnavailable as exc:
                return self._failed(now, exc.reason)
            except ValueError:
                return self._failed(now, "not a JWKS document")
            if not len(keys):
                return self._failed(now, "no usable signing key")
            self._keys, self._fetched_at = keys, now
            return keys

    def _failed(self, now: float, reason: str) -> KeySet:
        log.warning("JWKS %s could not be fetched: %s", self.url, reason)
        return self._usable(now, reason)

    def _usable(self, now: float, reason: str) -> KeySet:
        """The keys in hand unless there are none or they are older than ``ttl + max_stale``."""
        if self._keys is not None and now - self._fetched_at < self.ttl + self.max_stale:
            return self._keys
        raise VerificationUnavailable(f"JWKS unavailable: {reason}")


class JWTVerifier:
    """Verifies JWT access tokens issued by ``issuer`` for ``audience`` (RFC 8707: this MCP
    server's URL) with the keys published at ``jwks_url``.

    ``algorithms``: the allow-list (asymmetric only; ``none`` and HS* are refused when the
    verifier is built). ``leeway``: seconds of clock skew allowed on ``exp``/``nbf``.
    ``clock``: seconds since the epoch (tests inject one). Needs the ``auth`` extra (PyJWT):
    without it, building one raises ModuleNotFoundError naming ``pip install 'sturdyrpc[auth]'``.
    """

    def __init__(self, issuer: str, jwks_url: str, audience: str | Iterable[str], *,
                 algorithms: Iterable[str] = DEFAULT_ALGORITHMS, leeway: float = 30.0,
                 clock: Callable[[], float] = time.time, jwks: JWKSCache | None = None, fetch: GetJSON | None = None) -> None:
        require_pyjwt()
        self.rules = JWTRules.build(issuer, audience, algorithms, leeway)
        self.jwks = jwks if jwks is not None else JWKSCache(jwks_url, fetch=fetch)
        self.clock = clock

    async def verify(self, token: str) -> Principal:
        """The principal of ``token``; :class:`InvalidToken` or :class:`VerificationUnavailable`."""
        keys = await self.jwks.keys()
        try:
            return verify_jwt(token, keys, self.rules, self.clock())
        except UnknownKey as unknown:
            fresh = await self.jwks.refresh_for(unknown.kid)
            if fresh is None:
                raise
        try:
            return verify_jwt(token, fresh, self.rules, self.clock())
        except UnknownKey:
            raise InvalidToken("unknown signing key") from None
