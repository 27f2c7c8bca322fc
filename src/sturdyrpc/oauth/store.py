"""Where the OAuth client keeps tokens and client registrations.

A store maps string keys to JSON objects. The provider uses two kinds of keys:
``tokens <resource>`` (the tokens for one MCP server) and ``client <issuer>`` (the client's
registration at one authorization server: registrations are per authorization server, and a
client id of one is never sent to another).

:class:`MemoryTokenStore` (the default) forgets everything when the process ends;
:class:`FileTokenStore` (the CLI's) keeps one JSON file, readable by its owner only.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["TokenStore", "MemoryTokenStore", "FileTokenStore"]


@runtime_checkable
class TokenStore(Protocol):
    """The store interface: three coroutines over JSON objects."""

    async def get(self, key: str) -> dict[str, Any] | None:
        """The object saved under ``key``, or None."""
        ...

    async def set(self, key: str, value: dict[str, Any]) -> None:
        """Save ``value`` under ``key`` (replacing what was there)."""
        ...

    async def delete(self, key: str) -> None:
        """Forget ``key`` (no error when absent)."""
        ...


class MemoryTokenStore:
    """A dict in memory."""

    def __init__(self) -> None:
        self._data: dict[str, dict[str, Any]] = {}

    async def get(self, key: str) -> dict[str, Any] | None:
        value = self._data.get(key)
        return dict(value) if value is not None else None

    async def set(self, key: str, value: dict[str, Any]) -> None:
        self._data[key] = dict(value)

    async def delete(self, key: str) -> None:
        self._data.pop(key, None)


class FileTokenStore:
    """One JSON file holding every key (``~`` expanded), created with mode 0600 (a directory it
    creates: 0700).

    Writes go to a temporary file in the same directory that is then renamed over the old one,
    so a crash never leaves half a file. A file that cannot be read as a JSON object counts as
    empty (the user is asked to authorize again) rather than failing the connection.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        self._lock = asyncio.Lock()

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text("utf-8"))
        except (OSError, ValueError):
            return {}
        return data if type(data) is dict else {}

    def _write(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tokens-", dir=self.path.parent)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    async def get(self, key: str) -> dict[str, Any] | None:
        async with self._lock:
            value = self._read().get(key)
        return value if type(value) is dict else None

    async def set(self, key: str, value: dict[str, Any]) -> None:
        async with self._lock:
            data = self._read()
            data[key] = value
            self._write(data)

    async def delete(self, key: str) -> None:
        async with self._lock:
            data = self._read()
            if data.pop(key, None) is not None:
                self._write(data)
