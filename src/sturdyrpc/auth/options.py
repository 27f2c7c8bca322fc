"""The ``--auth-*`` options of the HTTP-serving subcommands (``demo --mcp --http``, and any
other that serves MCP over HTTP): an OAuth 2.1 resource server verifying JWTs against an
issuer's JWKS.

Reuse in a subcommand::

    add_auth_arguments(parser)                      # in register()
    ...
    try:
        auth = auth_from_args(args, f"http://{host}:{port}/mcp")   # None without --auth-*
    except AuthOptionsError as exc:
        print(f"sturdyrpc run: {exc}", file=sys.stderr); return 2
    app = mcp_http_app(server, security=HTTPSecurity(auth=auth))
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_auth_arguments", "auth_from_args", "auth_requested", "split_scopes", "AuthOptionsError", "AUTH_KEYS"]

#: The ``--auth-*`` options by their argparse names (what a launcher hands its worker processes).
AUTH_KEYS = ("auth_issuer", "auth_jwks", "auth_scopes", "auth_audience", "auth_timeout", "auth_require_at_jwt")


class AuthOptionsError(ValueError):
    """The ``--auth-*`` options do not fit together (the message says how)."""


def add_auth_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--auth-issuer``, ``--auth-jwks``, ``--auth-scopes``, ``--auth-audience``,
    ``--auth-timeout`` and ``--auth-require-at-jwt``."""
    g = parser.add_argument_group("authorization (OAuth 2.1 resource server, needs sturdyrpc[auth]; with --http)")
    g.add_argument("--auth-issuer", metavar="ISSUER_URL", help="accept JWT access tokens issued by this authorization server (iss)")
    g.add_argument("--auth-jwks", metavar="JWKS_URL", help="the issuer's JSON Web Key Set (signing keys, refreshed on rotation)")
    g.add_argument("--auth-scopes", metavar="SCOPE[,SCOPE]", help="scopes required (and advertised in the metadata)")
    g.add_argument("--auth-audience", metavar="URL",
                   help="this server's public URL: the token audience (RFC 8707) and the metadata's resource"
                        " (default: the server's own MCP URL)")
    g.add_argument("--auth-timeout", metavar="SECONDS", type=float,
                   help="the longest a request waits for its token to be verified, the JWKS fetch included;"
                        " past it: 503 with Retry-After (default: 5)")
    g.add_argument("--auth-require-at-jwt", action="store_true", default=None,
                   help="accept only tokens whose header says typ: at+jwt (RFC 9068); by default the generic"
                        " JWT type (and none) is accepted too, any other type refused")


def auth_requested(args: argparse.Namespace) -> bool:
    """Whether any ``--auth-*`` option was given."""
    return any(getattr(args, name, None) for name in AUTH_KEYS)


def split_scopes(value: str | None) -> list[str]:
    """``"a,b c"`` -> ``["a", "b", "c"]`` (commas or spaces; duplicates dropped, order kept)."""
    if not value:
        return []
    return list(dict.fromkeys(s for s in value.replace(",", " ").split() if s))


def auth_from_args(args: argparse.Namespace, default_resource: str, *, server_wide_scopes: bool = True) -> Any:
    """The :class:`~sturdyrpc.auth.ResourceServer` the options ask for, or None when none is given.

    ``default_resource``: the server's own MCP URL (the audience unless ``--auth-audience``).
    ``server_wide_scopes``: ``--auth-scopes`` required on every request (True), or only
    advertised (the caller attaches them to tools itself, as the demo does).
    Raises :class:`AuthOptionsError` for options that do not fit, and ModuleNotFoundError
    (``jwt``) without the ``auth`` extra.
    """
    if not auth_requested(args):
        return None
    issuer, jwks = args.auth_issuer, args.auth_jwks
    scopes_opt, audience = args.auth_scopes, args.auth_audience
    if not issuer or not jwks:
        raise AuthOptionsError("--auth-issuer and --auth-jwks are both needed to verify tokens")
    from .jwks import JWTVerifier
    from .resource_server import VERIFY_TIMEOUT, ResourceServer

    resource = audience or default_resource
    scopes = split_scopes(scopes_opt)
    timeout = getattr(args, "auth_timeout", None)
    timeout = VERIFY_TIMEOUT if timeout is None else timeout
    if not 0 < timeout <= 300:
        raise AuthOptionsError("--auth-timeout must be between 0 and 300 seconds")
    try:
        verifier = JWTVerifier(issuer, jwks, resource, timeout=timeout,
                               require_at_jwt=bool(getattr(args, "auth_require_at_jwt", False)))
        return ResourceServer(verifier, resource=resource, authorization_servers=[issuer],
                              scopes=scopes if server_wide_scopes else (), scopes_supported=scopes, timeout=timeout)
    except ValueError as exc:
        raise AuthOptionsError(str(exc)) from None
