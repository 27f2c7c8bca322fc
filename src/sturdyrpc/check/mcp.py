"""MCP checks (by protocol version) and the detection of MCP servers."""

from __future__ import annotations

import time
from typing import Any

from .config import HANDSHAKE_VERSIONS, MODERN_VERSION, Config, modern_meta, same_id
from .connect import new_probe
from .http import header_mismatch as _http_header_mismatch
from .model import CheckFailed, CheckSkipped, Level, Report
from .probe import Probe
from .rules import ANY, NULL, check, expect_error, expect_id, expect_result, leaks, show
from .verdicts import initialize_result_problems, mcp_error_code_problems, progress_problem, spec_args, tool_result_problems

__all__ = ["detect"]


def detect(cfg: Config, report: Report) -> None:
    """Find out whether the server speaks MCP, and which versions: ``server/discover`` first
    (2026-07-28), then ``initialize``. Fills in ``cfg``; never fails."""
    offer = cfg.protocol if cfg.protocol in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
    session = new_probe(cfg, handshake=False)
    try:
        wait = max(cfg.timeout, cfg.startup_timeout)
        t0 = time.monotonic()
        session.send({"jsonrpc": "2.0", "id": "detect-discover", "method": "server/discover", "params": {"_meta": modern_meta()}})
        reply, _ = session.wait_for(lambda v: type(v) is dict and same_id(v.get("id"), "detect-discover"), wait)
        cfg.startup_seconds = time.monotonic() - t0
        result = reply.get("result") if reply else None
        if type(result) is dict and type(result.get("supportedVersions")) is list:
            cfg.discover_versions = [v for v in result["supportedVersions"] if type(v) is str]
            if type(result.get("capabilities")) is dict:
                cfg.capabilities = result["capabilities"]
        if not session.proc.alive() or session.proc.stdout_closed.is_set():
            session.close()
            session = new_probe(cfg, handshake=False)
        init = session.initialize(offer, id="detect-init", timeout=wait)
        if cfg.discover_versions and not (init and type(init.get("result")) is dict):
            # A server may fix a connection's era at its first message: ask a fresh process.
            session.close()
            session = new_probe(cfg, handshake=False)
            init = session.initialize(offer, id="detect-init", timeout=wait)
        result = init.get("result") if init else None
        if type(result) is dict and type(result.get("protocolVersion")) is str:
            cfg.handshake_versions = [result["protocolVersion"]]
            if type(result.get("serverInfo")) is dict:
                cfg.server_info = result["serverInfo"]
            if type(result.get("capabilities")) is dict:
                cfg.capabilities = result["capabilities"]
    finally:
        session.close()
    if reply is None and init is None:
        cfg.startup_timeout = cfg.timeout  # it answered nothing at all: do not wait long again
    found = bool(cfg.discover_versions or cfg.handshake_versions)
    cfg.is_mcp = found or cfg.mcp is True
    if not cfg.is_mcp:
        return
    if cfg.protocol:
        cfg.version = cfg.protocol
    elif MODERN_VERSION in cfg.discover_versions:
        cfg.version = MODERN_VERSION
    elif cfg.handshake_versions:
        cfg.version = cfg.handshake_versions[0]
    else:
        cfg.version = HANDSHAKE_VERSIONS[-1]
    how = []
    if cfg.discover_versions:
        how.append(f"server/discover lists {', '.join(cfg.discover_versions)}")
    if cfg.handshake_versions:
        how.append(f"initialize({offer}) -> {cfg.handshake_versions[0]}")
    report.notes.append(("MCP detected: " + "; ".join(how)) if how else "MCP forced with --mcp (detection found nothing)")
    report.notes.append(f"checks speak MCP {cfg.version}")


# =============================================================================================
# The checks. Spec files are relative to the MCP specification repository, docs/specification/.
# =============================================================================================

MUST, SHOULD = Level.MUST, Level.SHOULD
UNKNOWN = "sturdyrpc.check/unknown-method"
NO_SUCH_TOOL = "sturdyrpc-check-no-such-tool"


