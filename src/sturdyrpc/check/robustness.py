"""Checks that stress the server or its process: robustness, concurrency, lifecycle, and the
stdout hygiene verdict over every line any process wrote during the run."""

from __future__ import annotations

import signal
import time

from .config import same_id
from .driver import Frame, trim
from .jsonrpc import (
    INVALID,
    MUST,
    QUALITY,
    S6,
    SHOULD,
    UNKNOWN,
    _needs_slow,
    _plain_batches,
    _raw,
    _slow_call,
    _unknown,
    _with_raw_param,
)
from .model import CheckFailed, CheckSkipped
from .probe import Probe
from .rules import NULL, check, expect_error, response_problems, show
from .verdicts import spec_args

# -- robustness ------------------------------------------------------------------------------


def _survives(s: Probe, payload: bytes, what: str, *, timeout: float | None = None, reply_codes: tuple[int, ...] = ()) -> None:
    """Send ``payload``; it must be answered (any error is fine, or one of ``reply_codes``) and the
    server must keep answering (the sentinel)."""
    replies = s.exchange(payload, timeout=timeout or max(s.cfg.timeout, 10.0), grace=2.0)
    if not replies:
        raise CheckFailed(f"no reply to {what} (the server kept running but the request was lost)")
    reply = replies[0]
    problems = response_problems(reply, id_may_be_omitted=s.cfg.is_mcp) if type(reply) is dict else ["a batch reply"]
    if problems:
        raise CheckFailed(f"malformed reply to {what}: " + "; ".join(problems))
    if reply_codes and ("error" not in reply or reply["error"]["code"] not in reply_codes):
        raise CheckFailed(f"expected error {' or '.join(map(str, reply_codes))} for {what}, got {show(reply)}")


@check(
    "robustness.huge-line", "robustness", MUST, "a 20 MB line is answered (or refused) and the server survives",
    "JSON-RPC 2.0 §5 (every request is answered); resource limits",
    "bound the line length; answer oversized input with an error instead of crashing or hanging",
    group="robustness-big", budget=5.0,
    stdio_only="over HTTP see http.body-too-large",
)
def huge_line(s: Probe) -> None:
    payload = _with_raw_param(s, "huge", b'"' + b"x" * (20 * 1024 * 1024) + b'"')
    _survives(s, payload, "a 20 MB request", timeout=max(s.cfg.timeout, 20.0))


@check(
    "robustness.deep-nesting", "robustness", MUST, "100,000 nested brackets are answered and the server survives",
    "JSON-RPC 2.0 §5 (every request is answered); resource limits",
    "bound the nesting depth and catch RecursionError / stack overflow in the decoder; answer an error",
    budget=2.0,
)
def deep_nesting(s: Probe) -> None:
    depth = 100_000
    payload = _with_raw_param(s, "deep", b"[" * depth + b"]" * depth)
    _survives(s, payload, f"a request nested {depth} levels deep")


@check(
    "robustness.huge-batch", "robustness", MUST, "a batch of 5,000 requests is answered (or refused) and the server survives",
    f"{S6}; resource limits",
    "cap the batch length; answer a too-large batch with one -32600 instead of stalling",
    group="robustness-big", applies=_plain_batches, budget=3.0,
)
def huge_batch(s: Probe) -> None:
    n = 5000
    batch = [s.request(UNKNOWN, id=i) for i in range(n)]
    replies = s.exchange(batch, timeout=max(s.cfg.timeout, 20.0), grace=3.0, ids=list(range(n)))
    if not replies:
        raise CheckFailed(f"no reply to a batch of {n} requests")
    r = replies[0]
    if type(r) is dict:
        expect_error(r, (INVALID, -32000, -32001, -32099, -32005), NULL)  # a size limit: one error is fine
        return
    if len(r) != n:
        raise CheckFailed(f"{len(r)} replies in the array for {n} requests")
    seen = {x.get("id") for x in r if type(x) is dict}
    if seen != set(range(n)):
        raise CheckFailed(f"the replies carry {len(seen)} distinct ids for {n} requests")


