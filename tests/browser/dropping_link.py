"""A network path between the browser and the server that a test can drop.

A plain TCP forwarder on loopback, in the test's own event loop (the bytes
are HTTP/1.1 both ways, untouched). ``drop()`` aborts every connection open
through it at once, both sides, as a lost network or a restarted proxy does:
the browser sees its streams fail mid-body, the server sees its clients go.
Connections made afterwards go through again, so a client can reconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType


class DroppingLink:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.url = ""
        self.dropped = 0  # connections dropped so far
        self._server: asyncio.Server | None = None
        self._open: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()

    async def __aenter__(self) -> DroppingLink:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        self.drop()
        await self._server.wait_closed()

    def drop(self) -> int:
        """Aborts every open connection; how many there were."""
        links = list(self._open)
        for client, upstream in links:
            client.transport.abort()
            upstream.transport.abort()
        self.dropped += len(links)
        return len(links)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.transport.abort()
            return
        link = (writer, up_writer)
        self._open.add(link)
        try:
            await asyncio.gather(
                _pump(reader, up_writer), _pump(up_reader, writer), return_exceptions=True
            )
        finally:
            self._open.discard(link)
            writer.transport.abort()
            up_writer.transport.abort()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    # One side finished sending: pass the half-close on, as TCP would.
    with contextlib.suppress(OSError, RuntimeError):
        if writer.can_write_eof():
            writer.write_eof()