def _spec(path: str, version: str | None = None) -> str:
    return f"MCP {version or 'all versions'}: {path}"


def _needs_mcp(cfg: Config) -> str | None:
    return None if cfg.is_mcp else "not an MCP server (use --mcp to force the MCP checks)"


def _handshake_era(cfg: Config) -> str | None:
    return _needs_mcp(cfg) or (f"MCP {cfg.version} has no initialize handshake" if cfg.modern else None)


def _modern(cfg: Config) -> str | None:
    return _needs_mcp(cfg) or (None if cfg.modern else f"only for MCP {MODERN_VERSION} (the checks speak {cfg.version})")


def _needs_slow_tool(cfg: Config) -> str | None:
    return _needs_mcp(cfg) or (None if cfg.slow else 'needs --slow TOOL (a tool taking {"seconds": S} that waits S seconds)')


def _needs_leak_tool(cfg: Config) -> str | None:
    return _needs_mcp(cfg) or (None if cfg.leak_probe else "needs --leak-probe TOOL (a tool that fails)")


def _needs_call_tools(cfg: Config) -> str | None:
    return _needs_mcp(cfg) or (None if cfg.call_tools else "needs --call-tools (tools may have side effects)")


def _result_of(reply: Any, what: str) -> dict[str, Any]:
    result = expect_result(reply)
    if type(result) is not dict:
        raise CheckFailed(f"the result of {what} must be an object, got {show(result)}")
    return dict(result)


def _error_or_fail(s: Probe, reply: Any, codes: tuple[int, ...], what: str, *, success_level: Level = MUST) -> dict[str, Any]:
    """``reply`` must be an error with one of ``codes`` (any code when empty)."""
    if type(reply) is dict and "result" in reply and "error" not in reply:
        raise CheckFailed(f"{what} was accepted: {show(reply)}", level=success_level)
    return expect_error(reply, codes, ANY, id_may_be_omitted=True)


@check(
    *spec_args("mcp.initialize"),
    group="fresh", handshake=False, applies=_handshake_era,
)
def initialize(s: Probe) -> None:
    version = s.cfg.version or HANDSHAKE_VERSIONS[-1]
    reply = s.initialize(version, id=1)
    if reply is None:
        raise CheckFailed(f"no reply to initialize{s.exit_note()}")
    result = _result_of(reply, "initialize")
    expect_id(reply, 1)
    problems = initialize_result_problems(result, version)
    if problems:
        raise CheckFailed("; ".join(problems))


@check(
    "mcp.version-negotiation", "mcp", MUST, "an unknown protocol version is countered with a supported one",
    _spec("basic/lifecycle.mdx (Version Negotiation)", "2024-11-05..2025-11-25"),
    "if the client's version is not supported, answer with the newest version the server supports (never echo it)",
    group="fresh", handshake=False, applies=_handshake_era,
)
def version_negotiation(s: Probe) -> None:
    reply = s.initialize("1999-01-01", id="neg-1")
    if reply is None:
        raise CheckFailed(f"no reply to initialize with an unsupported version{s.exit_note()}")
    if "error" in reply:
        # The lifecycle example's error form: -32602 with data.supported.
        err = expect_error(reply, -32602, "neg-1")["error"]
        data = err.get("data")
        if type(data) is not dict or type(data.get("supported")) is not list:
            raise CheckFailed("an error is allowed only as -32602 with data.supported listing the server's versions", level=SHOULD)
        return
    result = _result_of(reply, "initialize")
    pv = result.get("protocolVersion")
    if pv == "1999-01-01":
        raise CheckFailed("the server echoed a version it cannot support (1999-01-01)")
    if type(pv) is not str:
        raise CheckFailed(f"protocolVersion must be a string, got {show(pv)}")


