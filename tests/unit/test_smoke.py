"""The smallest end-to-end facts; detailed tests live in the other modules."""

from sturdyrpc import Dispatcher


def test_add_roundtrip() -> None:
    rpc = Dispatcher()

    @rpc.method
    def add(a: int, b: int) -> int:
        return a + b

    assert rpc.handle_sync(b'{"jsonrpc":"2.0","method":"add","params":[1,2],"id":1}') == b'{"jsonrpc":"2.0","result":3,"id":1}'
    assert rpc.handle_sync(b'{"jsonrpc":"2.0","method":"add","params":[1,"x"],"id":1}') is not None
