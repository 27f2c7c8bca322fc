"""A stdio JSON-RPC server on ``jsonrpcserver`` (PyPI), as its docs suggest: one ``dispatch`` per line.

The loop is the thinnest correct transport: bytes are decoded strictly, and a line that
is not UTF-8 gets a -32700 here (the library takes ``str``), so that ``sturdyrpc check``
findings are the library's, not the wrapper's. Methods: ``echo``, ``sleep``, ``fail``.
"""

import sys
import time

from jsonrpcserver import Success, dispatch, method


@method
def echo(*args, **kwargs):
    return Success(args[0] if args else kwargs)


@method
def sleep(seconds):
    time.sleep(min(float(seconds), 10.0))
    return Success(seconds)


@method
def fail():
    raise RuntimeError("SECRET-TOKEN-42 in /etc/shadow")


def main():
    out = sys.stdout
    for raw in sys.stdin.buffer:
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            out.write('{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}\n')
            out.flush()
            continue
        if not line.strip():
            continue
        response = dispatch(line)
        if response:
            out.write(response + "\n")
            out.flush()


if __name__ == "__main__":
    main()
