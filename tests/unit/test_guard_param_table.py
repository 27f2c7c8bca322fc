"""The HTTP guard's table of each tool's ``Mcp-Param-*`` headers (proxy/guard_http_params.py)."""

from __future__ import annotations

from typing import Any

import pytest

from sturdyrpc.proxy.guard_http_params import ParamHeaderTable


def tool(name: str, **props: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "inputSchema": {"type": "object", "properties": props}}


REGION = {"type": "string", "x-mcp-header": "Region"}


def test_every_page_teaches_it_and_a_later_list_replaces_an_entry() -> None:
    t = ParamHeaderTable()
    assert t.learn({"tools": [tool("a", region=REGION)], "nextCursor": "2"}) == []
    assert t.learn({"tools": [tool("b", n={"type": "integer", "x-mcp-header": "N"})]}) == []
    assert dict(t.get("a")) == {"mcp-param-region": ("region", "string")}
    assert dict(t.get("b")) == {"mcp-param-n": ("n", "integer")}
    t.learn({"tools": [tool("a", zone={"type": "string", "x-mcp-header": "Zone"})]})
    assert dict(t.get("a")) == {"mcp-param-zone": ("zone", "string")}
    t.learn({"tools": [tool("a", zone={"type": "string"})]})  # no annotation any more: nothing to check
    assert dict(t.get("a")) == {} and len(t) == 1


def test_broken_annotations_leave_the_tool_unchecked() -> None:
    t = ParamHeaderTable()
    t.learn({"tools": [tool("a", region=REGION)]})
    lines = t.learn({"tools": [tool("a", region={"type": "string", "x-mcp-header": "Has Space"}), tool("c", region=REGION)]})
    assert len(lines) == 1 and "'a'" in lines[0] and "not checked" in lines[0]
    assert dict(t.get("a")) == {} and dict(t.get("c")) == {"mcp-param-region": ("region", "string")}
    assert t.learn({"tools": [tool("a", region={"type": "string", "x-mcp-header": "Has Space"})]}) == []  # said once


@pytest.mark.parametrize("result", [None, [], {"tools": None}, {"tools": [None, 3, {"name": 7}, {"inputSchema": {}}]}])
def test_what_is_no_list_teaches_nothing(result: Any) -> None:
    t = ParamHeaderTable()
    assert t.learn(result) == [] and len(t) == 0


def test_the_table_is_bounded() -> None:
    t = ParamHeaderTable(cap=3)
    for i in range(5):
        t.learn({"tools": [tool(f"t{i}", region=REGION)]})
    assert len(t) == 3 and not t.get("t0") and not t.get("t1") and t.get("t4")
    t.learn({"tools": [tool("t2", region=REGION)]})  # listed again: the newest now
    t.learn({"tools": [tool("t5", region=REGION)]})
    assert t.get("t2") and not t.get("t3")
    with pytest.raises(ValueError):
        ParamHeaderTable(cap=0)
