"""An MCP server as an OAuth 2.1 resource server: the bearer step of :class:`HTTPSecurity`.

:class:`ResourceServer` plugs into ``HTTPSecurity(auth=...)`` where a plain
:class:`~sturdyrpc.transports.asgi.BearerAuth` would go. On every request it

- verifies the bearer token with its :class:`~.verifier.TokenVerifier` (JWT/JWKS,
  introspection, or your own): no token, a malformed header or a refused token -> 401 with
  ``WWW-Authenticate: Bearer resource_metadata="...", scope="..."`` (RFC 6750 §3, RFC 9728
  §5.1); a verifier that cannot reach its issuer, or does not finish within ``timeout``
  seconds -> 503 with ``Retry-After`` (the token is never let through);
- requires the server-wide ``scopes`` (403 ``error="insufficient_scope"`` naming them);
- accepts a token bound to a key (``cnf.jkt``, RFC 9449) only with the ``DPoP`` scheme and a
  valid proof for the request (:mod:`.dpop`: method, URL, ``ath``, ``iat`` window, replayed
  ``jti``, the ``dpop_nonce`` when one is required), else 401 with a ``DPoP`` challenge
  (``error="invalid_dpop_proof"`` or ``"use_dpop_nonce"`` with a ``DPoP-Nonce`` header); a
  DPoP scheme with an unbound token is refused as well;
- publishes the protected-resource metadata (RFC 9728) at ``/.well-known/oauth-protected-resource``
  and at the path-suffixed form for the resource's path (``/.well-known/oauth-protected-resource/mcp``):
  :meth:`ResourceServer.metadata_documents`, served by the HTTP layer in front of either
  endpoint (:class:`~sturdyrpc.transports.http_layer.ResourceMetadata`).

Bodies are fixed JSON-RPC errors; the reason a token was refused goes to the log only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ..transports.asgi import ASGIApp, BearerAuth, HTTPRefusal, Presentation
from ..transports.http_layer import ResourceMetadata, not_found
from .challenge import bearer_challenge
from .dpop import ALGORITHMS, DPoPChecker, DPoPRefused, ReplayStoreUnavailable, bound_key
from .errors import InvalidToken, VerificationUnavailable
from .fetch import FETCH_TIMEOUT
from .metadata import WELL_KNOWN, ProtectedResourceMetadata, check_resource_url, well_known_path, well_known_url
from .principal import missing_scopes, scopes_of
from .verifier import TokenVerifier

__all__ = ["ResourceServer", "insufficient_scope_refusal", "UNAVAILABLE", "VERIFY_TIMEOUT"]

log = logging.getLogger("sturdyrpc.auth")

#: The JSON-RPC error code of a 503 because the token cannot be verified now (an
#: implementation-defined server error, as for "Server busy").
UNAVAILABLE = -32000

#: Seconds a request waits for its token's verdict by default (one JWKS fetch's deadline).
VERIFY_TIMEOUT = FETCH_TIMEOUT


def _unavailable() -> HTTPRefusal:
    return HTTPRefusal(503, UNAVAILABLE, "Service unavailable: the access token cannot be verified now", [(b"retry-after", b"5")])


class ResourceServer(BearerAuth):
    """Token verification, scopes and RFC 9728 metadata for one protected resource.

    - ``verifier``: a :class:`~.verifier.TokenVerifier` (e.g. :class:`~.jwks.JWTVerifier`,
      :class:`~.introspection.IntrospectionVerifier`, :class:`~.verifier.FunctionVerifier`).
    - ``resource``: this server's URL as clients use it, e.g. ``https://mcp.example.com/mcp``;
      the metadata's ``resource`` and the basis of its well-known URL. Tokens must be issued for
      it: build the verifier with this as its audience.
    - ``authorization_servers``: issuer URLs clients get tokens from (at least one).
    - ``scopes``: required on every request (server-wide); ``scopes_supported``: advertised in
      the metadata and asked for in 401 challenges (default: ``scopes``).
    - ``realm``: an optional ``realm`` parameter for the challenges.
    - ``timeout``: seconds a request may wait for its token to be verified (a JWKS fetch or an
      introspection call included, however slowly the other side answers); past it the request
      gets 503 with ``Retry-After``, and a fetch other requests wait for goes on without it.
    - ``dpop``: the checks of DPoP proofs for bound tokens (:class:`~.dpop.DPoPChecker`: its
      ``iat`` window, replay memory and nonce); the default one requires no nonce.
    """

    def __init__(self, verifier: TokenVerifier, *, resource: str, authorization_servers: Iterable[str],
                 scopes: Iterable[str] = (), scopes_supported: Iterable[str] | None = None, realm: str | None = None,
                 resource_name: str | None = None, resource_documentation: str | None = None,
                 timeout: float = VERIFY_TIMEOUT, dpop: DPoPChecker | None = None) -> None:
        if not timeout > 0:
            raise ValueError("timeout must be a positive number of seconds")
        self.verifier = verifier
        self.timeout = float(timeout)
        self.resource = check_resource_url(resource)
        self.required_scopes: tuple[str, ...] = tuple(dict.fromkeys(scopes))
        supported = tuple(dict.fromkeys([*self.required_scopes, *(scopes_supported or ())]))
        self.metadata = ProtectedResourceMetadata.build(resource, authorization_servers, supported,
                                                        resource_name=resource_name, resource_documentation=resource_documentation)
        self.metadata_url = well_known_url(resource)
        #: The paths the metadata is served at: path-suffixed (RFC 9728 §3.1) and root.
        self.metadata_paths = frozenset({well_known_path(resource), WELL_KNOWN})
        self.challenge_realm = realm
        #: The scopes a 401 challenge asks for (MCP 2025-11-25: SHOULD name them).
        self.challenge_scopes: tuple[str, ...] = self.required_scopes or supported
        self.dpop = dpop if dpop is not None else DPoPChecker()
        self._metadata_body = self.metadata.to_json()
        super().__init__(verify=verifier.verify, realm=realm or "", resource_metadata=self.metadata_url)

    # -------------------------------------------------------------- the bearer step

    def challenge(self, error: str | None) -> bytes:
        """The 401 challenge: ``error`` None (no credentials), ``invalid_request`` or ``invalid_token``."""
        return bearer_challenge(realm=self.challenge_realm, resource_metadata=self.metadata_url,
                                scope=self.challenge_scopes, error=error).encode("ascii")

    async def principal(self, token: str) -> Any:
        """The verified principal, None to refuse (401); 403 without the server-wide scopes,
        503 when the token cannot be verified now (both as :class:`HTTPRefusal`)."""
        try:
            async with asyncio.timeout(self.timeout):
                principal = await self.verifier.verify(token)
        except InvalidToken as exc:
            log.info("bearer token refused: %s", exc.reason)
            return None
        except VerificationUnavailable as exc:
            log.warning("bearer token not verifiable now: %s", exc.reason)
            raise _unavailable() from None
        except TimeoutError:
            log.warning("bearer token not verifiable now: no verdict within %g s", self.timeout)
            raise _unavailable() from None
        except Exception:
            log.exception("the token verifier failed; the token is refused")
            return None
        if principal is None:
            return None
        if missing_scopes(principal, self.required_scopes):
            raise self.insufficient_scope(principal, self.required_scopes)
        return principal

    async def check_presentation(self, principal: Any, presented: Presentation) -> list[tuple[bytes, bytes]]:
        """A bound token only with the DPoP scheme and a valid proof; an unbound one only as Bearer.
        A DPoP answer carries the current nonce when one is required (``DPoP-Nonce``, RFC 9449
        §9): a nonce that changes reaches the client on a success, before its next proof needs it."""
        claims = getattr(principal, "claims", None)
        jkt = bound_key(claims) if claims is not None else None
        if jkt is None:
            if presented.scheme != "bearer":
                self._refuse_dpop(DPoPRefused("invalid_token", "the DPoP scheme with a token bound to no key"))
            return []
        if presented.scheme != "dpop":
            self._refuse_dpop(DPoPRefused("invalid_token", "a DPoP-bound token presented as a bearer token"))
        try:
            await self.dpop.verify(list(presented.proofs), method=presented.method, url=presented.url,
                                   access_token=presented.token, jkt=jkt)
        except DPoPRefused as refused:
            self._refuse_dpop(refused)
        except ReplayStoreUnavailable as exc:
            log.warning("DPoP: replayed proofs cannot be told now: %s", exc)
            raise _unavailable() from None
        nonce = self.dpop.current_nonce()
        return [] if nonce is None else [(b"dpop-nonce", nonce.encode("ascii"))]

    def _refuse_dpop(self, refused: DPoPRefused) -> None:
        log.info("DPoP: token refused: %s", refused.reason)
        params = [f'error="{refused.error}"', f'algs="{" ".join(ALGORITHMS)}"', f'resource_metadata="{self.metadata_url}"']
        headers = [(b"www-authenticate", ("DPoP " + ", ".join(params)).encode("ascii"))]
        if refused.nonce is not None:
            headers.append((b"dpop-nonce", refused.nonce.encode("ascii")))
        raise HTTPRefusal(401, -32600, "Unauthorized", headers)

    def insufficient_scope(self, principal: Any, needed: Iterable[str]) -> HTTPRefusal:
        """The 403 for a request that needs ``needed``: the challenge names those scopes plus
        the ones the token already has (so that re-authorizing loses nothing, as MCP 2025-11-25
        recommends) and the server-wide ones."""
        held = scopes_of(principal) or frozenset()
        scope = sorted(set(needed) | held | set(self.required_scopes))
        value = bearer_challenge(realm=self.challenge_realm, resource_metadata=self.metadata_url, scope=scope,
                                 error="insufficient_scope", error_description="The access token lacks a required scope")
        return HTTPRefusal(403, -32600, "Forbidden: insufficient scope", [(b"www-authenticate", value.encode("ascii"))])

    # -------------------------------------------------------------- RFC 9728 metadata

    def metadata_documents(self) -> Mapping[str, bytes]:
        """The metadata document at both of its paths (path-suffixed and root). Public: no token
        needed (it is how a client learns where to get one)."""
        return {path: self._metadata_body for path in self.metadata_paths}

    @property
    def metadata_app(self) -> ASGIApp:
        """An ASGI app serving only the metadata (404 elsewhere): route the well-known paths to
        it when the MCP app itself is mounted under a prefix."""
        return ResourceMetadata(not_found, documents=self.metadata_documents())


def insufficient_scope_refusal(auth: BearerAuth | None, principal: Any, needed: Iterable[str]) -> HTTPRefusal:
    """The 403 ``insufficient_scope`` refusal for ``needed``, with whatever challenge ``auth``
    can give (a :class:`ResourceServer`'s full one, or a plain ``BearerAuth``'s realm and
    ``resource_metadata``)."""
    if isinstance(auth, ResourceServer):
        return auth.insufficient_scope(principal, needed)
    held = scopes_of(principal) or frozenset()
    value = bearer_challenge(realm=auth.realm if auth is not None else None,
                             resource_metadata=auth.resource_metadata if auth is not None else None,
                             scope=sorted(set(needed) | held), error="insufficient_scope")
    return HTTPRefusal(403, -32600, "Forbidden: insufficient scope", [(b"www-authenticate", value.encode("ascii"))])
