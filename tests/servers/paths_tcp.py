"""Serve tests/servers/paths_app.py's ``rpc`` over TCP: a ``Peer`` on a
``sturdyrpc.transports.streams.StreamTransport`` per accepted connection, as a user writes it.

``python paths_tcp.py PORT``: serve 127.0.0.1:PORT until SIGTERM. ``--once``: serve the first
connection only, and exit 0 once it has ended (the other side's EOF) and every request read
on it has been answered.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from paths_app import rpc

from sturdyrpc.peer import Peer
from sturdyrpc.transports.streams import StreamTransport


async def main(port: int, once: bool) -> None:
    done = asyncio.Event()
    peers: set[Peer] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = Peer(StreamTransport(reader, writer), rpc, name="paths-tcp")
        peers.add(peer)
        try:
            async with peer:
                await peer.wait_closed()
        finally:
            peers.discard(peer)
            if once:
                done.set()

    listener = await asyncio.start_server(serve, "127.0.0.1", port)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, done.set)
    async with listener:
        await done.wait()
    for peer in list(peers):
        await peer.close(1.0)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), "--once" in sys.argv[2:]))
