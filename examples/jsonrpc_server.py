"""A plain JSON-RPC 2.0 server on stdio: one request per line in, one reply per line out.

    python examples/jsonrpc_server.py
    sturdyrpc call divide '[6, 3]' -- python examples/jsonrpc_server.py      # 2.0
    sturdyrpc check --echo-method echo -- python examples/jsonrpc_server.py
"""

from sturdyrpc import Dispatcher, InvalidParams, run_stdio

rpc = Dispatcher()


@rpc.method
async def divide(a: float, b: float) -> float:
    """Params bind by position ([6, 3]) or by name ({"a": 6, "b": 3}), checked before this runs."""
    if b == 0:
        raise InvalidParams("Invalid params: 'b' must not be zero", {"param": "b"})
    return a / b


@rpc.method(blocking=False)  # sync and quick: answered inline, without a thread
def echo(value: object) -> object:
    return value


if __name__ == "__main__":
    raise SystemExit(run_stdio(rpc))
