"""Helpers for the MCP tests: commands, wire recording, and validation against the official schemas."""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from support import DATA, SERVERS

#: The official schemas, kept in the repository (source and licence: tests/data/mcp-schema/README.md).
SCHEMAS = DATA / "mcp-schema"
TEE = str(SERVERS / "mcp_tee.py")
MCP_DEMO_CMD = [sys.executable, "-m", "sturdyrpc", "demo", "--mcp"]
VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28")


def recorded_cmd(log: Path, cmd: list[str] | None = None) -> list[str]:
    """A command line running ``cmd`` (default: the MCP demo) with its wire recorded under ``log``."""
    return [sys.executable, TEE, str(log), "--", *(cmd or MCP_DEMO_CMD)]


@cache
def schema(version: str) -> dict[str, Any]:
    with open(SCHEMAS / version / "schema.json") as f:
        return json.load(f)  # type: ignore[no-any-return]


def _defs(version: str) -> tuple[str, dict[str, Any]]:
    s = schema(version)
    if "$defs" in s:
        return "$defs", s["$defs"]
    return "definitions", s["definitions"]


@cache
def _validator(version: str, name: str) -> Any:
    s = schema(version)
    key, defs = _defs(version)
    if name not in defs:
        raise KeyError(f"{name} is not defined in the {version} schema")
    doc = {k: v for k, v in s.items() if k in ("$schema", "$defs", "definitions")}
    doc["$ref"] = f"#/{key}/{name}"
    cls = jsonschema.Draft202012Validator if "2020-12" in s.get("$schema", "") else jsonschema.Draft7Validator
    return cls(doc)


def has_def(version: str, name: str) -> bool:
    return name in _defs(version)[1]


def validate_def(version: str, name: str, instance: Any) -> None:
    """Validate ``instance`` against definition ``name`` of ``version``'s schema (raises ValidationError)."""
    _validator(version, name).validate(instance)


RESULT_OF = {
    "initialize": "InitializeResult",
    "server/discover": "DiscoverResult",
    "ping": "EmptyResult",
    "tools/list": "ListToolsResult",
    "tools/call": "CallToolResult",
    "resources/list": "ListResourcesResult",
    "resources/templates/list": "ListResourceTemplatesResult",
    "resources/read": "ReadResourceResult",
    "resources/subscribe": "EmptyResult",
    "resources/unsubscribe": "EmptyResult",
    "prompts/list": "ListPromptsResult",
    "prompts/get": "GetPromptResult",
    "completion/complete": "CompleteResult",
    "logging/setLevel": "EmptyResult",
    "subscriptions/listen": "SubscriptionsListenResult",
    "tasks/get": "GetTaskResult",
    "tasks/list": "ListTasksResult",
    "tasks/cancel": "CancelTaskResult",
    "tasks/result": "CallToolResult",  # the tests' tasks are tool calls
}
NOTIFICATION_OF = {
    "notifications/progress": "ProgressNotification",
    "notifications/message": "LoggingMessageNotification",
    "notifications/tools/list_changed": "ToolListChangedNotification",
    "notifications/resources/list_changed": "ResourceListChangedNotification",
    "notifications/prompts/list_changed": "PromptListChangedNotification",
    "notifications/resources/updated": "ResourceUpdatedNotification",
    "notifications/cancelled": "CancelledNotification",
    "notifications/subscriptions/acknowledged": "SubscriptionsAcknowledgedNotification",
    "notifications/tasks/status": "TaskStatusNotification",
}
REQUEST_OF = {
    "sampling/createMessage": "CreateMessageRequest",
    "elicitation/create": "ElicitRequest",
    "roots/list": "ListRootsRequest",
    "ping": "PingRequest",
}


def _error_def(version: str) -> str:
    return "JSONRPCErrorResponse" if has_def(version, "JSONRPCErrorResponse") else "JSONRPCError"


def validate_server_message(version: str, msg: Any, methods: dict[Any, str]) -> list[str]:
    """Check one message our server wrote; ``methods`` maps request ids (client's) to methods.

    Returns what was checked (definition names) for the record.
    """
    checked = []
    if isinstance(msg, list):
        assert version == "2025-03-26", f"a batch reply on {version}"
        validate_def(version, "JSONRPCBatchResponse", msg)
        for m in msg:
            checked += validate_server_message(version, m, methods)
        return checked
    validate_def(version, "JSONRPCMessage", msg)
    checked.append("JSONRPCMessage")
    if "error" in msg:
        validate_def(version, _error_def(version), msg)
        checked.append(_error_def(version))
    elif "result" in msg:
        method = methods.get((type(msg["id"]), msg["id"]))
        name = RESULT_OF.get(method or "")
        result = msg["result"]
        if version == "2026-07-28" and isinstance(result, dict) and result.get("resultType") == "input_required":
            name = "InputRequiredResult"
        if method == "tools/call" and isinstance(result, dict) and "task" in result:
            name = "CreateTaskResult"  # 2025-11-25 task-augmented call
        if version == "2026-07-28" and method in ("tools/call", "tasks/get", "tasks/cancel", "tasks/update"):
            checked += validate_tasks_ext(method, result)
            if method != "tools/call" or result.get("resultType") == "task":
                name = None
        if name is not None and has_def(version, name):
            validate_def(version, name, result)
            checked.append(name)
        if version == "2026-07-28":
            assert isinstance(result, dict) and result.get("resultType") in ("complete", "input_required", "task"), msg
            assert result["resultType"] != "task" or method == "tools/call", msg
    elif "method" in msg:
        table = REQUEST_OF if "id" in msg else NOTIFICATION_OF
        name = table.get(msg["method"])
        assert name is not None, f"unexpected message from the server: {msg}"
        validate_def(version, name, msg)
        checked.append(name)
    return checked


