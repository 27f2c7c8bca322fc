"""The HTTP guard's table of each tool's SEP-2243 ``Mcp-Param-*`` headers, learned from the
upstream's ``tools/list`` results on their way to the client.

One table per guard, keyed by tool name: 2026-07-28 has no sessions (each request is a session of
its own), so only a table shared by every request can hold what one request listed for the
``tools/call`` of another. Only the results of 2026-07-28 ``tools/list`` requests teach it (the
headers exist on that revision alone, and a handshake-era session may see tools of its own).

The table is what a client SDK keeps (:func:`~sturdyrpc.mcp.param_headers.usable_tools`, the
same parser): every page teaches it, a later list replaces a tool's entry, and a tool whose
``x-mcp-header`` annotations break the rules (which a client leaves out, so never calls) has no
entry, as a tool without annotations has none and a tool never listed: guard checks none of them.
It holds at most ``cap`` tools with headers; beyond, the one listed longest ago is forgotten.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from ..mcp.param_headers import usable_tools

__all__ = ["ParamHeaderTable", "MAX_TOOLS"]

#: Tools with ``Mcp-Param-*`` headers the table holds at most.
MAX_TOOLS = 4096
_NONE: Mapping[str, tuple[str, str]] = {}


class ParamHeaderTable:
    """Each listed tool's ``Mcp-Param-*`` headers: lower-case header name -> (parameter, JSON type)."""

    def __init__(self, cap: int = MAX_TOOLS) -> None:
        if cap < 1:
            raise ValueError("cap must be at least 1")
        self.cap = cap
        self._tools: OrderedDict[str, dict[str, tuple[str, str]]] = OrderedDict()
        #: The left-out lines said already (each said once, not at every list; bounded as the table).
        self._told: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tools)

    def get(self, tool: str) -> Mapping[str, tuple[str, str]]:
        """The headers a 2026-07-28 ``tools/call`` of ``tool`` must carry (empty: none checked)."""
        return self._tools.get(tool, _NONE)

    def learn(self, result: Any) -> list[str]:
        """Take in one page of a ``tools/list`` result; returns a line for each tool left out
        (its annotations break the rules: it has no entry now) that was not said before."""
        tools = result.get("tools") if type(result) is dict else None
        if type(tools) is not list:
            return []
        _kept, headers, left_out = usable_tools(tools)
        for tool in tools:
            name = tool.get("name") if type(tool) is dict else None
            if type(name) is str and name not in headers:
                self._tools.pop(name, None)  # broken annotations now: as a client, no headers to check
        table = self._tools
        for name, found in headers.items():
            table.pop(name, None)
            if found:
                table[name] = found  # the newest list last: the oldest goes first when full
        while len(table) > self.cap:
            table.popitem(last=False)
        return [f"guard: {line} (its Mcp-Param-* headers are not checked)" for line in left_out if self._first_time(line)]

    def _first_time(self, line: str) -> bool:
        told = self._told
        if line in told:
            return False
        told[line] = None
        if len(told) > self.cap:
            told.popitem(last=False)
        return True
