"""The resource server's check of DPoP proofs (RFC 9449 §4.3, §7, §9).

A token bound to a key (``cnf.jkt`` in its claims or introspection response) is accepted only
with the ``DPoP`` scheme and exactly one ``DPoP`` header holding a valid proof for this
request: type ``dpop+jwt``, an asymmetric algorithm, a public ``jwk`` whose thumbprint is the
token's ``cnf.jkt`` and whose key verifies the signature, ``htm`` the request's method, ``htu``
its URL (no query or fragment compared), ``ath`` the hash of this access token, ``iat`` within
``window`` seconds of now, a ``jti`` not seen in that window (a replayed proof is refused), and
the server's current ``nonce`` when it requires one. Needs the ``auth`` extra (PyJWT).

The ``jti`` values seen are remembered in the process, or in a store every worker shares
(``DPoPChecker(store=...)``: a :class:`~sturdyrpc.store.Store`, e.g. the Redis one of ``--store``),
so that a proof replayed to another worker is refused too.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

__all__ = ["DPoPChecker", "DPoPRefused", "ReplayStore", "ReplayStoreUnavailable", "bound_key", "ALGORITHMS"]

#: The asymmetric algorithms a proof may use (never ``none`` nor an HMAC).
ALGORITHMS = ("ES256", "ES384", "ES512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "EdDSA")


@dataclass
class DPoPRefused(Exception):
    """A proof refused: ``error`` is ``invalid_dpop_proof`` or ``use_dpop_nonce`` (then ``nonce``
    is the one to use); ``reason`` goes to the log only."""

    error: str
    reason: str
    nonce: str | None = None


class ReplayStore(Protocol):
    """Where the ``jti`` values of several workers are remembered: what a
    :class:`~sturdyrpc.store.Store` offers (its atomic set-if-absent)."""

    async def compare_and_set(self, key: str, expected: bytes | None, value: bytes | None, ttl: float | None = None) -> bool: ...


class ReplayStoreUnavailable(Exception):
    """The shared store of ``jti`` values could not say whether a proof was seen: the request is
    refused as not verifiable now (never accepted unchecked)."""


def bound_key(claims: Any) -> str | None:
    """The ``cnf.jkt`` thumbprint a token's claims bind it to, or None (a bearer token)."""
    cnf = claims.get("cnf") if isinstance(claims, Mapping) else None
    jkt = cnf.get("jkt") if isinstance(cnf, Mapping) else None
    return jkt if type(jkt) is str and jkt else None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _thumbprint(jwk: dict[str, Any]) -> str:
    members = {"EC": ("crv", "kty", "x", "y"), "RSA": ("e", "kty", "n"), "OKP": ("crv", "kty", "x")}.get(str(jwk.get("kty")))
    if members is None or any(type(jwk.get(m)) is not str for m in members):
        raise ValueError("not a public EC, RSA or OKP key")
    return _b64(hashlib.sha256(json.dumps({m: jwk[m] for m in members}, separators=(",", ":"), sort_keys=True).encode()).digest())


def _same_url(a: str, b: str) -> bool:
    def norm(u: str) -> tuple[str, str, str]:
        p = urlsplit(u)
        return p.scheme.lower(), p.netloc.lower(), p.path.rstrip("/") or "/"
    return norm(a) == norm(b)


