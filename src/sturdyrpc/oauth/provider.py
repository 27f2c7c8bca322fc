"""The OAuth 2.1 client of an MCP client over HTTP: the thin I/O layer over the pure modules.

The Streamable HTTP transport (:class:`~sturdyrpc.mcp_http.client.StreamableHTTPClientTransport`,
``auth=``) asks :meth:`OAuthClientProvider.authorization_header` before every request and hands
every 401 and 403 to :meth:`OAuthClientProvider.handle_challenge`, which obtains a token when it
can and says whether to send the request again. The flow (MCP authorization, 2025-11-25):

1. Protected resource metadata (RFC 9728): the challenge's ``resource_metadata``, else the
   well-known URLs; its ``resource`` must cover the server URL. None anywhere: the 2025-03-26
   path (the authorization server is the server's origin; its RFC 8414 document or the
   default endpoints).
2. Authorization server metadata (RFC 8414, OpenID Connect Discovery) in the spec's order; the
   ``issuer`` must be the one asked for; PKCE S256 must be advertised.
3. A client identity: pre-registered (``client_id=``), else a Client ID Metadata Document
   (``client_metadata_url=``, when the server advertises support), else dynamic registration
   (RFC 7591), kept in the store per authorization server.
4. Authorization code with PKCE S256, ``state`` and ``resource`` (RFC 8707), through the
   :class:`~sturdyrpc.oauth.redirect.RedirectHandler`; the code exchanged with the registered
   token endpoint auth method (``none``, ``client_secret_basic``, ``client_secret_post``).
5. Scopes: the challenge's ``scope``, else ``scopes_supported``, else none; a
   ``403 insufficient_scope`` steps up (the challenged scopes plus those held). At most
   ``max_authorizations`` retries per request, so a server that never grants enough ends it.
6. Tokens in the :class:`~sturdyrpc.oauth.store.TokenStore`, refreshed when expired or refused.

Without a user (``grant=``, :mod:`sturdyrpc.oauth.grants`): steps 3 to 5 are the grant's token
requests instead (``client_credentials``, the JWT bearer grant, enterprise-managed
authorization). A failed grant is not tried again for that server: its error is raised again.
``dpop=``: every token request and every request to the server carries a DPoP proof of a key
made in this process (:mod:`sturdyrpc.oauth.dpop`), and a ``use_dpop_nonce`` answer from the
authorization server or the resource server is retried with the nonce it gave.

Every URL of the flow comes from a server's answer, so before each request the URL is checked
(:func:`~sturdyrpc.oauth.targets.check_target`: https, no private or link-local address) and
nothing is sent to one that fails; each exchange has a deadline for the whole answer
(``timeout``) and reads at most ``max_response_bytes`` of it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import httpx

from .challenge import BearerChallenge, bearer_challenge
from .dpop import DPoPKey, use_dpop_nonce_error
from .errors import OAuthError
from .flow import (
    ClientInfo,
    Tokens,
    authorization_url,
    code_token_request,
    read_authorization_response,
    read_registration,
    read_token_response,
    refresh_token_request,
    registration_request,
    select_scope,
    step_up_scope,
)
from .grants import Grant, TokenRequest
from .metadata import (
    AuthorizationServerMetadata,
    ProtectedResourceMetadata,
    authorization_server_metadata_urls,
    canonical_resource,
    is_secure_url,
    legacy_authorization_base,
    legacy_default_metadata,
    protected_resource_metadata_urls,
    resource_allowed,
    same_issuer,
)
from .pkce import PKCE, new_state
from .redirect import RedirectHandler
from .store import MemoryTokenStore, TokenStore
from .targets import check_target

__all__ = ["HTTPAuth", "OAuthClientProvider", "MAX_RESPONSE_BYTES"]

#: The most of an answer (metadata, registration, token) the client reads: each is a few KiB.
MAX_RESPONSE_BYTES = 256 * 1024


class _Unreachable(Exception):
    """No answer: the request failed on the way, or the answer did not arrive in time."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

log = logging.getLogger("sturdyrpc.oauth")


