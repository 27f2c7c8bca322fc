"""How the registering decorators were called: bare (``@server.tool``), with options
(``@server.tool(name=...)``) or directly (``server.tool(fn, name=...)``).

A decorator used wrongly raises a ``TypeError`` saying how to use it, at registration: nothing
is registered under a wrong name, and no function is silently replaced by the decorator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypedDict

__all__ = ["sort_out", "check_function", "ToolOptions", "PromptOptions"]


class ToolOptions(TypedDict, total=False):
    """The options of :meth:`MCPServer.tool`.

    ``timeout`` (seconds): a call still running then ends as a tool error (``isError``)
    naming the limit; the tool must be async or blocking (a sync tool on the pool is left
    to finish on its thread, its result dropped).

    ``input_schema`` replaces the generated schema (arguments then go to the function by
    name, unchecked beyond names). ``structured=False`` turns off ``outputSchema`` /
    ``structuredContent`` for a declared return type. Sync functions run on the bounded
    pool of daemon threads (``Limits.max_threads``) unless ``blocking=False``, which runs
    them inline (the fastest path, for functions that return at once). ``title`` (2025-06-18+)
    and ``icons`` (2025-11-25+, ``[{"src": URL, "mimeType"?, "sizes"?, "theme"?}]``) are sent
    to clients whose negotiated version has them. ``scopes``: OAuth scopes a caller's token must
    hold over authenticated HTTP (else the tool is not listed and calling it is 403
    ``insufficient_scope``; see ``docs/AUTH.md``).

    ``task_support`` (``execution.taskSupport``, see :mod:`.tasks`): ``"optional"`` lets a
    client call the tool as a task (2025-11-25 ``params.task``; on 2026-07-28 a client that
    declares the tasks extension gets a task), ``"required"`` makes a plain 2025-11-25 call
    an error (-32601); the default ``"forbidden"`` is not announced.

    ``tags``: names that :meth:`MCPServer.enable` / :meth:`MCPServer.disable` (and
    ``MCPServer(include_tags=, exclude_tags=)``) select by, to show or hide the tool.
    """

    name: str | None
    description: str | None
    title: str | None
    annotations: dict[str, Any] | None
    input_schema: dict[str, Any] | None
    structured: bool | None
    blocking: bool | None
    meta: dict[str, Any] | None
    icons: list[Any] | None
    timeout: float | None
    scopes: Iterable[str] | None
    task_support: str
    tags: Iterable[str] | None


class PromptOptions(TypedDict, total=False):
    """The options of :meth:`MCPServer.prompt` (for type checkers)."""

    name: str | None
    description: str | None
    title: str | None
    arguments: dict[str, str] | None
    icons: list[Any] | None
    scopes: Iterable[str] | None
    tags: Iterable[str] | None


def sort_out(kind: str, first: Any, name: Any) -> tuple[Callable[..., Any] | None, str | None]:
    """``(fn, name)`` for ``server.<kind>(first, name=name)``: ``fn`` set when the call registers
    a function at once (bare or direct use), None when it makes a decorator."""
    usage = (f"use @server.{kind} or @server.{kind}(name='...') on a function, "
             f"or call server.{kind}(fn, name='...')")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"server.{kind}(): name must be a string, got {type(name).__name__} ({usage})")
    if first is None:
        return None, name
    if isinstance(first, str):
        if name is not None:
            raise TypeError(f"server.{kind}(): the name was given twice ({first!r} and name={name!r}): {usage}")
        return None, first
    if callable(first):
        return first, name
    raise TypeError(f"server.{kind}(): expected a function or a name, got {type(first).__name__} ({usage})")


def check_function(fn: Any, how: str) -> None:
    """Refuse to register what is not a function, saying how the decorator is used (``how``)."""
    if not callable(fn) or isinstance(fn, type):
        raise TypeError(f"{how} decorates a function (def or async def), got {type(fn).__name__}: "
                        f"put it on the line above the function's def")