class DPoPChecker:
    """Checks proofs for one resource server. ``window``: seconds a proof's ``iat`` may be from
    now, and how long its ``jti`` is remembered; ``nonce``: the nonce proofs must carry (a
    string, or a callable giving the current one; None: no nonce required);
    ``max_remembered``: the most ``jti`` values kept (the oldest are forgotten first);
    ``store``: remember them there instead, shared by every worker (see the module docstring)."""

    def __init__(self, *, window: float = 300.0, nonce: str | Callable[[], str] | None = None,
                 max_remembered: int = 100_000, clock: Callable[[], float] = time.time,
                 store: ReplayStore | None = None) -> None:
        self.window = window
        self.nonce = nonce
        self.max_remembered = max_remembered
        self.store = store
        self._clock = clock
        self._seen: OrderedDict[str, float] = OrderedDict()

    def current_nonce(self) -> str | None:
        """The nonce a proof must carry now, or None."""
        return self.nonce() if callable(self.nonce) else self.nonce

    async def verify(self, proofs: list[str], *, method: str, url: str, access_token: str, jkt: str) -> None:
        """Accept the request's ``proofs`` (every ``DPoP`` header value) or raise :class:`DPoPRefused`
        (:class:`ReplayStoreUnavailable` when the shared store cannot be asked): :meth:`check`,
        and with a ``store`` its ``jti`` remembered there, once for every worker."""
        jti = self.check(proofs, method=method, url=url, access_token=access_token, jkt=jkt)
        store = self.store
        if store is None:
            return
        key = "dpop:jti:" + hashlib.sha256(f"{jkt} {jti}".encode()).hexdigest()[:40]
        try:
            # a proof's iat may be up to `window` on either side of now: it is usable for 2 windows
            fresh = await store.compare_and_set(key, None, b"1", ttl=2 * self.window)
        except Exception as exc:  # the store's own failure (down, too slow): not verifiable now
            raise ReplayStoreUnavailable(str(exc)) from None
        if not fresh:
            raise DPoPRefused("invalid_dpop_proof", "a replayed proof (jti seen before, by some worker)")

    def check(self, proofs: list[str], *, method: str, url: str, access_token: str, jkt: str) -> str:
        """Accept the request's ``proofs`` (every ``DPoP`` header value) or raise :class:`DPoPRefused`;
        returns the proof's ``jti`` (remembered here unless a ``store`` is to remember it: see
        :meth:`verify`, which HTTP entry points call)."""
        import jwt

        if len(proofs) != 1 or "," in proofs[0]:
            raise DPoPRefused("invalid_dpop_proof", "not exactly one DPoP proof")
        proof = proofs[0].strip()
        try:
            header = jwt.get_unverified_header(proof)
        except jwt.PyJWTError:
            raise DPoPRefused("invalid_dpop_proof", "not a JWT") from None
        jwk = header.get("jwk")
        if header.get("typ") != "dpop+jwt" or header.get("alg") not in ALGORITHMS:
            raise DPoPRefused("invalid_dpop_proof", "typ or alg not allowed")
        if type(jwk) is not dict or "d" in jwk or "k" in jwk:
            raise DPoPRefused("invalid_dpop_proof", "no public jwk")
        try:
            if _thumbprint(jwk) != jkt:
                raise DPoPRefused("invalid_dpop_proof", "the proof's key is not the one the token is bound to")
            claims = jwt.decode(proof, jwt.PyJWK(jwk, header["alg"]).key, algorithms=[header["alg"]],
                                options={"verify_aud": False, "verify_exp": False, "verify_iat": False})
        except (jwt.PyJWTError, ValueError, TypeError):
            raise DPoPRefused("invalid_dpop_proof", "the signature does not verify") from None
        return self._claims(claims, method=method, url=url, access_token=access_token)

    def _claims(self, claims: dict[str, Any], *, method: str, url: str, access_token: str) -> str:
        now = self._clock()
        jti, iat, htu = claims.get("jti"), claims.get("iat"), claims.get("htu")
        if type(jti) is not str or not jti:
            raise DPoPRefused("invalid_dpop_proof", "no jti")
        if claims.get("htm") != method.upper():
            raise DPoPRefused("invalid_dpop_proof", "htm is not the request's method")
        if type(htu) is not str or not _same_url(htu, url):
            raise DPoPRefused("invalid_dpop_proof", "htu is not the request's URL")
        if not isinstance(iat, (int, float)) or isinstance(iat, bool) or abs(now - iat) > self.window:
            raise DPoPRefused("invalid_dpop_proof", "iat outside the accepted window")
        expected_ath = _b64(hashlib.sha256(access_token.encode("ascii", "replace")).digest())
        if claims.get("ath") != expected_ath:
            raise DPoPRefused("invalid_dpop_proof", "ath is not this access token's hash")
        nonce = self.current_nonce()
        if nonce is not None and claims.get("nonce") != nonce:
            raise DPoPRefused("use_dpop_nonce", "the proof lacks the current nonce", nonce)
        if self.store is None:
            self._remember(jti, now)
        return jti

    def _remember(self, jti: str, now: float) -> None:
        seen = self._seen
        while seen and next(iter(seen.values())) < now - self.window:
            seen.popitem(last=False)
        if jti in seen:
            raise DPoPRefused("invalid_dpop_proof", "a replayed proof (jti seen before)")
        seen[jti] = now
        while len(seen) > self.max_remembered:
            seen.popitem(last=False)
