"""Parsing ``WWW-Authenticate`` (RFC 9110 §11.6.1) and reading a Bearer challenge (RFC 6750 §3, RFC 9728 §5.1).

Pure functions: a header value in, challenges out. A header may carry several challenges
(``Basic realm="x", Bearer scope="a b"``), and a response may carry several headers; both are
handled. Parameter names are case-insensitive; values are tokens or quoted strings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Challenge", "BearerChallenge", "parse_www_authenticate", "bearer_challenge"]

_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_TOKEN68 = r"[A-Za-z0-9\-._~+/]+=*"
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_PARAM = re.compile(rf"\s*({_TOKEN})\s*=\s*({_TOKEN}|{_QUOTED})\s*")
_SCHEME = re.compile(rf"\s*({_TOKEN})(?=\s|,|$)")
_TOKEN68_ARG = re.compile(rf"\s+({_TOKEN68})\s*(?:,|$)")


@dataclass(frozen=True)
class Challenge:
    """One challenge: its auth scheme (as sent) and its parameters (names lower-cased)."""

    scheme: str
    params: dict[str, str] = field(default_factory=dict)
    token68: str | None = None


@dataclass(frozen=True)
class BearerChallenge:
    """What a Bearer (or DPoP, RFC 9449 §7.1: the same parameters) challenge tells an MCP client."""

    error: str | None = None
    error_description: str | None = None
    scope: str | None = None
    resource_metadata: str | None = None
    realm: str | None = None
    #: "bearer" or "dpop", lower-cased.
    scheme: str = "bearer"

    @property
    def scopes(self) -> list[str]:
        """The challenged scopes, in order, without duplicates."""
        return _split_scope(self.scope)


def _split_scope(scope: str | None) -> list[str]:
    out: list[str] = []
    for s in (scope or "").split():
        if s not in out:
            out.append(s)
    return out


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def parse_www_authenticate(values: str | Iterable[str]) -> list[Challenge]:
    """Every challenge in one or more ``WWW-Authenticate`` values. Unparseable rest is skipped."""
    if isinstance(values, str):
        values = [values]
    out: list[Challenge] = []
    for value in values:
        pos, n = 0, len(value)
        while pos < n:
            while pos < n and value[pos] in " \t,":
                pos += 1
            m = _SCHEME.match(value, pos)
            if m is None:
                break
            scheme, pos = m.group(1), m.end()
            params: dict[str, str] = {}
            token68: str | None = None
            t68 = _TOKEN68_ARG.match(value, pos)
            if t68 is not None and _PARAM.match(value, pos) is None:
                token68, pos = t68.group(1), t68.end()
            else:
                while pos < n:
                    save = pos
                    while pos < n and value[pos] in " \t,":
                        pos += 1
                    p = _PARAM.match(value, pos)
                    if p is None:
                        pos = save
                        break
                    params.setdefault(p.group(1).lower(), _unquote(p.group(2)))
                    pos = p.end()
            out.append(Challenge(scheme, params, token68))
            while pos < n and value[pos] in " \t":
                pos += 1
            if pos < n and value[pos] not in ",":
                # the next challenge starts here ("Basic realm=x Bearer" is malformed but readable);
                # anything else cannot be read, and guessing could pick up a forged parameter
                if _SCHEME.match(value, pos) is None:
                    break
    return out


def bearer_challenge(values: str | Iterable[str], schemes: tuple[str, ...] = ("bearer", "dpop")) -> BearerChallenge | None:
    """The first challenge of one of ``schemes`` (lower-case; matched case-insensitively), or None."""
    for ch in parse_www_authenticate(values):
        if ch.scheme.lower() in schemes:
            p = ch.params
            return BearerChallenge(
                error=p.get("error"),
                error_description=p.get("error_description"),
                scope=p.get("scope"),
                resource_metadata=p.get("resource_metadata"),
                realm=p.get("realm"),
                scheme=ch.scheme.lower(),
            )
    return None