@cache
def _ext_validator(name: str) -> Any:
    with open(SCHEMAS.parent / "mcp-tasks-ext" / "schema.json") as f:
        s = json.load(f)
    return jsonschema.Draft202012Validator({"$defs": s["$defs"], "$ref": f"#/$defs/{name}"})


def validate_tasks_ext(method: str, result: Any) -> list[str]:
    """Check a 2026-07-28 result of the tasks extension (tests/data/mcp-tasks-ext)."""
    assert isinstance(result, dict)
    body = {k: v for k, v in result.items() if k not in ("resultType", "_meta")}
    if method == "tools/call":
        if result.get("resultType") != "task":
            return []
        _ext_validator("Task").validate(body)
        return ["ext:CreateTaskResult"]
    assert result.get("resultType") == "complete", result  # rule 43
    if method == "tasks/get":
        _ext_validator("DetailedTask").validate(body)
        return ["ext:GetTaskResult"]
    assert body == {}, result  # tasks/cancel and tasks/update: an empty acknowledgement
    return ["ext:EmptyResult"]


def read_lines(path: Path) -> list[Any]:
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def validate_recording(log: Path, version: str) -> int:
    """Validate every message the server wrote (``log.out``) against ``version``'s schema.

    Returns the number of messages checked. Request ids are matched to methods using ``log.in``.
    """
    methods: dict[Any, str] = {}
    for m in read_lines(Path(str(log) + ".in")):
        for item in m if isinstance(m, list) else [m]:
            if isinstance(item, dict) and "method" in item and "id" in item:
                methods[(type(item["id"]), item["id"])] = item["method"]
    out = read_lines(Path(str(log) + ".out"))
    for msg in out:
        try:
            validate_server_message(version, msg, methods)
        except jsonschema.ValidationError as exc:
            raise AssertionError(f"{version}: server message does not validate: {json.dumps(msg)[:500]}\n{exc.message}") from None
    return len(out)


class Wire:
    """An in-process MCP session on a memory transport, driven with raw JSON (for tests).

    Every message the server writes is kept in ``received`` for schema validation.
    """

    def __init__(self, server: Any) -> None:
        from sturdyrpc.transports.memory import memory_pair

        self.client, server_end = memory_pair()
        self.peer = server.create_peer(server_end)
        self.sent: list[Any] = []
        self.received: list[Any] = []

    async def __aenter__(self) -> Wire:
        await self.peer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()
        await self.peer.close(1.0)

    async def send(self, msg: Any) -> None:
        import msgspec

        data = msg if isinstance(msg, bytes) else msgspec.json.encode(msg)
        if not isinstance(msg, bytes):
            self.sent.append(msg)
        await self.client.send(data)

    async def recv(self, timeout: float = 3.0) -> Any:
        import asyncio

        import msgspec

        data = await asyncio.wait_for(self.client.receive(), timeout)
        assert isinstance(data, bytes), data
        msg = msgspec.json.decode(data)
        self.received.append(msg)
        return msg

    async def nothing(self, wait: float = 0.2) -> None:
        import asyncio

        try:
            data = await asyncio.wait_for(self.client.receive(), wait)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected message: {data!r}")

    async def call(self, method: str, params: Any = None, id: Any = 1) -> Any:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            msg["params"] = params
        await self.send(msg)
        while True:
            reply = await self.recv()
            if isinstance(reply, dict) and reply.get("id") == id and ("result" in reply or "error" in reply):
                return reply

    async def initialize(self, version: str = "2025-11-25", capabilities: dict[str, Any] | None = None) -> Any:
        r = await self.call(
            "initialize", {"protocolVersion": version, "capabilities": capabilities or {}, "clientInfo": {"name": "t", "version": "1"}}, id="init"
        )
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return r

    def validate(self, version: str) -> None:
        methods = {(type(m["id"]), m["id"]): m["method"] for m in self.sent if isinstance(m, dict) and "id" in m and "method" in m}
        for msg in self.received:
            validate_server_message(version, msg, methods)


def modern_meta(version: str = "2026-07-28", caps: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": caps or {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        **extra,
    }