@runtime_checkable
class HTTPAuth(Protocol):
    """What the HTTP transport needs from an ``auth=`` object."""

    async def request_headers(self, method: str, url: str) -> dict[str, str]:
        """The headers that authorize a ``method`` request to ``url`` now (``authorization``, and
        ``dpop`` for a DPoP-bound token; lower-case names), or none."""
        ...

    async def handle_challenge(
        self, url: str, status: int, www_authenticate: Sequence[str], *, sent: str | None, attempt: int,
        dpop_nonce: str | None = None,
    ) -> bool:
        """A request to ``url`` whose ``Authorization`` was ``sent`` got ``status`` (401 or 403,
        with ``DPoP-Nonce`` as ``dpop_nonce``): True to send it again (with fresh
        :meth:`request_headers`); ``attempt`` counts the retries so far."""
        ...

    def note_dpop_nonce(self, url: str, nonce: str) -> None:
        """The ``DPoP-Nonce`` a server sent on an answer to a request to ``url`` (any status):
        the nonce the next proof to it carries (RFC 9449 §9: the client MUST use it)."""
        ...


class _Discovery:
    """What discovery found for one server URL."""

    def __init__(self, prm: ProtectedResourceMetadata | None, asm: AuthorizationServerMetadata, resource: str,
                 metadata_url: str | None) -> None:
        self.prm = prm
        self.asm = asm
        self.resource = resource
        self.metadata_url = metadata_url