@check(
    "robustness.pipelined-2000", "robustness", MUST, "2,000 pipelined requests get 2,000 replies",
    "JSON-RPC 2.0 §5 (every request is answered)",
    "never drop requests under load; apply backpressure (stop reading) instead",
    group="robustness-big", budget=8.0,
    stdio_only="over HTTP each message is its own POST",
)
def pipelined_2000(s: Probe) -> None:
    n = 2000
    data = b"".join(_raw(s.request(UNKNOWN, id=f"p{i}")) for i in range(n))
    # Generous: some servers need 5-10 ms per request, and this must not fail on a busy machine.
    replies = s.exchange(data, expect=n, timeout=max(s.cfg.timeout * 4, 40.0), grace=3.0, ids=[f"p{i}" for i in range(n)])
    ids = [r.get("id") for r in replies if type(r) is dict]
    missing = n - len(set(ids) & {f"p{i}" for i in range(n)})
    if missing:
        raise CheckFailed(f"{missing} of {n} pipelined requests got no reply")
    if len(ids) != len(set(ids)):
        raise CheckFailed("some requests were answered twice")


@check(
    "robustness.blank-lines", "robustness", SHOULD, "blank lines are ignored",
    "newline-delimited JSON (empty lines carry no message); MCP stdio transport",
    "skip lines that are empty or only whitespace instead of answering -32700",
    stdio_only="newline framing",
)
def blank_lines(s: Probe) -> None:
    replies = s.exchange(b"\n\n  \n\r\n" + _raw(_unknown(s, "after-blank")))
    extra = [r for r in replies if not (type(r) is dict and same_id(r.get("id"), "after-blank"))]
    if not any(type(r) is dict and same_id(r.get("id"), "after-blank") for r in replies):
        raise CheckFailed("the request after the blank lines was not answered")
    if extra:
        raise CheckFailed(f"blank lines were answered: {show(extra[0])}")


@check(
    "robustness.lone-surrogate", "robustness", MUST, "a lone UTF-16 surrogate escape is answered and the server survives",
    "RFC 8259 §8.2 (unpaired surrogates); JSON-RPC 2.0 §5",
    "reject \\ud800 with -32700 (or never copy input text into replies); never crash while encoding",
)
def lone_surrogate(s: Probe) -> None:
    start = len(s.proc.frames)
    payload = _with_raw_param(s, "sur", b'"a\\udfffb"').replace(UNKNOWN.encode(), UNKNOWN.encode() + b"\\ud800", 1)
    _survives(s, payload, "a request holding \\ud800")
    if any(f.lenient for f in s.proc.frames[start:]):
        raise CheckFailed(
            "the reply carries an unpaired surrogate escape back; strict decoders (msgspec, Rust serde_json) reject the whole line",
            level=SHOULD,
        )


@check(
    "robustness.many-invalid", "robustness", MUST, "100 bad lines in a row are answered and the server survives",
    "JSON-RPC 2.0 §5.1 (-32700 / -32600)",
    "keep the read loop alive after any bad input; do not count errors towards a shutdown",
    stdio_only="newline framing",
)
def many_invalid(s: Probe) -> None:
    data = b"".join([b"}{\n", b"[]\n", b'{"jsonrpc":"2.0"}\n', b"\x80\n"] * 25)
    replies = s.exchange(data, expect=100, timeout=max(s.cfg.timeout, 10.0))
    if len(replies) < 100:
        raise CheckFailed(f"only {len(replies)} replies to 100 invalid lines")


# -- concurrency (quality) ---------------------------------------------------------------------


@check(
    "concurrency.out-of-order", "concurrency", QUALITY, "a fast request is not stuck behind a slow one",
    f"{S6} (replies may come in any order); head-of-line blocking",
    "run handlers concurrently (tasks or a thread pool) and write each reply when it is ready",
    applies=_needs_slow, group="fresh",
)
def out_of_order(s: Probe) -> None:
    s.send(_slow_call(s, 1.0, "slow-1"))
    s.send(s.request(UNKNOWN, id="fast-1"))
    first, _ = s.wait_for(lambda v: type(v) is dict and v.get("id") in ("slow-1", "fast-1"), 5.0)
    if first is None:
        raise CheckFailed("neither request was answered")
    if first.get("id") == "slow-1":
        raise CheckFailed("the fast request was answered only after the 1 s request: requests are handled one at a time")
    s.wait_for(lambda v: type(v) is dict and v.get("id") == "slow-1", 5.0)


@check(
    "concurrency.batch-parallel", "concurrency", QUALITY, "batch elements run in parallel",
    f"{S6} (the Server MAY process a batch concurrently)",
    "dispatch batch elements concurrently and gather the replies",
    applies=lambda cfg: _needs_slow(cfg) or _plain_batches(cfg), group="fresh",
)
def batch_parallel(s: Probe) -> None:
    t0 = time.monotonic()
    replies = s.exchange([_slow_call(s, 0.5, i) for i in range(1, 5)], timeout=10.0)
    took = time.monotonic() - t0
    if not replies or type(replies[0]) is not list or len(replies[0]) != 4:
        raise CheckFailed(f"expected an array of 4 replies, got {show(replies)}")
    # Run one after another they take 2.0 s at least; anything clearly below that ran in parallel
    # (the margin keeps a loaded machine from turning a parallel server into a warning).
    if took > 1.8:
        raise CheckFailed(f"4 elements of 0.5 s took {took:.1f} s: batch elements run one after another")


