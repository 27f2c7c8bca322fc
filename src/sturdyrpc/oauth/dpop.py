"""DPoP proofs (RFC 9449) made by the client, without I/O.

A :class:`DPoPKey` is an ES256 key pair generated in this process: the private key is never
serialized or sent, only the public JWK goes in each proof's header. A proof is a JWT of type
``dpop+jwt`` for one request: the method (``htm``), the URL without query and fragment
(``htu``), a fresh ``jti``, ``iat``, the server's ``nonce`` when it gave one, and for a resource
request ``ath``, the hash of the access token it goes with. The token request's proof binds
the token to the key (the authorization server puts the key's thumbprint in ``cnf.jkt``).

Needs the ``auth`` extra (PyJWT with ``cryptography``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .errors import OAuthError

__all__ = ["DPoPKey", "htu", "access_token_hash", "jwk_thumbprint", "use_dpop_nonce_error"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def htu(url: str) -> str:
    """The ``htu`` of a request to ``url``: the URL without its query and fragment (RFC 9449 §4.2)."""
    p = urlsplit(url)
    return urlunsplit((p.scheme.lower(), p.netloc.lower(), p.path or "/", "", ""))


def access_token_hash(access_token: str) -> str:
    """``ath``: base64url of the SHA-256 of the access token's ASCII (RFC 9449 §4.2)."""
    return _b64(hashlib.sha256(access_token.encode("ascii")).digest())


def jwk_thumbprint(jwk: dict[str, Any]) -> str:
    """The RFC 7638 SHA-256 thumbprint of a public JWK (EC, RSA or OKP): the ``cnf.jkt`` of a bound token."""
    members = {"EC": ("crv", "kty", "x", "y"), "RSA": ("e", "kty", "n"), "OKP": ("crv", "kty", "x")}.get(str(jwk.get("kty")))
    if members is None or any(type(jwk.get(m)) is not str for m in members):
        raise ValueError("not a public EC, RSA or OKP JWK")
    canonical = json.dumps({m: jwk[m] for m in members}, separators=(",", ":"), sort_keys=True)
    return _b64(hashlib.sha256(canonical.encode()).digest())


def use_dpop_nonce_error(status: int, doc: Any) -> bool:
    """Whether a token endpoint's answer asks for a proof with its nonce (RFC 9449 §8)."""
    return status == 400 and type(doc) is dict and doc.get("error") == "use_dpop_nonce"


class DPoPKey:
    """A P-256 key pair for DPoP, made here (or from a ``cryptography`` EC private key) and kept
    in this process: :meth:`proof` signs with it, :attr:`public_jwk` is all that is shown."""

    algorithm = "ES256"

    def __init__(self, private_key: Any = None) -> None:
        try:
            from cryptography.hazmat.primitives.asymmetric import ec
        except ImportError:  # pragma: no cover - the auth extra
            raise OAuthError("DPoP needs the auth extra: pip install 'sturdyrpc[auth]'") from None
        key = private_key if private_key is not None else ec.generate_private_key(ec.SECP256R1())
        if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
            raise ValueError("a DPoP key must be a P-256 (ES256) private key")
        self._key = key
        numbers = key.public_key().public_numbers()
        self.public_jwk: dict[str, str] = {
            "kty": "EC", "crv": "P-256",
            "x": _b64(numbers.x.to_bytes(32, "big")), "y": _b64(numbers.y.to_bytes(32, "big")),
        }
        #: The key's thumbprint: what a token bound to it carries as ``cnf.jkt``.
        self.thumbprint = jwk_thumbprint(self.public_jwk)

    def proof(self, method: str, url: str, *, access_token: str | None = None, nonce: str | None = None,
              now: float | None = None) -> str:
        """A fresh proof for ``method url`` (and ``access_token``, for a resource request)."""
        import jwt

        claims: dict[str, Any] = {"jti": secrets.token_urlsafe(16), "htm": method.upper(), "htu": htu(url),
                                  "iat": int(time.time() if now is None else now)}
        if access_token is not None:
            claims["ath"] = access_token_hash(access_token)
        if nonce is not None:
            claims["nonce"] = nonce
        return jwt.encode(claims, self._key, algorithm=self.algorithm, headers={"typ": "dpop+jwt", "jwk": self.public_jwk})

    def __repr__(self) -> str:  # the private key stays out of logs
        return f"DPoPKey(thumbprint={self.thumbprint!r})"
