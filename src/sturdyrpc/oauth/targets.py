"""Where the OAuth client may send a request, decided before anything is sent.

Every URL the client fetches or posts to (protected resource metadata, authorization server
metadata, registration, token) comes from a server's answer: a ``401``'s ``resource_metadata``,
a metadata document's ``authorization_servers`` or endpoints. A server must not be able to point
the client at the machine's own network: the cloud metadata service (169.254.169.254), a router,
an intranet service. So each URL must be

- ``https``, or ``http`` to a loopback host (``127.0.0.0/8``, ``::1``, ``localhost``: local
  development, OAuth 2.1 §1.5 as MCP applies it);
- a host whose addresses (every one the name resolves to, IPv4 and IPv6, an IPv4-mapped IPv6
  address read as the IPv4 one) are public: link-local (``169.254.0.0/16``, ``fe80::/10``),
  private (``10/8``, ``172.16/12``, ``192.168/16``, ``fc00::/7``), shared, reserved, multicast
  and unspecified addresses are refused unless ``allow_private`` is set;
- loopback only for an MCP server that is itself on loopback (a remote server cannot send the
  client to local services), unless ``allow_private`` is set.

The name is resolved here and again by the HTTP client when it connects; a name that resolves
to another address the second time (DNS rebinding) still meets ``https`` and certificate
verification for that name, which a service on the local network cannot pass (plain ``http`` is
allowed only to literal loopback hosts, which resolve to nothing else).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import urlsplit

from .errors import OAuthError

__all__ = ["Resolve", "check_target", "is_loopback_host", "refused_address", "resolve_host"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: ``resolve(host, port) -> the addresses host stands for`` (the default asks the system resolver).
Resolve = Callable[[str, int], Awaitable[Iterable[str]]]


def _ip(text: str) -> IPAddress | None:
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])  # an IPv6 zone (fe80::1%eth0) says nothing of the address
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped  # ::ffff:169.254.169.254 is 169.254.169.254
    return ip


def is_loopback_host(host: str | None) -> bool:
    """``localhost`` (RFC 6761: always loopback) or a loopback address literal (``127.0.0.0/8``,
    ``::1``, their IPv4-mapped form)."""
    if not host:
        return False
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost":
        return True
    ip = _ip(host)
    return ip is not None and ip.is_loopback


def refused_address(ip: IPAddress) -> str | None:
    """Why the client must not connect to ``ip`` without ``allow_private``, or None when it is
    public or loopback (loopback has its own rule)."""
    if ip.is_loopback:
        return None
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_unspecified:
        return "an unspecified address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_private:
        return "a private address"
    if not ip.is_global or ip.is_reserved:
        return "a non-public address"
    return None


async def resolve_host(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for ``host`` (TCP, IPv4 and IPv6)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def check_target(url: str, *, what: str, server_url: str, allow_private: bool = False,
                       resolve: Resolve = resolve_host) -> None:
    """Raise :class:`OAuthError` unless the client may send a request to ``url`` (``what``
    names it in the message) on behalf of the MCP server at ``server_url``; see the module
    docstring. Nothing is sent: a refused URL is never asked."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise OAuthError(f"{what} {url!r} is not a valid URL") from None
    if parts.scheme not in ("https", "http") or not host:
        raise OAuthError(f"{what} {url!r} is not an https URL")
    loopback = is_loopback_host(host)
    if parts.scheme == "http" and not loopback:
        raise OAuthError(f"{what} {url!r} is not https (plain http only to a loopback host)")
    loopback_allowed = allow_private or is_loopback_host(urlsplit(server_url).hostname)
    if loopback:
        if not loopback_allowed:
            raise OAuthError(f"{what} {url!r} is on loopback, but the MCP server is not (allow_private_networks to allow it)")
        return
    literal = _ip(host)
    if literal is not None:
        addresses: list[IPAddress] = [literal]
    else:
        try:
            found = list(await resolve(host, port))
        except OSError:
            raise OAuthError(f"{what} {url!r}: the host name does not resolve") from None
        addresses = [ip for ip in (_ip(a) for a in found) if ip is not None]
        if not addresses:
            raise OAuthError(f"{what} {url!r}: the host name does not resolve")
    for ip in addresses:
        if ip.is_loopback:
            if not loopback_allowed:
                raise OAuthError(f"{what} {url!r} resolves to loopback, but the MCP server is not on loopback"
                                 " (allow_private_networks to allow it)")
            continue
        reason = refused_address(ip)
        if reason is not None and not allow_private:
            raise OAuthError(f"{what} {url!r} resolves to {reason} ({ip}); pass allow_private_networks=True to allow it")
