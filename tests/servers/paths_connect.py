"""tests/servers/paths_app.py's ``rpc`` served by the client helpers of ``sturdyrpc.client``:
the process connects out, and its ``Peer`` serves the requests the other side sends it
(``connect_tcp``/``connect_unix``/``connect_stdio(..., dispatcher=rpc)``).

- ``paths_connect.py tcp PORT``: ``connect_tcp("127.0.0.1", PORT, dispatcher=rpc)``;
- ``paths_connect.py unix PATH``: ``connect_unix(PATH, dispatcher=rpc)``;
- ``paths_connect.py stdio PORT``: ``connect_stdio`` of this script in ``relay`` mode, which
  joins the child's stdin and stdout to a TCP connection to 127.0.0.1:PORT (bytes as they are).

Each serves until the other side ends the connection, answers every request read by then,
and exits 0.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading

from paths_app import rpc

from sturdyrpc.client import connect_stdio, connect_tcp, connect_unix


async def serve(mode: str, where: str) -> None:
    if mode == "tcp":
        helper = connect_tcp("127.0.0.1", int(where), dispatcher=rpc)
    elif mode == "unix":
        helper = connect_unix(where, dispatcher=rpc)
    else:
        helper = connect_stdio([sys.executable, os.path.abspath(__file__), "relay", where], dispatcher=rpc)
    async with helper as conn:
        await conn.peer.wait_closed()


def relay(port: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port))

    def inbound() -> None:  # socket -> our stdout (the serving peer reads it)
        while data := sock.recv(65536):
            os.write(1, data)
        os.close(1)

    reader = threading.Thread(target=inbound, daemon=True)
    reader.start()
    while data := os.read(0, 65536):  # the serving peer's replies -> the socket
        sock.sendall(data)
    sock.shutdown(socket.SHUT_WR)
    reader.join(10)
    sock.close()


if __name__ == "__main__":
    if sys.argv[1] == "relay":
        relay(int(sys.argv[2]))
    else:
        asyncio.run(serve(sys.argv[1], sys.argv[2]))
