"""``sturdyrpc mcp``: talk to an MCP server on stdio.

::

    sturdyrpc mcp tools [--protocol V] [--timeout S] -- CMD ARGS...
    sturdyrpc mcp call TOOL [ARGS_JSON] [--timeout S] [--protocol V] -- CMD ARGS...
    sturdyrpc mcp resources|prompts [--protocol V] [--timeout S] -- CMD ARGS...

``tools`` lists the server's tools: name, description and a summary of the input schema
(``name: type``, ``?`` marks optional arguments). ``call`` calls one tool and prints its
content: text blocks as text, other blocks as a short description, and structured content
as JSON (unless it only repeats the text). Progress goes to stderr. ``resources`` lists the
resources (URI, name, MIME type) and then the resource templates; ``prompts`` lists the prompts
and their arguments. Every list follows the server's pages (``nextCursor``) to the end.

With ``--url URL`` instead of ``-- CMD``, the server is reached over Streamable HTTP; a
protected server (401) starts the OAuth flow (docs/AUTH_CLIENT.md): the browser is opened on
the authorization URL (also printed to stderr), a listener on 127.0.0.1 takes the redirect,
and tokens and registrations are kept in ``--token-store`` (default
``~/.config/sturdyrpc/oauth.json``, mode 0600) for the next run. Without a user:
``--client-credentials`` (with ``--client-id`` and ``--client-secret-env`` or ``--private-key``),
``--assertion-file`` (workload identity: the JWT bearer grant), ``--idp-token-endpoint`` with
``--id-token-file`` (enterprise-managed authorization); ``--dpop`` binds the tokens to a key
made for the run (DPoP).

Exit codes: 0 done; 1 the tool reported ``isError``, a protocol error, or the server died;
2 bad usage; 124 ``--timeout`` passed (the call is cancelled first); 127 the server could
not be started; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from . import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_NOT_STARTED, EXIT_OK, EXIT_TIMEOUT, EXIT_USAGE, cancel_on_signal


def register(sub: Any) -> None:
    m = sub.add_parser(
        "mcp",
        help="talk to an MCP server on stdio: sturdyrpc mcp tools|call|resources|prompts ... -- CMD ARGS...",
        description="List or call the tools (or list the resources and prompts) of an MCP server started as a subprocess (stdio).",
        epilog="exit codes: 0 ok, 1 tool error / protocol error / server gone, 2 usage, 124 timeout, 127 cannot start the server",
    )
    msub = m.add_subparsers(dest="mcp_command", required=True)
    t = msub.add_parser("tools", help="list the server's tools")
    c = msub.add_parser("call", help="call one tool and print its content")
    c.add_argument("tool", help="tool name")
    c.add_argument("arguments", nargs="?", help="tool arguments as a JSON object")
    c.add_argument("--task", action="store_true",
                   help="call the tool as an MCP task (2025-11-25 params.task, or the 2026-07-28 tasks extension): "
                        "prints the task's status on stderr while polling, then the result")
    c.add_argument("--task-ttl", type=int, metavar="MS", help="with --task: ask the server to keep the task MS milliseconds")
    c.add_argument("--elicit-accept", metavar="JSON",
                   help="answer the server's elicitation requests by accepting with this JSON object as the content "
                        "(without it the client does not declare elicitation); a task asking for it shows input_required")
    r = msub.add_parser("resources", help="list the server's resources and resource templates")
    pr = msub.add_parser("prompts", help="list the server's prompts")
    for p in (t, c, r, pr):
        p.add_argument("--timeout", type=float, metavar="S", help="give up after S seconds (exit 124)")
        p.add_argument("--protocol", metavar="VERSION", help="force a protocol version (default: negotiate the newest)")
        _add_http_options(p)
    m.set_defaults(func=run)


def _add_http_options(p: Any) -> None:
    g = p.add_argument_group("over HTTP, with OAuth when the server asks for it")
    g.add_argument("--url", metavar="URL", help="the server's Streamable HTTP endpoint (instead of -- CMD)")
    g.add_argument("--client-id", metavar="ID", help="a pre-registered OAuth client id")
    g.add_argument("--client-secret-env", metavar="VAR",
                   help="the environment variable holding that client's secret (kept off the command line)")
    g.add_argument("--client-metadata-url", metavar="URL",
                   help="an https URL of this client's metadata document (Client ID Metadata Documents)")
    g.add_argument("--scope", metavar="SCOPES", help="ask for exactly these scopes (default: what the server names)")
    g.add_argument("--token-store", metavar="PATH", help="where tokens are kept (default ~/.config/sturdyrpc/oauth.json)")
    g.add_argument("--no-token-store", action="store_true", help="keep tokens in memory only")
    g.add_argument("--redirect-port", type=int, default=0, metavar="N", help="the loopback redirect port (default: any free)")
    g.add_argument("--no-browser", action="store_true", help="only print the authorization URL (to stderr)")
    g.add_argument("--client-credentials", action="store_true",
                   help="no user: the client_credentials grant as --client-id (--client-secret-env or --private-key)")
    g.add_argument("--private-key", metavar="PEM", help="with --client-credentials: sign a private_key_jwt assertion with this key file")
    g.add_argument("--signing-alg", default="ES256", metavar="ALG", help="the --private-key algorithm (default ES256)")
    g.add_argument("--assertion-file", metavar="PATH",
                   help="no user: the JWT bearer grant with the workload identity JWT in PATH (read for each grant)")
    g.add_argument("--idp-token-endpoint", metavar="URL",
                   help="no user: enterprise-managed authorization, exchanging --id-token-file's ID token at this endpoint")
    g.add_argument("--id-token-file", metavar="PATH", help="the user's ID token from the identity provider")
    g.add_argument("--idp-client-id", metavar="ID", help="this client's id at the identity provider")
    g.add_argument("--idp-client-secret-env", metavar="VAR", help="the variable holding its secret there")
    g.add_argument("--dpop", action="store_true", help="DPoP-bound tokens (RFC 9449), with a key made for this run")


def default_token_store() -> str:
    """``$XDG_CONFIG_HOME/sturdyrpc/oauth.json``, else ``~/.config/sturdyrpc/oauth.json``."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "sturdyrpc", "oauth.json")


