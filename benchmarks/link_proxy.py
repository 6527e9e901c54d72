"""A TCP proxy on loopback, to freeze one replica's link to Redis.

``python link_proxy.py UPSTREAM_PORT`` listens on a free 127.0.0.1 port,
prints it, and forwards every connection to ``127.0.0.1:UPSTREAM_PORT``.
The link is frozen by stopping this process (SIGSTOP): its connections stay
open and nothing passes either way until it is let go on (SIGCONT), as on a
network that stalls without resetting anything. A connection whose upstream
goes away (redis-server restarted) is closed on the client's side too.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def main(upstream: int) -> None:
    async def serve(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", upstream)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(pipe(client_r, server_w), pipe(server_r, client_w))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(port, flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(int(sys.argv[1])))