@check(
    "mcp.before-initialize", "mcp", SHOULD, "a request before initialize is refused with an error",
    _spec("basic/lifecycle.mdx (the initialization phase MUST be the first interaction)", "2024-11-05..2025-11-25"),
    "answer requests other than ping before initialize with an error (e.g. -32600 'Server not initialized')",
    group="fresh", handshake=False, applies=_handshake_era,
)
def before_initialize(s: Probe) -> None:
    s.send({"jsonrpc": "2.0", "id": "early-1", "method": "tools/list", "params": {}})
    last = getattr(s, "last", None)
    if last is not None and 400 <= last.status < 500:
        return  # over HTTP: refused at the transport level (no session yet), which is a refusal
    reply, _ = s.wait_for(lambda v: type(v) is dict and v.get("id") == "early-1", max(s.cfg.timeout, s.cfg.startup_timeout))
    if reply is None:
        raise CheckFailed(f"no reply to a request sent before initialize (the client hangs){s.exit_note()}", level=MUST)
    if "error" not in reply:
        raise CheckFailed("tools/list was served before initialize")
    expect_error(reply, (), "early-1")
    if reply["error"]["code"] == -32002:
        raise CheckFailed("-32002 means 'Resource not found'; use -32600 (or -32000) for 'not initialized'")


@check(
    "mcp.ping", "mcp", MUST, "ping is answered with an empty result",
    _spec("basic/utilities/ping.mdx", "2024-11-05..2025-11-25"),
    "answer ping promptly with {}",
    group="mcp", applies=_handshake_era,
)
def ping(s: Probe) -> None:
    result = _result_of(s.call("ping", id="ping-1"), "ping")
    if result not in ({}, {"_meta": result.get("_meta")}):
        raise CheckFailed(f"ping must return an empty result, got {show(result)}", level=SHOULD)


@check(
    "mcp.tools-list", "mcp", MUST, "tools/list returns well-formed tools",
    _spec("server/tools.mdx (Listing Tools); schema.ts Tool"),
    "return {tools: [{name, inputSchema: {type: 'object', ...}, ...}]}",
    group="mcp", applies=_needs_mcp,
)
def tools_list(s: Probe) -> None:
    if s.cfg.capabilities and "tools" not in s.cfg.capabilities:
        raise CheckSkipped("the server does not advertise the tools capability")
    result = _result_of(s.call("tools/list", {}, id="tl-1"), "tools/list")
    tools = result.get("tools")
    if type(tools) is not list:
        raise CheckFailed(f"result.tools must be an array, got {show(tools)}")
    for t in tools:
        if type(t) is not dict or type(t.get("name")) is not str:
            raise CheckFailed(f"a tool without a string name: {show(t)}")
        schema = t.get("inputSchema")
        if type(schema) is not dict or schema.get("type") != "object":
            raise CheckFailed(f"tool {t['name']!r}: inputSchema must be a JSON Schema object with type 'object', got {show(schema)}")
    if "nextCursor" in result and type(result["nextCursor"]) is not str:
        raise CheckFailed("nextCursor must be a string when present")


@check(
    "mcp.id-null", "mcp", MUST, "a request with id null is refused with an error",
    _spec("basic/index.mdx (Requests: the ID MUST NOT be null)"),
    "answer a request whose id is null with -32600 (id null, or omitted from 2025-11-25); never treat it as a notification",
    group="mcp", applies=_needs_mcp,
)
def id_null(s: Probe) -> None:
    msg = s.request("tools/list", {}, id=None)
    msg["id"] = None
    replies = s.exchange(msg)
    if not replies:
        raise CheckFailed("no reply: a request with \"id\": null was dropped like a notification (the client hangs)")
    _error_or_fail(s, replies[0], (-32600,), "a request with id null")