def _file_text(path: str) -> Any:
    """The current text of ``path``, read at each grant (platforms rotate workload tokens)."""
    from pathlib import Path

    return lambda: Path(path).read_text(encoding="utf-8").strip()


def _grant(args: argparse.Namespace, secret: str | None) -> Any:
    """The grant without a user the options name, or None (a user signs in)."""
    from ..oauth.grants import ClientCredentialsGrant, EnterpriseGrant, JWTBearerGrant

    if args.idp_token_endpoint:
        idp_secret = os.environ.get(args.idp_client_secret_env) if args.idp_client_secret_env else None
        return EnterpriseGrant(args.idp_token_endpoint, _file_text(args.id_token_file),
                               ClientCredentialsGrant(args.client_id, secret, private_key=args.private_key,
                                                      signing_algorithm=args.signing_alg),
                               idp_client_id=args.idp_client_id, idp_client_secret=idp_secret)
    if args.assertion_file:
        return JWTBearerGrant(_file_text(args.assertion_file), client_id=args.client_id)
    if args.client_credentials:
        return ClientCredentialsGrant(args.client_id, secret, private_key=args.private_key, signing_algorithm=args.signing_alg)
    return None


def _oauth_provider(args: argparse.Namespace) -> Any:
    from ..oauth import FileTokenStore, LoopbackRedirectHandler, MemoryTokenStore, OAuthClientProvider

    secret = os.environ.get(args.client_secret_env) if args.client_secret_env else None
    store = MemoryTokenStore() if args.no_token_store else FileTokenStore(args.token_store or default_token_store())
    grant = _grant(args, secret)
    if grant is not None:
        return OAuthClientProvider(grant=grant, store=store, scope=args.scope, dpop=args.dpop)
    handler = LoopbackRedirectHandler(args.redirect_port, open_browser=not args.no_browser)
    return OAuthClientProvider(
        handler, store=store, client_id=args.client_id, client_secret=secret,
        client_metadata_url=args.client_metadata_url, scope=args.scope, dpop=args.dpop,
    )


