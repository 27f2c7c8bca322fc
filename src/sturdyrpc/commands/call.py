"""``sturdyrpc call``: the ``curl`` of JSON-RPC over stdio.

::

    sturdyrpc call METHOD [PARAMS_JSON] [--notify] [--id ID] [--timeout S] [--progress] -- CMD ARGS...

Starts ``CMD ARGS...``, sends one request (or notification), and exits with:

- 0: the result, as JSON, on stdout (``--notify``: once the notification is written);
- 1: the server answered a JSON-RPC error (the error object as JSON on stderr), or it
  died / closed its stdout before answering (a message on stderr, with its stderr tail);
- 2: bad usage (no server command, params that are not a JSON array or object);
- 124: ``--timeout`` passed (the cancel notification is sent first);
- 127: the server command could not be started;
- 130: interrupted (Ctrl-C; the cancel notification is sent first).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from . import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_NOT_STARTED, EXIT_OK, EXIT_TIMEOUT, EXIT_USAGE, cancel_on_signal


def register(sub: Any) -> None:
    c = sub.add_parser(
        "call",
        help="call a method on a stdio server: sturdyrpc call METHOD [PARAMS] -- CMD ARGS...",
        description="Start a JSON-RPC server on stdio, send one request, print the result as JSON.",
        epilog="exit codes: 0 result, 1 JSON-RPC error or server gone, 2 usage, 124 timeout, 127 cannot start the server",
    )
    c.add_argument("method", help="method name")
    c.add_argument("params", nargs="?", help="params as JSON: an array or an object")
    c.add_argument("--notify", action="store_true", help="send a notification (no reply expected)")
    c.add_argument("--id", help="request id: an integer, or a string (JSON-quote it to force a string: '\"7\"')")
    c.add_argument("--timeout", type=float, metavar="S", help="give up after S seconds (exit 124), sending a cancel")
    c.add_argument("--progress", action="store_true", help="ask for progress and print it on stderr")
    c.add_argument("--framing", choices=["line", "content-length"], default="line", help="stdio framing (default: line)")
    c.set_defaults(func=run)


def _err(msg: str) -> None:
    sys.stderr.write(f"sturdyrpc call: {msg}\n")
    sys.stderr.flush()


def _parse_id(text: str) -> str | int:
    try:
        v = json.loads(text)
    except ValueError:
        return text
    if type(v) is int or type(v) is str:
        return v
    return text


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def run(args: argparse.Namespace) -> int:
    if not args.server_command:
        _err("no server command: put it after --, e.g. sturdyrpc call echo '[\"hi\"]' -- sturdyrpc demo")
        return EXIT_USAGE
    params: Any = None
    if args.params is not None:
        try:
            params = json.loads(args.params)
        except ValueError as exc:
            _err(f"PARAMS is not valid JSON: {exc}")
            return EXIT_USAGE
        if not isinstance(params, (list, dict)):
            _err("PARAMS must be a JSON array or object")
            return EXIT_USAGE
    if args.timeout is not None and args.timeout <= 0:
        _err("--timeout must be positive")
        return EXIT_USAGE
    req_id = _parse_id(args.id) if args.id is not None else None
    try:
        return asyncio.run(_call(args, params, req_id))
    except (KeyboardInterrupt, asyncio.CancelledError):
        return EXIT_INTERRUPTED


async def _call(args: argparse.Namespace, params: Any, req_id: str | int | None) -> int:
    from ..client import connect_stdio
    from ..codec import encode
    from ..errors import RPCError
    from ..peer import ConnectionClosed, RequestTimeout

    state = {"interrupted": False}
    cancel_on_signal(state)
    try:
        cm = connect_stdio(args.server_command, framing=args.framing, default_timeout=None, shutdown_grace=1.0, close_deadline=2.0)
        conn = await cm.__aenter__()
    except OSError as exc:
        _err(f"cannot start {args.server_command[0]!r}: {exc.strerror or exc}")
        return EXIT_NOT_STARTED
    code = EXIT_ERROR
    try:
        peer = conn.peer
        try:
            if args.notify:
                await peer.notify(args.method, params)
                await peer.flush(5.0)
            else:
                result = await _request(peer, args, params, req_id)
                sys.stdout.write(encode(result).decode("utf-8") + "\n")
                sys.stdout.flush()
            code = EXIT_OK
        except RPCError as exc:
            sys.stderr.write(json.dumps(exc.to_dict(), ensure_ascii=False) + "\n")
            code = EXIT_ERROR
        except RequestTimeout:
            _err(f"no reply within {args.timeout:g} s; cancel sent")
            code = EXIT_TIMEOUT
        except ConnectionClosed:
            await _report_gone(conn, args.method)
            code = EXIT_ERROR
        except (TypeError, ValueError) as exc:
            _err(str(exc))
            code = EXIT_USAGE
        except asyncio.CancelledError:
            if not state["interrupted"]:
                raise
            _err("interrupted; cancel sent")
            code = EXIT_INTERRUPTED
    finally:
        try:
            await cm.__aexit__(None, None, None)
        except asyncio.CancelledError:
            pass
    sys.stderr.flush()
    return code



def _on_progress(progress: float, total: float | None, message: str | None) -> None:
    text = f"{progress:g}" + (f"/{total:g}" if total is not None else "")
    if message:
        text += f" {message}"
    sys.stderr.write(f"progress: {text}\n")
    sys.stderr.flush()


async def _request(peer: Any, args: argparse.Namespace, params: Any, req_id: str | int | None) -> Any:
    """Send the request and return its result (or raise its error)."""
    from ..errors import RPCError

    # An error with id null is the server saying it could not read our request (or its
    # id): with this one call in flight it is the answer; waiting for another would hang.
    unreadable: asyncio.Future[RPCError] = asyncio.get_running_loop().create_future()

    def on_error_without_id(err: RPCError) -> None:
        if not unreadable.done():
            unreadable.set_result(err)

    peer.on_error_without_id = on_error_without_id
    req = asyncio.ensure_future(
        peer.request(
            args.method,
            params,
            timeout=args.timeout,
            id=req_id,
            on_progress=_on_progress if args.progress else None,
        )
    )
    try:
        await asyncio.wait((req, unreadable), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not req.done():
            req.cancel()  # sends the cancel notification
            await asyncio.wait((req,))
    if req.cancelled() and unreadable.done():
        raise unreadable.result()
    return req.result()


async def _report_gone(conn: Any, method: str) -> None:
    """The server died or closed its stdout before answering: say how, with its stderr tail."""
    # Give the exit status a moment to arrive, so the message can name it.
    rc = await conn.wait_exit(0.5)
    what = "closed its stdout" if rc is None else f"exited with code {rc}" if rc >= 0 else f"was killed by signal {-rc}"
    _err(f"the server {what} before answering {method!r}")
    tail = _tail(conn.stderr_text())
    if tail:
        sys.stderr.write("server stderr (last lines):\n" + tail + "\n")