@check(
    "mcp.duplicate-id", "mcp", MUST, "two requests with the same id in flight both get an answer",
    _spec("basic/index.mdx (the ID MUST NOT have been used before / in flight)") + "; JSON-RPC 2.0 §5",
    "answer (or refuse with an error) every request, even a duplicate; never drop one or cross the replies",
    group="mcp", applies=_needs_mcp,
)
def duplicate_id(s: Probe) -> None:
    first = s.request("tools/list", {}, id="dup-1")
    if s.cfg.slow:
        first = s.request("tools/call", {"name": s.cfg.slow, "arguments": {"seconds": 0.5}}, id="dup-1")
    second = s.request("tools/list", {}, id="dup-1")
    replies = s.exchange_many([first, second], expect=2, grace=2.0)
    mine = [r for r in replies if type(r) is dict and r.get("id") == "dup-1"]
    if s.cfg.url:  # over HTTP a POST may be refused with an HTTP error (e.g. 409) whose body has no id
        mine += [r for r in replies if type(r) is dict and "error" in r and r.get("id") is None]
    if len(mine) < 2:
        raise CheckFailed(f"{len(mine)} reply for two requests with the same id; the client waits forever for the other")
    for r in mine:
        if "error" in r:
            expect_error(r, (), "dup-1")
        else:
            expect_result(r, "dup-1")


@check(
    "mcp.params-array", "mcp", SHOULD, "params given as an array are refused",
    _spec("schema.ts (params is an object in every request)"),
    "answer by-position params with -32602 (or -32600) instead of ignoring or guessing",
    group="mcp", applies=_needs_mcp,
)
def params_array(s: Probe) -> None:
    replies = s.exchange(s.request("tools/list", [], meta=False))
    if not replies:
        raise CheckFailed("no reply to a request whose params is an array (the client hangs)", level=MUST)
    _error_or_fail(s, replies[0], (-32602, -32600), "params as an array", success_level=SHOULD)


@check(
    "mcp.batch", "mcp", MUST, "batches: served on 2025-03-26, refused with one error on other versions (never silence)",
    "MCP 2025-03-26 basic/index.mdx (MUST support receiving batches); 2025-06-18 changelog (batching removed); JSON-RPC 2.0 §6",
    "on 2025-03-26 answer a batch with an array; on other versions answer it with one -32600 error",
    group="mcp", applies=_needs_mcp,
)
def batch(s: Probe) -> None:
    batch = [s.request("tools/list", {}, id="mb-1"), s.request(UNKNOWN, {}, id="mb-2")]
    replies = s.exchange(batch, grace=1.5)
    if not replies:
        raise CheckFailed(f"no reply to a batch (MCP {s.cfg.version}); silence hangs the client")
    reply = replies[0]
    if s.cfg.version == "2025-03-26":
        if type(reply) is not list or len(reply) != 2:
            raise CheckFailed(f"MCP 2025-03-26 servers MUST accept batches; expected an array of 2 replies, got {show(reply)}")
        return
    if type(reply) is list:
        raise CheckFailed(f"MCP {s.cfg.version} has no batches, but the batch was served; refuse it with -32600", level=SHOULD)
    expect_error(reply, -32600, NULL, id_may_be_omitted=True)


@check(
    "mcp.unknown-tool", "mcp", SHOULD, "calling an unknown tool is a -32602 protocol error",
    _spec("server/tools.mdx (Error Handling: unknown tools are protocol errors)"),
    "answer tools/call for a name that is not listed with -32602, not with an isError result",
    group="mcp", applies=_needs_mcp,
)
def unknown_tool(s: Probe) -> None:
    reply = s.call("tools/call", {"name": NO_SUCH_TOOL, "arguments": {}}, id="ut-1")
    found = leaks(reply, ignore=(NO_SUCH_TOOL,))
    if found:
        raise CheckFailed("the reply reveals the server's insides: " + "; ".join(found), level=MUST)
    if "result" in reply:
        raise CheckFailed(f"an unknown tool was answered with a result: {show(reply.get('result'))}")
    expect_error(reply, -32602, "ut-1")