class OAuthClientProvider:
    """An OAuth 2.1 client for one user, usable for any number of MCP server URLs.

    ``redirect_handler``: takes the user through the authorization endpoint
    (:mod:`sturdyrpc.oauth.redirect`); or ``grant``: tokens without a user (:mod:`sturdyrpc.oauth.grants`).
    ``dpop``: DPoP-bound tokens (True: a key made now; or a :class:`~sturdyrpc.oauth.dpop.DPoPKey`). ``store``: tokens and registrations (memory by default).
    ``client_id`` / ``client_secret`` / ``token_endpoint_auth_method``: a pre-registered client.
    ``client_metadata_url``: an HTTPS URL with a path where this client's metadata document is
    hosted (used when the authorization server advertises ``client_id_metadata_document_supported``).
    ``client_name``: for dynamic registration. ``scope``: ask for exactly this instead of the
    spec's selection (a step-up still adds the challenged scopes). ``max_authorizations``: retries per request (authorizations, refreshes,
    a token another request just obtained). ``http``: the ``httpx.AsyncClient`` for the
    authorization server and metadata (not closed by us; redirects are never followed).
    ``timeout``: seconds for one exchange with the authorization server or a metadata URL, the
    whole answer included. ``max_response_bytes``: larger answers are refused.
    ``allow_private_networks``: also send requests to private, link-local and other non-public
    addresses (an authorization server on your own network), and to loopback for an MCP server
    that is not itself on loopback; https is required either way (plain http only to loopback).
    """

    def __init__(
        self,
        redirect_handler: RedirectHandler | None = None,
        *,
        grant: Grant | None = None,
        dpop: DPoPKey | bool = False,
        store: TokenStore | None = None,
        client_id: str | None = None,
        client_secret: str | None = None,
        token_endpoint_auth_method: str | None = None,
        client_metadata_url: str | None = None,
        client_name: str = "sturdyrpc",
        scope: str | None = None,
        max_authorizations: int = 3,
        http: httpx.AsyncClient | None = None,
        timeout: float = 30.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        allow_private_networks: bool = False,
    ) -> None:
        if client_metadata_url is not None:
            p = httpx.URL(client_metadata_url)
            if p.scheme != "https" or p.path in ("", "/"):
                raise ValueError("client_metadata_url must be an https URL with a path")
        if (redirect_handler is None) == (grant is None):
            raise ValueError("give exactly one of redirect_handler (a user signs in) and grant (no user)")
        if redirect_handler is not None and not is_secure_url(redirect_handler.redirect_uri):
            raise ValueError("the redirect URI must be https or http on a loopback host")
        self.redirect_handler = redirect_handler
        self.grant = grant
        self.dpop: DPoPKey | None = DPoPKey() if dpop is True else (dpop or None)
        #: The latest DPoP nonce of each server (by origin), sent in the next proof to it.
        self._nonces: dict[str, str] = {}
        #: A grant refused for a server (canonical URL): raised again, not tried again.
        self._grant_failed: dict[str, OAuthError] = {}
        self.store: TokenStore = store if store is not None else MemoryTokenStore()
        self.preregistered = (
            ClientInfo(client_id, client_secret, token_endpoint_auth_method, kind="pre-registered") if client_id else None
        )
        self.client_metadata_url = client_metadata_url
        self.client_name = client_name
        self.scope = scope
        self.max_authorizations = max_authorizations
        self._http = http
        self._own_http = http is None
        self._timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.allow_private_networks = allow_private_networks
        self._lock = asyncio.Lock()
        self._tokens: dict[str, Tokens] = {}
        self._discovered: dict[str, _Discovery] = {}
        #: How many authorization requests were made (tests and diagnostics).
        self.authorizations = 0

    # ------------------------------------------------------------------ HTTPAuth

    async def request_headers(self, method: str, url: str) -> dict[str, str]:
        key = canonical_resource(url)
        tokens = await self._current(key)
        if tokens is not None and tokens.expired() and tokens.refresh_token:
            async with self._lock:
                tokens = await self._current(key)
                if tokens is not None and tokens.expired() and tokens.refresh_token:
                    # not refreshed: the tokens were dropped (None), or are kept when the token
                    # endpoint was unreachable; the server's answer to them decides what follows
                    tokens = await self._refresh(url, tokens) or await self._current(key)
        if tokens is None:
            return {}
        headers = {"authorization": _authorization(tokens)}
        if self.dpop is not None and tokens.token_type == "DPoP":
            headers["dpop"] = self.dpop.proof(method, url, access_token=tokens.access_token, nonce=self._nonces.get(_origin(url)))
        return headers

    def note_dpop_nonce(self, url: str, nonce: str) -> None:
        if self.dpop is not None:
            self._nonces[_origin(url)] = nonce

    async def handle_challenge(
        self, url: str, status: int, www_authenticate: Sequence[str], *, sent: str | None, attempt: int,
        dpop_nonce: str | None = None,
    ) -> bool:
        if attempt >= self.max_authorizations:
            log.info("authorization: giving up after %d attempts (HTTP %d)", attempt, status)
            return False
        challenge = bearer_challenge(www_authenticate)
        if self.dpop is not None and dpop_nonce and challenge is not None and challenge.error == "use_dpop_nonce":
            self._nonces[_origin(url)] = dpop_nonce  # RFC 9449 §9: the same request again, with the nonce
            return True
        if status == 403 and (challenge is None or challenge.error != "insufficient_scope"):
            return False  # forbidden for another reason: a new token would not help
        key = canonical_resource(url)
        async with self._lock:
            tokens = await self._current(key)
            if tokens is not None and _authorization(tokens) != sent:
                return True  # another request got a new token meanwhile: try that one first
            if status == 401 and tokens is not None and tokens.refresh_token and attempt == 0:
                if await self._refresh(url, tokens) is not None:
                    return True
            if status == 403:
                assert challenge is not None
                scope = step_up_scope(tokens.scope if tokens else self.scope, challenge)
            else:
                scope = None
                if tokens is not None:
                    # SEP-2352: a token the server took before is refused: the resource may name
                    # another authorization server now, so its metadata is read again (and a new
                    # authorization server means a new registration: clients are kept per issuer)
                    self._discovered.pop(key, None)
            await self._authorize(url, challenge, scope)
            return True

    async def aclose(self) -> None:
        """Close the HTTP client made by the provider, and the redirect handler if it has a
        ``close()`` (the loopback listener's port)."""
        if self._own_http and self._http is not None:
            await self._http.aclose()
            self._http = None
        close = getattr(self.redirect_handler, "close", None)
        if callable(close):
            close()

    async def forget(self, url: str) -> None:
        """Drop the stored tokens for ``url`` (a logout; registrations are kept)."""
        key = canonical_resource(url)
        self._tokens.pop(key, None)
        await self.store.delete(f"tokens {key}")

    # ------------------------------------------------------------------ the flow

    @property
    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self._timeout, follow_redirects=False)
        return self._http

    async def _current(self, key: str) -> Tokens | None:
        tokens = self._tokens.get(key)
        if tokens is None:
            saved = await self.store.get(f"tokens {key}")
            if saved is not None and type(saved.get("tokens")) is dict:
                try:
                    tokens = Tokens.from_json(saved["tokens"])
                except (TypeError, KeyError):
                    tokens = None
                if tokens is not None:
                    self._tokens[key] = tokens
        return tokens

    async def _save(self, key: str, tokens: Tokens, disc: _Discovery) -> None:
        self._tokens[key] = tokens
        record: dict[str, Any] = {"tokens": tokens.to_json()}
        if disc.asm.from_document:
            record["authorization_server"] = disc.asm.extra
        else:
            record["authorization_server_base"] = disc.asm.issuer
        await self.store.set(f"tokens {key}", record)

    async def _exchange(self, method: str, url: str, *, what: str, server_url: str, **request: Any) -> tuple[int, Any, httpx.Headers]:
        """(status, the answer's JSON or None, its headers) of one request to ``url`` for the MCP server at
        ``server_url``. The URL is checked first (:class:`OAuthError`, nothing sent); the whole
        exchange runs under ``timeout`` and reads at most ``max_response_bytes``
        (:class:`OAuthError` beyond); :class:`_Unreachable` when no answer came."""
        await check_target(url, what=what, server_url=server_url, allow_private=self.allow_private_networks)
        limit = self.max_response_bytes
        headers = {"accept": "application/json", "accept-encoding": "identity", **request.pop("headers", {})}
        try:
            async with asyncio.timeout(self._timeout):
                # Never followed: a redirect's target would skip the check above.
                async with self.http.stream(method, url, headers=headers, follow_redirects=False, **request) as r:
                    declared = r.headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > limit:
                        raise OAuthError(f"{what} {url} answered with more than {limit} bytes")
                    chunks: list[bytes] = []
                    size = 0
                    async for chunk in r.aiter_bytes():
                        size += len(chunk)
                        if size > limit:
                            raise OAuthError(f"{what} {url} answered with more than {limit} bytes")
                        chunks.append(chunk)
                    status, answer_headers = r.status_code, r.headers
        except TimeoutError:
            raise _Unreachable(f"no complete answer within {self._timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise _Unreachable(type(exc).__name__) from None
        log.debug("%s %s -> %d", method, url, status)
        try:
            return status, json.loads(b"".join(chunks)), answer_headers
        except ValueError:
            return status, None, answer_headers

    async def _get_json(self, url: str, *, what: str, server_url: str) -> Any:
        """The JSON object at ``url``, or None for an HTTP error or no JSON (try the next URL)."""
        try:
            status, doc, _ = await self._exchange("GET", url, what=what, server_url=server_url)
        except _Unreachable as exc:
            log.debug("GET %s failed: %s", url, exc.reason)
            return None
        return doc if status == 200 else None

    async def _authorization_server(self, issuer: str, *, check_issuer: bool, server_url: str) -> AuthorizationServerMetadata | None:
        for u in authorization_server_metadata_urls(issuer):
            doc = await self._get_json(u, what="authorization server metadata", server_url=server_url)
            if doc is None:
                continue
            asm = AuthorizationServerMetadata.from_json(doc)
            if check_issuer and not same_issuer(asm.issuer, issuer):
                # RFC 8414 §3.3: the document MUST NOT be used
                raise OAuthError(f"authorization server metadata at {u} names issuer {asm.issuer!r}, not {issuer!r}")
            return asm
        return None

    async def _discover(self, url: str, challenge: BearerChallenge | None) -> _Discovery:
        metadata_url = challenge.resource_metadata if challenge is not None else None
        key = canonical_resource(url)
        cached = self._discovered.get(key)
        if cached is not None and (metadata_url is None or metadata_url == cached.metadata_url):
            return cached
        prm: ProtectedResourceMetadata | None = None
        for u in protected_resource_metadata_urls(url, metadata_url):
            doc = await self._get_json(u, what="protected resource metadata", server_url=url)
            if doc is None:
                continue
            prm = ProtectedResourceMetadata.from_json(doc)
            if not resource_allowed(prm.resource, url):
                # RFC 9728 §3.3/§7.3: metadata for another resource MUST NOT be used
                raise OAuthError(f"protected resource metadata at {u} is for {prm.resource!r}, not {url!r}")
            break
        if prm is None and metadata_url is not None:
            raise OAuthError(f"no protected resource metadata at {metadata_url} (named by the server's WWW-Authenticate)")
        if prm is not None:
            asm = None
            for issuer in prm.authorization_servers:
                asm = await self._authorization_server(issuer, check_issuer=True, server_url=url)
                if asm is not None:
                    break
            if asm is None:
                raise OAuthError(f"no authorization server metadata for {', '.join(prm.authorization_servers)}")
            resource = prm.resource
        else:
            # 2025-03-26: no protected resource metadata; the server's origin is the authorization base
            base = legacy_authorization_base(url)
            log.info("authorization: no protected resource metadata; 2025-03-26 discovery at %s", base)
            asm = await self._authorization_server(base, check_issuer=False, server_url=url) or legacy_default_metadata(base)
            resource = key
        asm.require_secure_endpoints()
        if self.grant is None:  # PKCE protects the authorization code; a grant has none
            asm.require_pkce_s256()
        disc = _Discovery(prm, asm, resource, metadata_url)
        self._discovered[key] = disc
        return disc

    async def _client(self, asm: AuthorizationServerMetadata, *, register: bool, server_url: str,
                      scope: str | None = None) -> ClientInfo | None:
        if self.preregistered is not None:
            return self.preregistered
        if self.client_metadata_url is not None and asm.client_id_metadata_document_supported:
            return ClientInfo(self.client_metadata_url, kind="metadata-document")
        if self.redirect_handler is None:
            return None  # a grant carries its own client identity
        redirect_uri = self.redirect_handler.redirect_uri
        saved = await self.store.get(f"client {asm.issuer}")
        if saved is not None:
            try:
                info = ClientInfo.from_json(saved)
            except (KeyError, TypeError):
                info = None
            # a registration for another redirect URI (a new loopback port) would be refused
            if info is not None and (not register or redirect_uri in info.redirect_uris):
                return info
        if not register:
            return None
        if asm.registration_endpoint is None:
            raise OAuthError(
                "the authorization server offers neither Client ID Metadata Documents nor dynamic registration: "
                "pass a pre-registered client id"
            )
        body = registration_request(asm, client_name=self.client_name, redirect_uri=redirect_uri, scope=scope)
        try:
            status, doc, _ = await self._exchange("POST", asm.registration_endpoint, what="the registration endpoint",
                                               server_url=server_url, json=body)
        except _Unreachable as exc:
            raise OAuthError(f"dynamic registration at {asm.registration_endpoint} failed: {exc.reason}") from None
        if status not in (200, 201):
            raise OAuthError(f"dynamic registration at {asm.registration_endpoint} answered HTTP {status}")
        info = read_registration(doc, body)
        await self.store.set(f"client {asm.issuer}", info.to_json())
        log.info("authorization: registered at %s", asm.registration_endpoint)
        return info

    async def _token_request(self, asm: AuthorizationServerMetadata, form: dict[str, str], headers: dict[str, str],
                             *, server_url: str) -> tuple[int, Any]:
        return await self._post_token(TokenRequest(asm.token_endpoint, form, headers), server_url=server_url)

    async def _post_token(self, request: TokenRequest, *, server_url: str) -> tuple[int, Any]:
        """(status, JSON) of a token request; with DPoP, at the authorization server, a proof on
        it, and once more with the server's nonce when it answers ``use_dpop_nonce`` (RFC 9449 §8)."""
        origin = _origin(request.url)
        for _ in range(2):
            headers = dict(request.headers)
            if self.dpop is not None and request.at_authorization_server:
                headers["dpop"] = self.dpop.proof("POST", request.url, nonce=self._nonces.get(origin))
            try:
                status, doc, answer_headers = await self._exchange("POST", request.url, what=request.what, server_url=server_url,
                                                                   data=request.form, headers=headers)
            except _Unreachable as exc:
                raise OAuthError(f"{request.what} {request.url} could not be reached: {exc.reason}") from None
            nonce = answer_headers.get("dpop-nonce")
            if self.dpop is None or not nonce:
                break
            asked = use_dpop_nonce_error(status, doc) and nonce != self._nonces.get(origin)
            self._nonces[origin] = nonce
            if not asked:
                break
        return status, doc

    async def _authorize(self, url: str, challenge: BearerChallenge | None, scope: str | None) -> Tokens:
        disc = await self._discover(url, challenge)
        asm = disc.asm
        if scope is None:
            scope = self.scope or select_scope(challenge, disc.prm)
        if self.grant is not None:
            return await self._grant_tokens(url, disc, scope, self.grant)
        assert self.redirect_handler is not None
        client = await self._client(asm, register=True, server_url=url, scope=scope)
        assert client is not None
        pkce, state = PKCE.generate(), new_state()
        redirect_uri = self.redirect_handler.redirect_uri
        auth_url = authorization_url(asm, client, redirect_uri=redirect_uri, pkce=pkce, state=state,
                                     resource=disc.resource, scope=scope)
        self.authorizations += 1
        log.info("authorization: asking %s for scope %s", asm.authorization_endpoint, scope or "(none)")
        params = await self.redirect_handler.authorize(auth_url)
        # the 2025-03-26 base URL is no issuer identifier: nothing to compare an iss with
        code = read_authorization_response(params, state, issuer=asm.issuer if disc.prm is not None else None,
                                           iss_required=asm.authorization_response_iss_parameter_supported)
        form, headers = code_token_request(asm, client, code=code, redirect_uri=redirect_uri, pkce=pkce, resource=disc.resource)
        status, doc = await self._token_request(asm, form, headers, server_url=url)
        try:
            tokens = read_token_response(status, doc, requested_scope=scope, resource=disc.resource, issuer=asm.issuer,
                                         dpop=self.dpop is not None)
        except OAuthError as exc:
            if exc.error == "invalid_client" and client.kind == "dynamic":
                await self.store.delete(f"client {asm.issuer}")  # a stale registration: register again next time
            raise
        await self._save(canonical_resource(url), tokens, disc)
        log.info("authorization: token obtained (scope %s)", tokens.scope or "(none)")
        return tokens

    async def _grant_tokens(self, url: str, disc: _Discovery, scope: str | None, grant: Grant) -> Tokens:
        """Tokens by ``grant``'s requests; a refusal is kept and raised again for this server
        (SEP-1933: errors are surfaced, the grant is not retried nor another one tried)."""
        key = canonical_resource(url)
        failed = self._grant_failed.get(key)
        if failed is not None:
            raise failed
        steps = grant.requests(disc.asm, resource=disc.resource, scope=scope)
        try:
            request = next(steps)
            self.authorizations += 1
            while True:
                answer = await self._post_token(request, server_url=url)
                try:
                    request = steps.send(answer)
                except StopIteration:
                    break
            tokens = read_token_response(*answer, requested_scope=scope, resource=disc.resource, issuer=disc.asm.issuer,
                                         dpop=self.dpop is not None)
        except OAuthError as exc:
            if exc.error is not None:  # the server said no (not: it could not be reached)
                self._grant_failed[key] = exc
            raise
        await self._save(key, tokens, disc)
        log.info("authorization: token obtained by %s (scope %s)", type(grant).__name__, tokens.scope or "(none)")
        return tokens

    async def _refresh(self, url: str, tokens: Tokens) -> Tokens | None:
        """A refreshed token, or None: the refresh token was refused (the tokens are dropped), or
        the token endpoint could not be reached; either way the caller goes on without it."""
        key = canonical_resource(url)
        disc = self._discovered.get(key) or await self._saved_discovery(key, tokens)
        if disc is None or tokens.refresh_token is None or self.grant is not None:  # a grant is simply made again
            return None
        client = await self._client(disc.asm, register=False, server_url=url)
        if client is None:
            return None
        resource = tokens.resource or disc.resource
        form, headers = refresh_token_request(disc.asm, client, refresh_token=tokens.refresh_token, resource=resource)
        try:
            status, doc = await self._token_request(disc.asm, form, headers, server_url=url)
        except OAuthError as exc:
            log.info("authorization: refresh failed (%s)", exc)  # unreachable now: the tokens are kept
            return None
        try:
            new = read_token_response(status, doc, requested_scope=tokens.scope, resource=resource, issuer=disc.asm.issuer,
                                      previous_refresh=tokens.refresh_token, dpop=self.dpop is not None)
        except OAuthError as exc:
            log.info("authorization: refresh refused (%s)", exc.error or "no error code")
            await self.forget(url)
            return None
        await self._save(key, new, disc)
        log.info("authorization: token refreshed")
        return new

    async def _saved_discovery(self, key: str, tokens: Tokens) -> _Discovery | None:
        saved = await self.store.get(f"tokens {key}")
        if saved is None:
            return None
        try:
            if type(saved.get("authorization_server")) is dict:
                asm = AuthorizationServerMetadata.from_json(saved["authorization_server"])
            elif type(saved.get("authorization_server_base")) is str:
                asm = legacy_default_metadata(saved["authorization_server_base"])
            else:
                return None
        except OAuthError:
            return None
        return _Discovery(None, asm, tokens.resource or key, None)


def _authorization(tokens: Tokens) -> str:
    """The ``Authorization`` value for ``tokens``: a DPoP-bound token goes with the DPoP scheme."""
    return f"{'DPoP' if tokens.token_type == 'DPoP' else 'Bearer'} {tokens.access_token}"


def _origin(url: str) -> str:
    u = httpx.URL(url)
    return f"{u.scheme}://{u.netloc.decode('ascii')}"
