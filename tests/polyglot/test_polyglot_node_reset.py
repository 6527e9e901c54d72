"""The Node example client re-attaches after a connection reset.

connect-node reports the TCP connection under a stream being lost as CANCELED
(an HTTP/2 CANCEL), not UNAVAILABLE; the example must take a CANCELED its own
call did not ask for as a broken path, as the npm package's ``attach`` does,
and follow the run to its end through Attach.
"""

from __future__ import annotations

import asyncio

from browser.dropping_link import DroppingLink
from conftest import ServerFactory
from waiting import until

from polyglot.polyglot_builds import build_node

PROMPT = "tell me a long story about the sea and the ships on it"


async def _client(addr: str, out: list[bytes], err: list[bytes]) -> int:
    node = await asyncio.create_subprocess_exec(
        *build_node(), "run", "--addr", addr, PROMPT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert node.stdout is not None and node.stderr is not None

    async def pump(stream: asyncio.StreamReader, into: list[bytes]) -> None:
        while chunk := await stream.read(4096):
            into.append(chunk)

    await asyncio.gather(pump(node.stdout, out), pump(node.stderr, err))
    return await asyncio.wait_for(node.wait(), 120)


async def test_the_node_example_reattaches_after_a_connection_reset(
    server_factory: ServerFactory,
) -> None:
    # Paced, so the reset lands mid-answer.
    server = await server_factory(engine_options={"pacing": "0.05"})
    assert server.grpc is not None
    port = int(server.grpc.address.rsplit(":", 1)[1])
    # The whole answer, read without a reset, to compare with.
    whole_out: list[bytes] = []
    assert await _client(server.grpc.address, whole_out, []) == 0
    whole = b"".join(whole_out).decode()
    assert whole.count("\n") >= 1 and len(whole) > 40

    out: list[bytes] = []
    err: list[bytes] = []
    async with DroppingLink(port) as link:
        client = asyncio.create_task(_client(link.url.removeprefix("http://"), out, err))
        # Some of the answer has arrived, not all of it: reset the connection.
        await until(lambda: 10 < len(b"".join(out)) < len(whole) // 2, "the answer under way")
        assert link.drop() >= 1
        code = await client
    stderr = b"".join(err).decode()
    assert code == 0, stderr
    assert "[reconnect] attach after " in stderr
    # Nothing lost, nothing repeated.
    assert b"".join(out).decode() == whole