def _err(msg: str) -> None:
    sys.stderr.write(f"sturdyrpc mcp: {msg}\n")
    sys.stderr.flush()


def _type_of(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "any"
    if "type" in schema:
        t = schema["type"]
        if t == "array" and isinstance(schema.get("items"), dict):
            return f"array of {_type_of(schema['items'])}"
        return "|".join(t) if isinstance(t, list) else str(t)
    if "enum" in schema:
        return "|".join(json.dumps(v) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return "|".join(_type_of(s) for s in schema[key])
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    return "any"


def schema_summary(schema: Any) -> str:
    """``a: integer, b?: string`` for an object schema."""
    if not isinstance(schema, dict):
        return ""
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    parts = [f"{name}{'' if name in required else '?'}: {_type_of(s)}" for name, s in props.items()]
    return ", ".join(parts)


def _render_block(block: Any) -> str:
    if not isinstance(block, dict):
        return json.dumps(block, ensure_ascii=False)
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind in ("image", "audio"):
        return f"[{kind} {block.get('mimeType', '?')}, {len(str(block.get('data', '')))} bytes of base64]"
    if kind == "resource":
        res = block.get("resource") or {}
        if "text" in res:
            return str(res["text"])
        return f"[resource {res.get('uri', '?')} {res.get('mimeType', '')}]".rstrip()
    if kind == "resource_link":
        return f"[link {block.get('uri', '?')}]"
    return json.dumps(block, ensure_ascii=False)


def _repeats_text(structured: Any, texts: list[str]) -> bool:
    if len(texts) != 1:
        return False
    text = texts[0]
    try:
        decoded = json.loads(text)
    except ValueError:
        decoded = text
    return bool(structured == decoded or structured == {"result": decoded} or structured == {"result": text})


def render_result(result: dict[str, Any]) -> str:
    """What ``sturdyrpc mcp call`` prints for a tool result."""
    content = result.get("content") or []
    lines = [_render_block(b) for b in content]
    texts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    if "structuredContent" in result and not (len(content) == len(texts) and _repeats_text(result["structuredContent"], texts)):
        lines.append(json.dumps(result["structuredContent"], ensure_ascii=False))
    return "\n".join(lines)


def _listing(head: Any, item: dict[str, Any], with_name: bool = True) -> str:
    """One listed resource, template or prompt: its head line, then its description indented."""
    line = str(head)
    if with_name and item.get("name"):
        line += f"  {item['name']}"
    if item.get("mimeType"):
        line += f"  ({item['mimeType']})"
    desc = (item.get("description") or "").strip().splitlines()
    return line + (f"\n    {desc[0]}" if desc else "")


def _grant_usage(args: argparse.Namespace) -> str | None:
    """What is wrong with the options of a grant without a user, if anything."""
    kinds = [k for k, on in (("--client-credentials", args.client_credentials), ("--assertion-file", args.assertion_file),
                             ("--idp-token-endpoint", args.idp_token_endpoint)) if on]
    if len(kinds) > 1:
        return f"give only one of {', '.join(kinds)}"
    if args.idp_token_endpoint and not args.id_token_file:
        return "--idp-token-endpoint needs --id-token-file"
    if (args.client_credentials or args.idp_token_endpoint) and not args.client_id:
        return f"{kinds[0]} needs --client-id"
    if (args.client_credentials or args.idp_token_endpoint) and bool(args.client_secret_env) == bool(args.private_key):
        return f"{kinds[0]} needs exactly one of --client-secret-env and --private-key"
    if args.private_key and not kinds:
        return "--private-key goes with --client-credentials or --idp-token-endpoint"
    return None


def run(args: argparse.Namespace) -> int:
    if getattr(args, "url", None) is not None:
        if args.server_command:
            _err("give either --url or a server command after --, not both")
            return EXIT_USAGE
        if not args.url.startswith(("http://", "https://")):
            _err("--url must be an http:// or https:// URL")
            return EXIT_USAGE
        if args.client_secret_env and not os.environ.get(args.client_secret_env):
            _err(f"--client-secret-env: ${args.client_secret_env} is not set")
            return EXIT_USAGE
        problem = _grant_usage(args)
        if problem:
            _err(problem)
            return EXIT_USAGE
    elif not args.server_command:
        _err("no server command: put it after --, e.g. sturdyrpc mcp tools -- sturdyrpc demo --mcp")
        return EXIT_USAGE
    arguments: Any = {}
    if args.mcp_command == "call" and args.arguments is not None:
        try:
            arguments = json.loads(args.arguments)
        except ValueError as exc:
            _err(f"ARGS_JSON is not valid JSON: {exc}")
            return EXIT_USAGE
        if not isinstance(arguments, dict):
            _err("ARGS_JSON must be a JSON object")
            return EXIT_USAGE
    accept = getattr(args, "elicit_accept", None)
    if accept is not None:
        try:
            args.elicit_accept = json.loads(accept)
        except ValueError as exc:
            _err(f"--elicit-accept is not valid JSON: {exc}")
            return EXIT_USAGE
        if not isinstance(args.elicit_accept, dict):
            _err("--elicit-accept must be a JSON object")
            return EXIT_USAGE
    if args.timeout is not None and args.timeout <= 0:
        _err("--timeout must be positive")
        return EXIT_USAGE
    from ..mcp.versions import SUPPORTED_VERSIONS

    if args.protocol is not None and args.protocol not in SUPPORTED_VERSIONS:
        _err(f"unknown protocol version {args.protocol!r} (known: {', '.join(SUPPORTED_VERSIONS)})")
        return EXIT_USAGE
    try:
        return asyncio.run(_main(args, arguments))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


async def _main(args: argparse.Namespace, arguments: dict[str, Any]) -> int:
    auth = None
    if args.url is not None:
        from ..oauth.errors import OAuthError

        try:
            auth = _oauth_provider(args)
        except (OSError, ValueError, OAuthError) as exc:
            _err(f"cannot set up authorization: {exc}")
            return EXIT_USAGE
    try:
        return await _session(args, arguments, auth)
    finally:
        if auth is not None:
            await auth.aclose()


async def _session(args: argparse.Namespace, arguments: dict[str, Any], auth: Any) -> int:
    from ..errors import RPCError
    from ..mcp.client import NegotiationFailed
    from ..peer import ConnectionClosed, RequestTimeout

    state = {"interrupted": False, "timed_out": False}
    timer = cancel_on_signal(state, args.timeout)
    conn_cm = _connection(args, auth)
    try:
        client = await conn_cm.__aenter__()
    except OSError as exc:
        _err(f"cannot start {args.server_command[0]!r}: {exc.strerror or exc}")
        return EXIT_NOT_STARTED
    except asyncio.CancelledError:
        return _cancel_code(state)
    except NegotiationFailed as exc:
        _err(str(exc))
        return EXIT_ERROR
    except (RPCError, ConnectionClosed, RequestTimeout) as exc:
        _err(f"could not connect: {exc}")
        return EXIT_ERROR
    code = EXIT_ERROR
    exc_info: tuple[Any, Any, Any] = (None, None, None)
    try:
        code = await _command(client, args, arguments)
        sys.stdout.flush()
    except asyncio.CancelledError:
        code = _cancel_code(state)
    except BrokenPipeError:
        code = EXIT_OK  # our reader (e.g. `| head`) has seen enough
    except RPCError as exc:
        _err(f"error {exc.code}: {exc.message}" + (f" {json.dumps(exc.data)}" if exc.has_data else ""))
        code = EXIT_ERROR
    except (ConnectionClosed, RequestTimeout) as exc:
        _err(str(exc))
        tail = client.connection.stderr_text()[-2000:] if client.connection is not None else ""
        if tail:
            sys.stderr.write(tail if tail.endswith("\n") else tail + "\n")
        code = EXIT_ERROR
    finally:
        if timer is not None:
            timer.cancel()
        try:
            await conn_cm.__aexit__(*exc_info)
        except (asyncio.CancelledError, Exception):
            pass
    return code



def _connection(args: argparse.Namespace, auth: Any) -> Any:
    """The client session to open (an async context manager): over HTTP with ``--url``, else on
    the stdio of the server command; elicitation answered when ``--elicit-accept`` was given."""
    elicitation = None
    content = getattr(args, "elicit_accept", None)
    if isinstance(content, dict):

        def elicitation(params: dict[str, Any]) -> dict[str, Any]:
            sys.stderr.write(f"elicitation: {params.get('message')!s} -> accept {json.dumps(content)}\n")
            sys.stderr.flush()
            return {"action": "accept", "content": content}

    if args.url is not None:
        from ..mcp_http.connect import connect_http

        return connect_http(args.url, args.protocol, auth=auth, timeout=None, elicitation=elicitation,
                            discover_timeout=min(10.0, args.timeout or 10.0))
    from ..mcp.client import connect

    return connect(args.server_command, args.protocol, timeout=None, elicitation=elicitation,
                   discover_timeout=min(10.0, args.timeout or 10.0))


async def _command(client: Any, args: argparse.Namespace, arguments: dict[str, Any]) -> int:
    """Run the subcommand on an open session; its exit code."""
    if args.mcp_command == "tools":
        for tool in await client.list_tools():
            desc = (tool.get("description") or "").strip().splitlines()
            sys.stdout.write(f"{tool.get('name')}({schema_summary(tool.get('inputSchema'))})\n")
            if desc:
                sys.stdout.write(f"    {desc[0]}\n")
    elif args.mcp_command == "resources":
        for res in await client.list_resources():
            sys.stdout.write(_listing(res.get("uri"), res) + "\n")
        for tpl in await client.list_resource_templates():
            sys.stdout.write(_listing(tpl.get("uriTemplate"), tpl) + "\n")
    elif args.mcp_command == "prompts":
        for prompt in await client.list_prompts():
            names = [f"{a.get('name')}{'' if a.get('required') else '?'}" for a in prompt.get("arguments") or [] if isinstance(a, dict)]
            sys.stdout.write(_listing(f"{prompt.get('name')}({', '.join(names)})", prompt, with_name=False) + "\n")
    else:
        return await _call_tool(client, args, arguments)
    return EXIT_OK


async def _call_tool(client: Any, args: argparse.Namespace, arguments: dict[str, Any]) -> int:
    """``call``: print the tool's result (as a task with ``--task``); 1 when it reported ``isError``."""
    if getattr(args, "task", False):
        handle = await client.call_tool(args.tool, arguments, as_task=True, ttl_ms=args.task_ttl, on_progress=_on_progress)
        result = await handle.result(on_status=_on_task_status)
    else:
        result = await client.call_tool(args.tool, arguments, on_progress=_on_progress)
    out = render_result(result)
    if out:
        sys.stdout.write(out + "\n")
    if result.get("isError"):
        _err("the tool reported an error")
        return EXIT_ERROR
    return EXIT_OK


def _on_progress(progress: float, total: float | None, message: str | None) -> None:
    text = f"{progress:g}" + (f"/{total:g}" if total is not None else "")
    if message:
        text += f" {message}"
    sys.stderr.write(f"progress: {text}\n")
    sys.stderr.flush()


def _on_task_status(t: dict[str, Any]) -> None:
    msg = t.get("statusMessage")
    sys.stderr.write(f"task {t.get('taskId') or '(answered at once)'}: {t.get('status')}" + (f" ({msg})" if msg else "") + "\n")
    sys.stderr.flush()


def _cancel_code(state: dict[str, bool]) -> int:
    if state["timed_out"]:
        _err("timed out")
        return EXIT_TIMEOUT
    return EXIT_INTERRUPTED
