"""The inspector's MCP client: the server it starts (``inspect -- CMD``) or reaches (``--url``),
every message through a :class:`~.tap.Tap` into the :class:`~.session.Session`.

The client is the project's own (:func:`sturdyrpc.mcp.client.connect`,
:func:`sturdyrpc.mcp_http.connect.connect_http`); its elicitation callback waits for the
user's answer in the page. A server that cannot be negotiated with stays inspectable: its
traffic is on the timeline, and the failure says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from typing import Any

from ..errors import RPCError
from ..mcp.client import MCPClient
from ..peer import MessageTransport
from .session import Session
from .tap import Tap

__all__ = ["Inspector", "check_command"]

#: Seconds a ``sturdyrpc check`` run started from the page may take.
CHECK_TIMEOUT = 600.0


def check_command(command: list[str] | None, url: str | None) -> list[str]:
    """The ``sturdyrpc check`` command line for the inspected server."""
    base = [sys.executable, "-m", "sturdyrpc", "check"]
    return [*base, "--url", url] if url else [*base, "--", *(command or [])]


class Inspector:
    """One inspected server (``protocol``: a version to require, as ``sturdyrpc mcp --protocol``). ``on_change()`` is called whenever what the page shows changed
    (status, catalog, elicitations); the timeline has its own signal (the session's)."""

    def __init__(self, session: Session, *, command: list[str] | None = None, url: str | None = None,
                 timeout: float = 60.0, protocol: str | None = None, on_change: Callable[[], None] | None = None) -> None:
        if bool(command) == bool(url):
            raise ValueError("give either a command or a URL")
        self.session = session
        self.command = command
        self.url = url
        self.timeout = timeout
        self.protocol = protocol  # None: negotiated (server/discover, else initialize)
        self.on_change = on_change
        self.client: MCPClient | None = None
        self.status = "connecting"
        self.error: str | None = None
        self.catalog: dict[str, list[dict[str, Any]]] = {"tools": [], "resources": [], "templates": [], "prompts": []}
        self.catalog_errors: dict[str, str] = {}
        self.elicitations: dict[int, dict[str, Any]] = {}
        self._answers: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._next_elicitation = 0
        #: Calls of the page in flight, by number: what they are and their latest progress.
        self.calls: dict[int, dict[str, Any]] = {}
        self._next_call = 0

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def _wrap(self, transport: MessageTransport) -> MessageTransport:
        return Tap(transport, lambda d, frame, now: self.session.feed(d, frame, now))  # type: ignore[arg-type]

    @contextlib.asynccontextmanager
    async def _connect(self) -> AsyncIterator[MCPClient]:
        if self.url:
            from ..mcp_http.connect import connect_http  # httpx only when a URL is inspected

            async with connect_http(self.url, self.protocol, elicitation=self._elicit, timeout=self.timeout, wrap_transport=self._wrap) as client:
                yield client
        else:
            from ..mcp.client import connect

            async with connect(self.command or [], self.protocol, elicitation=self._elicit, timeout=self.timeout, wrap_transport=self._wrap) as client:
                yield client

    async def run(self, stop: asyncio.Event) -> None:
        """Connect, list what the server offers, and stay connected until ``stop`` is set."""
        try:
            async with self._connect() as client:
                self.client = client
                self.status = "connected"
                self._changed()
                await self.refresh()
                await stop.wait()
        except Exception as exc:  # shown in the page: the traffic that led to it is on the timeline
            self.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            self.status = "failed"
        else:
            self.status = "closed"
        finally:
            self.client = None
            for fut in self._answers.values():
                fut.cancel()
            self._changed()

    async def refresh(self) -> None:
        """List the tools, resources, templates and prompts the server declares."""
        client = self.client
        if client is None:
            return
        caps = client.server_capabilities
        lists: dict[str, tuple[str, Callable[[], Any]]] = {
            "tools": ("tools", client.list_tools),
            "resources": ("resources", client.list_resources),
            "templates": ("resources", client.list_resource_templates),
            "prompts": ("prompts", client.list_prompts),
        }
        for key, (capability, lister) in lists.items():
            if capability not in caps:
                continue
            try:
                self.catalog[key] = await lister()
                self.catalog_errors.pop(key, None)
            except (RPCError, OSError, TimeoutError) as exc:
                self.catalog_errors[key] = str(exc)
        self._changed()

    def state(self) -> dict[str, Any]:
        """What the page shows besides the timeline."""
        client = self.client
        stderr = ""
        if client is not None and client.connection is not None:
            stderr = client.connection.stderr_text()[-20000:]
        return {
            "target": self.url or " ".join(self.command or []),
            "status": self.status,
            "error": self.error,
            "version": client.version if client is not None else None,
            "server_info": client.server_info if client is not None else {},
            "instructions": client.instructions if client is not None else None,
            "capabilities": client.server_capabilities if client is not None else {},
            "catalog": self.catalog,
            "catalog_errors": self.catalog_errors,
            "elicitations": list(self.elicitations.values()),
            "calls": list(self.calls.values()),
            "stderr": stderr,
        }

    # -- calls from the page ---------------------------------------------------------------------

    async def call(self, kind: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Call a tool, read a resource or get a prompt; ``{"result": ...}`` or ``{"error": ...}``."""
        client = self.client
        if client is None:
            return {"error": {"message": f"not connected ({self.error or self.status})"}}
        self._next_call += 1
        n = self._next_call
        self.calls[n] = {"n": n, "kind": kind, "name": name, "progress": None}
        self._changed()

        def progress(value: float, total: float | None, message: str | None) -> None:
            self.calls[n]["progress"] = {"progress": value, "total": total, "message": message}
            self._changed()

        try:
            if kind == "tool":
                # With a progress callback: the client sends a progressToken, and the progress is shown.
                result: Any = await client.call_tool(name, arguments, on_progress=progress)
            elif kind == "resource":
                result = await client.read_resource(name)
            elif kind == "prompt":
                result = await client.get_prompt(name, {k: str(v) for k, v in arguments.items()})
            else:
                return {"error": {"message": f"unknown kind {kind!r}"}}
        except RPCError as exc:
            return {"error": {"code": exc.code, "message": exc.message, "data": exc.data}}
        except (OSError, TimeoutError) as exc:
            return {"error": {"message": f"{type(exc).__name__}: {exc}"}}
        finally:
            del self.calls[n]
            self._changed()
        return {"result": result}

    async def _elicit(self, params: dict[str, Any]) -> dict[str, Any]:
        """The client's elicitation callback: the request waits in the page for the user."""
        self._next_elicitation += 1
        n = self._next_elicitation
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers[n] = fut
        self.elicitations[n] = {"n": n, "params": params}
        self._changed()
        try:
            return await fut
        finally:
            self._answers.pop(n, None)
            self.elicitations.pop(n, None)
            self._changed()

    def answer(self, n: int, response: dict[str, Any]) -> bool:
        """Answer the elicitation ``n`` (``{"action": "accept", "content": {...}}``, ``decline``,
        ``cancel``); False when it is not waiting (any more)."""
        fut = self._answers.get(n)
        if fut is None or fut.done() or response.get("action") not in ("accept", "decline", "cancel"):
            return False
        fut.set_result(response)
        return True

    async def run_check(self) -> dict[str, Any]:
        """``sturdyrpc check`` on the same server (a separate process: it starts the server
        afresh); its text report, the JSON report and the exit code."""
        fd, path = tempfile.mkstemp(prefix="sturdyrpc-inspect-check-", suffix=".json")
        os.close(fd)
        argv = check_command(self.command, self.url)
        argv[4:4] = ["--json", path]
        try:
            proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.PIPE, env={**os.environ, "COLUMNS": "120"})
            try:
                out, err = await asyncio.wait_for(proc.communicate(), CHECK_TIMEOUT)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                return {"exit": None, "report": f"check did not finish within {CHECK_TIMEOUT:.0f} s", "json": None}
            try:
                with open(path, encoding="utf-8") as f:
                    report = json.load(f)
            except (OSError, ValueError):
                report = None
            text = out.decode("utf-8", "replace") or err.decode("utf-8", "replace")
            return {"exit": proc.returncode, "report": text, "json": report}
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