@check(
    "mcp.tool-fail-no-leak", "mcp", MUST, "a failing tool reports no traceback, path or exception name",
    _spec("server/tools.mdx (Error Handling); security_best_practices"),
    "turn tool exceptions into a generic isError result (or -32603) and log the details on stderr only",
    group="mcp", applies=_needs_leak_tool,
)
def tool_fail_no_leak(s: Probe) -> None:
    reply = s.call("tools/call", {"name": s.cfg.leak_probe, "arguments": {}}, id="tf-1", timeout=max(s.cfg.timeout, 10.0))
    if "result" in reply and type(reply["result"]) is dict and reply["result"].get("isError") is not True:
        raise CheckFailed(f"the failing tool returned a result without isError: true: {show(reply['result'])}", level=SHOULD)
    payload = reply.get("error") if "error" in reply else reply.get("result")
    found = leaks(payload)
    if found:
        raise CheckFailed("the failure reveals the server's insides: " + "; ".join(found))


def _sample_args(schema: Any) -> dict[str, Any] | None:
    """Arguments that satisfy a simple inputSchema (required properties of basic types), or None."""
    if type(schema) is not dict:
        return None
    props = schema.get("properties") or {}
    out: dict[str, Any] = {}
    samples = {"string": "sturdyrpc", "integer": 1, "number": 0.1, "boolean": False, "array": [], "object": {}}
    for name in schema.get("required") or []:
        p = props.get(name) or {}
        if "enum" in p and p["enum"]:
            out[name] = p["enum"][0]
        elif "default" in p:
            out[name] = p["default"]
        elif p.get("type") in samples:
            out[name] = samples[p["type"]]
        else:
            return None
    return out


@check(
    *spec_args("mcp.call-tools"),
    group="mcp-tools", applies=_needs_call_tools, budget=4.0,
)
def call_tools(s: Probe) -> None:
    listed = _result_of(s.call("tools/list", {}, id="ct-list"), "tools/list").get("tools") or []
    called = 0
    for t in listed:
        name = t.get("name") if type(t) is dict else None
        if type(name) is not str or not s.cfg.tool_allowed(name) or name == s.cfg.slow:
            continue
        args = _sample_args(t.get("inputSchema"))
        if args is None:
            continue
        reply = s.call("tools/call", {"name": name, "arguments": args}, id=s.new_id("ct"), timeout=max(s.cfg.timeout, 10.0))
        called += 1
        if "error" in reply:
            expect_error(reply, ())
            continue
        problems = tool_result_problems(_result_of(reply, f"tools/call {name}"), modern=s.cfg.modern)
        if problems:
            raise CheckFailed(f"tool {name!r}: " + "; ".join(problems))
    if not called:
        raise CheckSkipped("no allowed tool with arguments the checker can fill in")


def _progress_events(msgs: list[Any], token: Any) -> list[Any]:
    return [
        m["params"].get("progress")
        for m in msgs
        if type(m) is dict and m.get("method") == "notifications/progress" and type(m.get("params")) is dict
        and same_id(m["params"].get("progressToken"), token)
    ]


@check(
    *spec_args("mcp.progress"),
    group="mcp-slow", applies=_needs_slow_tool,
)
def progress(s: Probe) -> None:
    token = "sturdyrpc-pt-1"
    msg = s.request("tools/call", {"name": s.cfg.slow, "arguments": {"seconds": 1.0}, "_meta": {"progressToken": token}}, id="pr-1")
    s.send(msg)
    reply, before = s.wait_for(lambda v: type(v) is dict and v.get("id") == "pr-1" and "method" not in v, max(s.cfg.timeout, 10.0))
    if reply is None:
        raise CheckFailed(f"no reply to a tools/call of {s.cfg.slow!r} within the timeout{s.exit_note()}")
    after = s.drain(0.5)
    values = _progress_events(before, token)
    late = _progress_events(after, token)
    if late:
        raise CheckFailed(f"{len(late)} progress notification(s) arrived after the response")
    problem = progress_problem(values)
    if problem:
        raise CheckFailed(problem)
    for m in before + after:
        if type(m) is dict and m.get("method") == "notifications/progress":
            p = m.get("params")
            if type(p) is not dict or not same_id(p.get("progressToken"), token):
                raise CheckFailed(f"a progress notification carries a token the client never sent: {show(m)}")


