"""JWT access-token verification: token + keys + clock -> :class:`Principal` or a typed failure.

Sans-I/O: the keys come in as a :class:`KeySet` (parsed from a JWKS document by whoever
fetched it, see :mod:`.jwks`) and the time as a number. PyJWT (the ``auth`` extra) checks the
signature; the claims are checked here, against an injected clock:

- the algorithm is on the allow-list AND fits the key's type (RSA keys: RS*/PS*, EC keys: the
  ES* of their curve, OKP keys: EdDSA; a key's own ``alg`` must match): ``none`` and every HS*
  algorithm are refused outright, so a public key can never be used as an HMAC secret;
- ``typ``, when present, names an access token: ``at+jwt`` (RFC 9068 §2.1; compared
  case-insensitively, with or without ``application/``) or the generic ``JWT`` that many
  identity providers still put on access tokens; any other type (an ID token, a logout or
  DPoP proof, a security event token) is refused, and ``JWTRules.require_at_jwt`` accepts
  ``at+jwt`` only;
- ``iss`` equals the issuer exactly; ``aud`` (string or list) holds one of the audiences
  (RFC 8707: this resource's URL); ``exp`` is required, ``nbf`` honoured, ``iat`` not in the
  future, all with a small leeway; ``sub`` is required (RFC 9068).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import MISSING_PYJWT, InvalidToken, UnknownKey
from .principal import Principal, parse_scopes

__all__ = ["JWTRules", "KeySet", "SigningKey", "verify_jwt", "DEFAULT_ALGORITHMS", "MAX_TOKEN_BYTES", "require_pyjwt"]

#: Asymmetric signature algorithms accepted unless told otherwise.
DEFAULT_ALGORITHMS: tuple[str, ...] = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")

#: Tokens longer than this are refused before any parsing (real access tokens are a few KiB).
MAX_TOKEN_BYTES = 16 * 1024

#: Which algorithms fit which key (``kty``, ``crv``); nothing else is ever paired.
_FITS: dict[tuple[str, str | None], frozenset[str]] = {
    ("RSA", None): frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}),
    ("EC", "P-256"): frozenset({"ES256"}),
    ("EC", "P-384"): frozenset({"ES384"}),
    ("EC", "P-521"): frozenset({"ES512"}),
    ("EC", "secp256k1"): frozenset({"ES256K"}),
    ("OKP", "Ed25519"): frozenset({"EdDSA"}),
    ("OKP", "Ed448"): frozenset({"EdDSA"}),
}
_ASYMMETRIC = frozenset().union(*_FITS.values())


def require_pyjwt() -> Any:
    """The ``jwt`` module, or ModuleNotFoundError with the one line that fixes it."""
    try:
        import jwt
    except ModuleNotFoundError:
        raise ModuleNotFoundError(MISSING_PYJWT, name="jwt") from None
    return jwt


@dataclass(frozen=True)
class JWTRules:
    """What a token must satisfy besides its signature."""

    issuer: str
    audiences: frozenset[str]
    algorithms: frozenset[str] = frozenset(DEFAULT_ALGORITHMS)
    #: Seconds of clock skew tolerated on ``exp``, ``nbf`` and ``iat``.
    leeway: float = 30.0
    #: True: the header must say ``typ: at+jwt`` (RFC 9068). False: ``at+jwt``, ``JWT`` or no ``typ``.
    require_at_jwt: bool = False

    @classmethod
    def build(cls, issuer: str, audience: str | Iterable[str], algorithms: Iterable[str] = DEFAULT_ALGORITHMS,
              leeway: float = 30.0, *, require_at_jwt: bool = False) -> JWTRules:
        """Validated rules: a non-empty issuer and audience, asymmetric algorithms only, leeway 0..300 s."""
        if not issuer:
            raise ValueError("an issuer is required")
        auds = frozenset([audience] if isinstance(audience, str) else audience)
        if not auds or not all(auds):
            raise ValueError("an audience is required (RFC 8707: this resource's URL)")
        algs = frozenset(algorithms)
        bad = sorted(a for a in algs if a not in _ASYMMETRIC)
        if bad or not algs:
            # 'none' and HS*: a public key must never serve as an HMAC secret (key confusion).
            raise ValueError(f"algorithms not allowed for JWKS-verified tokens: {bad or 'empty list'}")
        if not 0 <= leeway <= 300:
            raise ValueError("leeway must be between 0 and 300 seconds")
        return cls(issuer, auds, algs, float(leeway), bool(require_at_jwt))


@dataclass(frozen=True)
class SigningKey:
    """One public verification key of a JWKS."""

    kid: str | None
    kty: str
    crv: str | None
    alg: str | None
    key: Any  # the cryptography public key object

    def fits(self, alg: str) -> bool:
        if self.alg is not None and self.alg != alg:
            return False
        return alg in _FITS.get((self.kty, self.crv if self.kty != "RSA" else None), frozenset())


class KeySet:
    """The usable signing keys of a JWKS document (RFC 7517). Keys that are not public
    signature keys of a supported type (``oct`` secrets, ``use: enc``, private keys, broken
    entries) are left out."""

    def __init__(self, keys: Iterable[SigningKey] = ()) -> None:
        self.keys = tuple(keys)

    @classmethod
    def from_jwks(cls, doc: Any) -> KeySet:
        """Parse a JWKS document (a dict with a ``keys`` list); ValueError if it is no JWKS."""
        jwt = require_pyjwt()
        if type(doc) is not dict or type(doc.get("keys")) is not list:
            raise ValueError("not a JWKS document")
        out: list[SigningKey] = []
        for k in doc["keys"][:100]:
            if type(k) is not dict:
                continue
            kty, crv, alg, kid = k.get("kty"), k.get("crv"), k.get("alg"), k.get("kid")
            if kty not in ("RSA", "EC", "OKP") or k.get("use", "sig") != "sig" or "d" in k:
                continue
            if (crv is not None and type(crv) is not str) or (alg is not None and type(alg) is not str):
                continue
            if kid is not None and type(kid) is not str:
                continue
            ops = k.get("key_ops")
            if ops is not None and (type(ops) is not list or "verify" not in ops):
                continue
            try:
                key = jwt.PyJWK(k, algorithm=alg or _default_alg(kty, crv)).key
            except Exception:  # any malformed member: this one key is unusable, the others still count
                continue
            out.append(SigningKey(kid, kty, crv if kty != "RSA" else None, alg, key))
        return cls(out)

    def find(self, kid: str | None, alg: str) -> SigningKey | None:
        """The key for a token header's ``kid`` and ``alg``: by ``kid`` when given, else the one
        key that fits ``alg`` (None when there is none or several)."""
        if kid is not None:
            return next((k for k in self.keys if k.kid == kid and k.fits(alg)), None)
        fitting = [k for k in self.keys if k.fits(alg)]
        return fitting[0] if len(fitting) == 1 else None

    def kids(self) -> frozenset[str]:
        return frozenset(k.kid for k in self.keys if k.kid is not None)

    def __len__(self) -> int:
        return len(self.keys)


def _default_alg(kty: Any, crv: Any) -> str | None:
    fits = _FITS.get((kty, crv if kty != "RSA" else None))
    if not fits:
        return None
    return sorted(fits)[0] if kty != "RSA" else "RS256"


def _number(v: Any) -> bool:
    return type(v) in (int, float)


def verify_jwt(token: str, keys: KeySet, rules: JWTRules, now: float) -> Principal:
    """The principal ``token`` stands for, or :class:`InvalidToken` (:class:`UnknownKey` when
    its ``kid`` is not in ``keys``: refresh the key set and try once more)."""
    jwt = require_pyjwt()
    if len(token) > MAX_TOKEN_BYTES:
        raise InvalidToken("token too long")
    try:
        header = jwt.get_unverified_header(token)
    except Exception:
        raise InvalidToken("malformed token") from None
    _check_type(header.get("typ"), rules.require_at_jwt)
    alg = header.get("alg")
    if type(alg) is not str or alg not in rules.algorithms:
        raise InvalidToken("algorithm not allowed")
    kid = header.get("kid")
    if kid is not None and type(kid) is not str:
        raise InvalidToken("malformed kid")
    key = keys.find(kid, alg)
    if key is None:
        if kid is not None and kid not in keys.kids():
            raise UnknownKey(kid)
        raise InvalidToken("no key fits the token")
    try:
        claims = jwt.decode(
            token,
            key=key.key,
            algorithms=[alg],
            # The signature only: the claims are checked below, against the injected clock.
            options={"verify_signature": True, "verify_exp": False, "verify_nbf": False, "verify_iat": False,
                     "verify_aud": False, "verify_iss": False, "require": []},
        )
    except Exception:
        raise InvalidToken("bad signature or payload") from None
    if type(claims) is not dict:
        raise InvalidToken("payload is not an object")
    return _principal(claims, rules, now)


def _check_type(typ: Any, strict: bool) -> None:
    """RFC 9068 §4: a resource server MUST check that ``typ`` is ``at+jwt`` (an ID token or
    another JWT signed by the same keys is no access token)."""
    if typ is None:
        if strict:
            raise InvalidToken("no typ (at+jwt required)")
        return
    if type(typ) is not str:
        raise InvalidToken("malformed typ")
    name = typ.lower()
    if name.startswith("application/"):
        name = name[len("application/"):]
    if name == "at+jwt" or (name == "jwt" and not strict):
        return
    raise InvalidToken("not an access token (typ)")


def _principal(claims: Mapping[str, Any], rules: JWTRules, now: float) -> Principal:
    if claims.get("iss") != rules.issuer:
        raise InvalidToken("other issuer")
    aud = claims.get("aud")
    auds = [aud] if type(aud) is str else aud if type(aud) is list else None
    if not auds or not any(type(a) is str and a in rules.audiences for a in auds):
        raise InvalidToken("other audience")
    raw_exp = claims.get("exp")
    if not _number(raw_exp):
        raise InvalidToken("no exp")
    exp = float(raw_exp)  # type: ignore[arg-type]  # _number: an int or a float
    if now > exp + rules.leeway:
        raise InvalidToken("expired")
    nbf = claims.get("nbf")
    if nbf is not None and (not _number(nbf) or now + rules.leeway < nbf):
        raise InvalidToken("not yet valid")
    iat = claims.get("iat")
    if iat is not None and not _number(iat):
        raise InvalidToken("malformed iat")
    if iat is not None and iat > now + rules.leeway:
        raise InvalidToken("issued in the future")
    sub = claims.get("sub")
    if type(sub) is not str or not sub:
        raise InvalidToken("no sub")
    scopes = parse_scopes(claims["scope"]) if "scope" in claims else parse_scopes(claims.get("scp"))
    client_id = next((c for c in (claims.get("client_id"), claims.get("azp"), claims.get("cid")) if type(c) is str), None)
    return Principal(sub, scopes, client_id, rules.issuer, dict(claims), exp)
