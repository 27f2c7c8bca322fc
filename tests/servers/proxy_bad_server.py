"""A misbehaving stdio JSON-RPC server for the trace/guard/replay tests; each method is one bug.

  echo      answers with its params (correct)
  dup       answers twice
  ghost     answers, then answers an id nobody sent ("ghost-999")
  junk      writes a non-JSON line on stdout, then answers
  pieces    writes its reply in three pieces, 50 ms apart
  hang      never answers
  die       exits with code 3 at once
  badcode   answers with -32100 (reserved by JSON-RPC, defined by nobody)
  progress  (MCP) sends progress 1, then 1 again (not increasing), answers, then sends progress 3
  note      (a notification) is answered with {"id": null, "result": "pong"}

Cancel notifications (notifications/cancelled, $/cancelRequest) and stdin EOF are reported on
stderr ("CANCEL <id>", "EOF"). Options: --content-length (LSP framing), --pidfile FILE,
--ignore-eof (keep running after EOF), --ignore-term (also ignore SIGTERM: only SIGKILL ends it),
--shout (an extra field in echo replies, for replay diffs).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

ARGS = sys.argv[1:]
CL = "--content-length" in ARGS
OUT = sys.stdout.buffer


def write(raw: bytes) -> None:
    OUT.write(b"Content-Length: %d\r\n\r\n" % len(raw) + raw if CL else raw + b"\n")
    OUT.flush()


def send(obj: object) -> None:
    write(json.dumps(obj, separators=(",", ":")).encode())


def messages():  # type: ignore[no-untyped-def]
    inp = sys.stdin.buffer
    if not CL:
        for line in inp:
            if line.strip():
                yield json.loads(line)
        return
    while True:
        length = -1
        while True:
            line = inp.readline()
            if not line:
                return
            if line in (b"\r\n", b"\n"):
                break
            name, _, value = line.decode().partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        yield json.loads(inp.read(length))


def main() -> None:
    if "--pidfile" in ARGS:
        # written whole under another name, then renamed: a reader waiting for the file never sees it empty
        path = ARGS[ARGS.index("--pidfile") + 1]
        with open(path + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(path + ".tmp", path)
    if "--ignore-term" in ARGS:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for m in messages():
        method, mid = m.get("method"), m.get("id")
        if method in ("notifications/cancelled", "$/cancelRequest"):
            p = m.get("params") or {}
            sys.stderr.write(f"CANCEL {p.get('requestId', p.get('id'))}\n")
            sys.stderr.flush()
            continue
        if method == "note":
            send({"jsonrpc": "2.0", "id": None, "result": "pong"})
            continue
        if "id" not in m:
            continue
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": "2025-11-25", "capabilities": {},
                  "serverInfo": {"name": "bad", "version": "1"}}})
        elif method == "echo":
            result = {"params": m.get("params"), "shout": True} if "--shout" in ARGS else {"params": m.get("params")}
            send({"jsonrpc": "2.0", "id": mid, "result": result})
        elif method == "dup":
            send({"jsonrpc": "2.0", "id": mid, "result": 1})
            send({"jsonrpc": "2.0", "id": mid, "result": 2})
        elif method == "ghost":
            send({"jsonrpc": "2.0", "id": mid, "result": "real"})
            send({"jsonrpc": "2.0", "id": "ghost-999", "result": "ghost"})
        elif method == "junk":
            OUT.write(b"Loading model... 42%\n")
            OUT.flush()
            send({"jsonrpc": "2.0", "id": mid, "result": "after junk"})
        elif method == "pieces":
            raw = json.dumps({"jsonrpc": "2.0", "id": mid, "result": "in pieces"}).encode()
            data = (b"Content-Length: %d\r\n\r\n" % len(raw) + raw) if CL else raw + b"\n"
            third = len(data) // 3
            for chunk in (data[:third], data[third : 2 * third], data[2 * third :]):
                OUT.write(chunk)
                OUT.flush()
                time.sleep(0.05)
        elif method == "hang":
            pass
        elif method == "die":
            sys.stderr.flush()
            os._exit(3)
        elif method == "badcode":
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32100, "message": "odd"}})
        elif method == "progress":
            token = ((m.get("params") or {}).get("_meta") or {}).get("progressToken")
            for value in (1, 1):
                send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": value}})
            send({"jsonrpc": "2.0", "id": mid, "result": {}})
            send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": 3}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "Method not found"}})
    sys.stderr.write("EOF\n")
    sys.stderr.flush()
    if "--ignore-eof" in ARGS:
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