@check(
    "mcp.cancel", "mcp", SHOULD, "a cancelled request gets no reply",
    _spec("basic/utilities/cancellation.mdx (receivers SHOULD NOT reply; MUST NOT in 2026-07-28)"),
    "on notifications/cancelled stop the work and send nothing for that request id (not even an error)",
    group="mcp-slow", applies=_needs_slow_tool,
)
def cancel(s: Probe) -> None:
    if s.cfg.url and s.cfg.modern:
        raise CheckSkipped(f"over HTTP {MODERN_VERSION} a request is cancelled by closing its response stream (nothing to observe)")
    call = s.request("tools/call", {"name": s.cfg.slow, "arguments": {"seconds": 2.0}}, id="cx-1")
    s.send(call)
    time.sleep(0.3)
    s.send(s.notification("notifications/cancelled", {"requestId": "cx-1", "reason": "sturdyrpc check"}))
    level = MUST if s.cfg.modern else SHOULD
    got = s.exchange(s.request("tools/list", {}, id="cx-after"), expect=1, settle=2.5)
    answered = [m for m in got if type(m) is dict and m.get("id") == "cx-1" and "method" not in m]
    if answered:
        raise CheckFailed(f"the cancelled request was answered: {show(answered[0])}", level=level)


@check(
    "mcp.discover", "mcp", MUST, "server/discover lists the supported versions",
    _spec("server/discover.mdx (servers MUST implement server/discover)", MODERN_VERSION),
    "answer server/discover with {supportedVersions, capabilities, resultType: 'complete'}",
    group="mcp", applies=_modern,
)
def discover(s: Probe) -> None:
    result = _result_of(s.call("server/discover", {}, id="disc-1"), "server/discover")
    versions = result.get("supportedVersions")
    if type(versions) is not list or MODERN_VERSION not in versions:
        raise CheckFailed(f"supportedVersions must list {MODERN_VERSION}, got {show(versions)}")
    if type(result.get("capabilities")) is not dict:
        raise CheckFailed("capabilities is missing or not an object")


