"""A replica's network link to redis-server, that a test can cut.

A plain TCP forwarder on loopback (the bytes are Redis's own protocol, both
ways); ``cut_after(marker)`` lets the next client command that contains
``marker`` through to Redis and then drops that connection before the reply
comes back: Redis executed the command, the replica never hears the outcome
(a cut-off, as a partition or a proxy restart makes one).

It runs on a thread of its own, so a test may block (starting a replica,
reading its banner) while the replica talks to Redis through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading


class RedisLink:
    def __init__(self, redis_port: int) -> None:
        self.redis_port = redis_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._marker: bytes | None = None
        self.cuts = 0  # connections cut so far (a test waits on it)
        self._pumps: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        async def serve() -> None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            await self._server.serve_forever()

        def run() -> None:
            with contextlib.suppress(asyncio.CancelledError):
                self._loop.run_until_complete(serve())

        self._thread = threading.Thread(target=run, name="redis-link", daemon=True)
        self._thread.start()
        ready.wait(10)

    def cut_after(self, marker: bytes) -> None:
        self._marker = marker

    def stop(self) -> None:
        def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._pumps):
                task.cancel()
            for task in asyncio.all_tasks(self._loop):
                task.cancel()

        self._loop.call_soon_threadsafe(close)
        self._thread.join(10)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.redis_port)
        cut = asyncio.Event()

        async def to_redis() -> None:
            while data := await reader.read(65536):
                up_writer.write(data)
                await up_writer.drain()
                if self._marker is not None and self._marker in data:
                    self._marker = None
                    self.cuts += 1
                    cut.set()
                    return

        async def to_client() -> None:
            while data := await up_reader.read(65536):
                if cut.is_set():
                    return
                writer.write(data)
                await writer.drain()

        pumps = [asyncio.create_task(to_redis()), asyncio.create_task(to_client())]
        self._pumps.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
                self._pumps.discard(task)
            for w in (writer, up_writer):
                w.close()
                with contextlib.suppress(Exception):
                    await w.wait_closed()
