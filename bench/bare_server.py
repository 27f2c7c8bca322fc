"""The baseline for bench_stdio: the least a line-based JSON-RPC server in Python can do.

Reads a line, msgspec-decodes it, looks the method up in a dict, encodes the reply,
writes it. No validation, no limits, no error handling, no concurrency.

``--chunked``: a stronger variant that reads whatever the pipe holds and writes all of
its replies at once (one read and one write system call per chunk), for reference.
"""

from __future__ import annotations

import os
import sys

import msgspec

METHODS = {"echo": lambda params: params["value"] if type(params) is dict else params[0]}


def per_line() -> None:
    decode = msgspec.json.Decoder().decode
    encode = msgspec.json.encode
    methods = METHODS
    stdin = sys.stdin.buffer
    stdout = sys.stdout.buffer
    for line in iter(stdin.readline, b""):
        msg = decode(line)
        result = methods[msg["method"]](msg.get("params"))
        stdout.write(encode({"jsonrpc": "2.0", "result": result, "id": msg["id"]}) + b"\n")
        stdout.flush()


def chunked() -> None:
    decode = msgspec.json.Decoder().decode
    encode = msgspec.json.encode
    methods = METHODS
    rest = b""
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        lines = (rest + data).split(b"\n")
        rest = lines.pop()
        out = []
        for line in lines:
            msg = decode(line)
            result = methods[msg["method"]](msg.get("params"))
            out.append(encode({"jsonrpc": "2.0", "result": result, "id": msg["id"]}))
        if out:
            out.append(b"")
            os.write(1, b"\n".join(out))


if __name__ == "__main__":
    chunked() if "--chunked" in sys.argv else per_line()
