"""The thin I/O layer: fetching a JWKS or posting to an introspection endpoint over HTTP.

Both verifiers take a fetch function, so anything that speaks HTTP can replace httpx (the
default, from the ``http`` extra). Answers are bounded in size and in time: ``timeout`` is a
deadline for the whole exchange (connecting, the answer's head and all of its body), not per
read, so an endpoint that drips its answer a byte at a time is cut off like one that says
nothing. Every failure is a :class:`VerificationUnavailable` (never a reason to accept a token).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from .. import codec
from .errors import VerificationUnavailable

__all__ = ["GetJSON", "PostForm", "httpx_get_json", "httpx_post_form", "within", "MAX_DOCUMENT_BYTES", "FETCH_TIMEOUT"]

#: ``get(url) -> decoded JSON``.
GetJSON = Callable[[str], Awaitable[Any]]
#: ``post(url, form fields, headers) -> (status, decoded JSON or None)``.
PostForm = Callable[[str, Mapping[str, str], Mapping[str, str]], Awaitable[tuple[int, Any]]]

#: Larger answers are refused (a JWKS or an introspection response is a few KiB).
MAX_DOCUMENT_BYTES = 512 * 1024

#: Seconds one fetch may take from start to the last byte of the answer, unless told otherwise.
FETCH_TIMEOUT = 5.0

T = TypeVar("T")


async def within(seconds: float, fetch: Awaitable[T], what: str) -> T:
    """``await fetch``, or :class:`VerificationUnavailable` once ``seconds`` have passed: the
    one deadline every outbound fetch of the resource server runs under, whoever wrote it."""
    try:
        async with asyncio.timeout(seconds):
            return await fetch
    except TimeoutError:
        raise VerificationUnavailable(f"{what}: no complete answer within {seconds:g} s") from None


def _decode(body: bytes) -> Any:
    if len(body) > MAX_DOCUMENT_BYTES:
        raise VerificationUnavailable("answer too large")
    try:
        return codec.decode(body)
    except Exception:
        raise VerificationUnavailable("answer is not JSON") from None


async def _read(response: Any) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_DOCUMENT_BYTES:
            raise VerificationUnavailable("answer too large")
        chunks.append(chunk)
    return b"".join(chunks)


def httpx_get_json(timeout: float = FETCH_TIMEOUT) -> GetJSON:
    """A :data:`GetJSON` on httpx: no redirects followed, at most ``timeout`` seconds for the
    whole fetch (body included)."""
    import httpx

    async def fetch(url: str) -> Any:
        try:
            async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
                async with client.stream("GET", url, headers={"accept": "application/json"}) as r:
                    if r.status_code != 200:
                        raise VerificationUnavailable(f"HTTP {r.status_code}")
                    return _decode(await _read(r))
        except httpx.HTTPError as exc:
            raise VerificationUnavailable(f"fetch failed: {type(exc).__name__}") from None

    async def get(url: str) -> Any:
        return await within(timeout, fetch(url), "GET")

    return get


def httpx_post_form(timeout: float = FETCH_TIMEOUT) -> PostForm:
    """A :data:`PostForm` on httpx: no redirects followed, at most ``timeout`` seconds for the
    whole exchange (the answer's body included)."""
    import httpx

    async def exchange(url: str, form: Mapping[str, str], headers: Mapping[str, str]) -> tuple[int, Any]:
        try:
            async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
                async with client.stream("POST", url, data=dict(form), headers=dict(headers)) as r:
                    body = await _read(r)
                    return r.status_code, (_decode(body) if r.status_code == 200 else None)
        except httpx.HTTPError as exc:
            raise VerificationUnavailable(f"request failed: {type(exc).__name__}") from None

    async def post(url: str, form: Mapping[str, str], headers: Mapping[str, str]) -> tuple[int, Any]:
        return await within(timeout, exchange(url, form, headers), "POST")

    return post