@check(
    "mcp.meta-required", "mcp", MUST, "a request without the required _meta keys gets -32602",
    _spec("basic/index.mdx (_meta: protocolVersion and clientCapabilities are required)", MODERN_VERSION),
    "reject requests whose params._meta lacks io.modelcontextprotocol/protocolVersion or clientCapabilities with -32602",
    group="mcp", applies=_modern,
)
def meta_required(s: Probe) -> None:
    cases = [
        ("no params at all", {"jsonrpc": "2.0", "id": "meta-1", "method": "tools/list"}),
        ("no _meta", {"jsonrpc": "2.0", "id": "meta-2", "method": "tools/list", "params": {}}),
        ("_meta without clientCapabilities", {"jsonrpc": "2.0", "id": "meta-3", "method": "tools/list",
         "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN_VERSION}}}),
    ]
    for what, msg in cases:
        replies = s.exchange(msg)
        if not replies:
            raise CheckFailed(f"{what}: no reply")
        try:
            _error_or_fail(s, replies[0], (-32602,), f"a request with {what}")
        except CheckFailed as exc:
            raise CheckFailed(f"{what}: {exc.detail}", level=exc.level) from None


@check(
    "mcp.unsupported-version", "mcp", MUST, "an unsupported _meta protocol version gets -32022 with data",
    _spec("basic/versioning.mdx (UnsupportedProtocolVersion -32022, data.supported/requested)", MODERN_VERSION),
    "answer -32022 with data {supported: [...], requested: '<the version>'}",
    group="mcp", applies=_modern,
)
def unsupported_version(s: Probe) -> None:
    # Over HTTP the header carries the same version, and a date older than every known version
    # is refused by the handshake-era rule (plain 400): a future one is unambiguous.
    requested = "2099-01-01" if s.cfg.url else "1999-01-01"
    meta = {**modern_meta(), "io.modelcontextprotocol/protocolVersion": requested}
    reply = s.call("tools/list", {"_meta": meta}, id="uv-1")
    # Over HTTP the refusal is an HTTP 400 whose JSON-RPC error may omit the id (transports.mdx).
    err = expect_error(reply, -32022, NULL if s.cfg.url and "id" not in reply else "uv-1", id_may_be_omitted=True)["error"]
    data = err.get("data")
    if type(data) is not dict or type(data.get("supported")) is not list or data.get("requested") != requested:
        raise CheckFailed(f"data must be {{supported: [...], requested: '{requested}'}}, got {show(data)}")


@check(
    "mcp.result-type", "mcp", MUST, "every result carries a valid resultType",
    _spec("basic/index.mdx#resulttype (every result MUST include resultType)", MODERN_VERSION),
    "add resultType: 'complete' to every result (input_required / task where they apply)",
    group="mcp", applies=_modern,
)
def result_type(s: Probe) -> None:
    for method in ("server/discover", "tools/list"):
        result = _result_of(s.call(method, {}, id=s.new_id("rt")), method)
        rt = result.get("resultType")
        if rt not in ("complete", "input_required", "task"):
            raise CheckFailed(f"the result of {method} has resultType {show(rt)}; expected 'complete'")


@check(
    "mcp.server-info-meta", "mcp", SHOULD, "results carry io.modelcontextprotocol/serverInfo in _meta",
    _spec("basic/index.mdx (_meta: the server SHOULD include serverInfo)", MODERN_VERSION),
    "put {name, version} under result._meta['io.modelcontextprotocol/serverInfo']",
    group="mcp", applies=_modern,
)
def server_info_meta(s: Probe) -> None:
    result = _result_of(s.call("tools/list", {}, id="si-1"), "tools/list")
    info = (result.get("_meta") or {}).get("io.modelcontextprotocol/serverInfo")
    if type(info) is not dict or type(info.get("name")) is not str:
        raise CheckFailed(f"result._meta has no serverInfo: {show(result.get('_meta'))}")


@check(
    *spec_args("mcp.error-codes"),
    group="mcp", applies=_modern,
)
def error_codes(s: Probe) -> None:
    probes: list[tuple[str, dict[str, Any]]] = [
        (UNKNOWN, {}),
        ("tools/call", {"name": NO_SUCH_TOOL, "arguments": {}}),
        ("tools/call", {"name": 42}),
    ]
    if "resources" in s.cfg.capabilities:
        probes.append(("resources/read", {"uri": "sturdyrpc-check://no-such-resource"}))
    for method, params in probes:
        reply = s.call(method, params, id=s.new_id("ec"))
        if "error" not in reply:
            if method == "resources/read" and not (reply.get("result") or {}).get("contents"):
                raise CheckFailed("a missing resource was answered with empty contents (MUST be -32602)")
            continue
        err = expect_error(reply, ())["error"]
        for level, detail in mcp_error_code_problems(err["code"], err.get("data"), s.cfg.version)[:1]:
            raise CheckFailed(f"{method}: {detail}", level=None if level is MUST else level)


@check(
    "mcp.header-mismatch", "mcp", MUST, "HTTP headers that contradict the body get -32020",
    _spec("basic/transports/streamable-http.mdx (HeaderMismatch -32020, HTTP 400)", MODERN_VERSION),
    "compare MCP-Protocol-Version / Mcp-Method / Mcp-Name headers with the body; answer 400 + -32020",
    group="mcp", applies=lambda cfg: _modern(cfg) or (None if cfg.url else "HTTP only (headers); stdio has none"),
)
def header_mismatch(s: Probe) -> None:
    _http_header_mismatch(s)
