"""Large event bodies on Redis: kept beside the stream, in bounded chunks (#27).

An event whose JSON text is larger than ``THRESHOLD`` is not put in its
stream entry. Its text is written first, ``CHUNK`` bytes per command, as the
fields ``<nonce>.<i>`` of the session's hash ``{sid}:bodies``; then the
publish script appends an entry that names it (``x``: ``<nonce>:<chunks>``)
instead of carrying it (``d`` and ``p``). So no single command carries tens
of MiB: with ``appendfsync always`` one 120 MiB command (a 60 MiB message as
its JSON and its protobuf) held the single-threaded Redis for one to two
seconds (a ping waited 0.7-1.4 s), long enough under load for a lease
renewal, a stream read or another session's write to pass its timeout; 60
chunks of 1 MiB written one after the other let a ping through in 10 ms
(BENCHMARKS.md, "Large messages on Redis"). Only the text is stored: the
protobuf is decoded from it by whoever sends it (the memory backend's
replayed events work the same way), which halves what Redis writes.

What holds, as for an event in the stream:

* Order and contiguity: the entry is appended by the same script, under the
  same fence, as any other event; its chunks are only its storage.
* Fencing: a write the script refuses (``FENCED``, or any failure) has its
  chunks deleted by the writer. A replica that dies between the chunks and
  the script leaves them in ``{sid}:bodies``, whose lifetime is the session's
  (it expires with the stream, and is deleted with the session's keys).
* The byte window: the entry counts its size like any other; the script that
  evicts it deletes its chunks.
* A reader that reads an entry whose chunks were deleted in between (it was
  evicted by a writer on another replica) treats it as trimmed past: a gap,
  so a resync, and the client catches up from the trace.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable

from omni_grpc.runtime.redis.connection import RedisConnection, unavailable_on_failure

# JSON text larger than this is stored beside the stream, not in its entry.
THRESHOLD = 1 << 20
# The most bytes one command writes or reads of a body.
CHUNK = 1 << 20


def outside(data: bytes) -> bool:
    """Whether a body of this JSON text is stored beside the stream."""
    return len(data) > THRESHOLD


def _fields(ref: bytes) -> list[bytes]:
    nonce, count = ref.rsplit(b":", 1)
    return [nonce + b"." + str(i).encode() for i in range(int(count))]


class LargeBodies:
    """One session's hash of large bodies, as one replica writes and reads it."""

    def __init__(self, conn: RedisConnection, key: str) -> None:
        self._conn = conn
        self.key = key

    async def stage(self, data: bytes) -> bytes:
        """Writes ``data`` in chunks, one command each (so Redis serves other
        clients, and syncs its AOF, between them); returns the reference the
        stream entry carries. On failure the chunks written are deleted."""
        view = memoryview(data)
        count = max(1, -(-len(data) // CHUNK))
        ref = secrets.token_hex(8).encode() + b":" + str(count).encode()
        names = _fields(ref)
        try:
            with unavailable_on_failure():
                for i, name in enumerate(names):
                    await self._conn.commands.hset(
                        self.key, name, view[i * CHUNK : (i + 1) * CHUNK]
                    )
        except BaseException:
            await self.discard([ref])
            raise
        return ref

    async def discard(self, refs: Iterable[bytes]) -> None:
        """Deletes staged bodies whose entry was never appended (best effort:
        what is left expires with the session's keys)."""
        names = [name for ref in refs for name in _fields(ref)]
        if not names:
            return
        try:
            with unavailable_on_failure():
                await self._conn.commands.hdel(self.key, *names)
        except Exception:  # the write already failed; this is only cleanup
            return

    async def fetch(self, ref: bytes) -> bytes | None:
        """The body's text, or None when its chunks are gone (the entry was
        evicted since it was read)."""
        parts: list[bytes] = []
        with unavailable_on_failure():
            for name in _fields(ref):
                part = await self._conn.reads.hget(self.key, name)
                if part is None:
                    return None
                parts.append(part)
        return b"".join(parts)


async def fill(bodies: LargeBodies, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> int:
    """Puts each large body's text in its entry's fields (``d``), in place.
    Returns the index of the last entry whose body was gone (evicted
    meanwhile: it and every entry before it were trimmed), or -1."""
    gone = -1
    for i, (_, fields) in enumerate(entries):
        ref = fields.get(b"x")
        if ref is None:
            continue
        data = await bodies.fetch(ref)
        if data is None:
            gone = i
        else:
            fields[b"d"] = data
    return gone