# -- lifecycle -------------------------------------------------------------------------------


@check(
    "lifecycle.eof-inflight", "lifecycle", MUST, "on stdin EOF, requests in flight are still answered",
    "JSON-RPC 2.0 §5 (every request is answered); MCP stdio shutdown (close stdin, then wait)",
    "on EOF stop reading, but wait for running handlers and flush their replies before exiting",
    group="fresh", budget=2.0,
    stdio_only="stdin EOF",
)
def eof_inflight(s: Probe) -> None:
    n = 200
    data = b"".join(_raw(s.request(UNKNOWN, id=f"eof{i}")) for i in range(n))
    if s.cfg.slow:
        data += _raw(_slow_call(s, 0.5, "eof-slow"))
        n += 1
    s.send(data)
    s.proc.close_stdin()
    got = [v for v in s.drain(max(s.cfg.timeout, 10.0)) if type(v) is dict and "id" in v]
    ids = {str(v["id"]) for v in got}
    missing = n - len(ids)
    if missing:
        raise CheckFailed(f"{missing} of {n} requests sent just before EOF were never answered{s.exit_note()}")


@check(
    "lifecycle.eof-exit", "lifecycle", SHOULD, "on stdin EOF the server exits with code 0",
    "MCP 2026-07-28 basic/transports/stdio.mdx (the server SHOULD exit on stdin EOF)",
    "treat EOF on stdin as the end of the session: finish, flush and exit(0)",
    group="fresh", budget=2.0,
    stdio_only="stdin EOF",
)
def eof_exit(s: Probe) -> None:
    s.exchange(_unknown(s, "before-eof"))
    s.proc.close_stdin()
    code = s.proc.wait(5.0)
    if code is None:
        raise CheckFailed("still running 5 s after stdin was closed")
    if code != 0:
        raise CheckFailed(f"exited with code {code} after a clean EOF")


@check(
    "lifecycle.sigterm", "lifecycle", SHOULD, "SIGTERM stops the server within 3 s",
    "MCP stdio shutdown (the client closes stdin, then sends SIGTERM, then SIGKILL)",
    "handle SIGTERM: cancel running work and exit promptly",
    group="fresh",
    stdio_only="the checker did not start the server",
)
def sigterm(s: Probe) -> None:
    s.exchange(_unknown(s, "before-term"))
    s.proc.signal(signal.SIGTERM)
    code = s.proc.wait(3.0)
    if code is None:
        raise CheckFailed("still running 3 s after SIGTERM")


# The stdout-hygiene check is special: the engine runs it last and hands it every line
# every process wrote (see engine.run_checks); this entry describes it.
STDOUT_CHECK_ID = "framing.stdout-only-jsonrpc"


@check(
    *spec_args(STDOUT_CHECK_ID),
    group="final",
    stdio_only="an HTTP server's stdout is not the channel",
)
def stdout_only(s: Probe) -> None:
    # Give a banner or late startup output time to appear, then provoke a few error paths.
    time.sleep(0.3)
    s.exchange_many([b"{oops\n", b"[]\n", s.notification(UNKNOWN), _unknown(s, "hyg-1")], expect=1, settle=0.2)
    s.proc.close_stdin()
    s.drain(3.0)
    raise CheckSkipped("evaluated by the engine")  # replaced by the engine's verdict


def stdout_verdict(frames: list[tuple[str, Frame]]) -> str | None:
    """The failure detail for noise seen on stdout (``frames``: (check id, Frame)), or None."""
    bad = []
    for cid, f in frames:
        v = f.value
        if not f.is_message:
            reason = "not JSON" if not f.decoded else f"a bare JSON {type(v).__name__}"
            if not f.raw.strip():
                reason = "an empty line"
        elif type(v) is dict and v.get("jsonrpc") != "2.0":
            reason = 'a JSON object without "jsonrpc": "2.0"'
        elif not f.terminated:
            reason = "a message without its terminating newline"
        else:
            continue
        bad.append((cid, f, reason))
    if not bad:
        return None
    cid, f, reason = bad[0]
    return f"{len(bad)} line(s) on stdout are not JSON-RPC; first ({reason}, during {cid}): {trim(f.raw, 160)!r}"
