"""AgentClient.follow: a stream that breaks on the way is attached again
after its last event id, on a real server through a TCP link the test drops
(as a lost network or a restarted proxy does)."""

from __future__ import annotations

import asyncio
import json
import sys

import grpc
import pytest
from browser.dropping_link import DroppingLink
from waiting import until

from omni_grpc.client import AgentClient
from omni_grpc.client.agent_client import RESUMABLE_CODES, RESUME_ATTEMPTS
from omni_grpc.client.errors import AgentError
from omni_grpc.client.events import StreamEvent
from omni_grpc.server import OmniServer

WAIT = 60.0  # a safety net against hangs, never the thing a test checks


def grpc_port(server: OmniServer) -> int:
    assert server.grpc is not None
    return int(server.grpc.address.rsplit(":", 1)[1])


def ids(events: list[StreamEvent]) -> list[str]:
    return [e.event_id for e in events if e.event_id]


async def test_a_run_followed_through_a_dropped_link_loses_and_repeats_nothing(
    omni_server: OmniServer,
) -> None:
    assert omni_server.grpc is not None
    async with (
        DroppingLink(grpc_port(omni_server)) as link,
        AgentClient(omni_server.grpc.address) as direct,
        AgentClient(link.url.removeprefix("http://")) as client,
    ):
        # The whole task as the server sent it, on a connection never dropped.
        run = client.run("list my files", approval_mode="ask", detach_on_cancel=True)
        sid = await run.session()
        seen: list[StreamEvent] = []
        resumed: list[tuple[grpc.StatusCode, int, str]] = []

        async def follow() -> None:
            async for event in client.follow(
                sid, run=run, on_resume=lambda e, n, last: resumed.append((e.code, n, last))
            ):
                seen.append(event)

        follower = asyncio.create_task(follow())
        await until(lambda: any(e.kind == "@approval_request" for e in seen), "the ask")
        assert link.drop() >= 1
        await until(lambda: resumed, "a re-attach")
        asked = next(e for e in seen if e.kind == "@approval_request")
        call_id = asked.server_event.approval_request.tool_call.tool_call.tool_call_id  # type: ignore[union-attr]
        await direct.approve(sid, call_id, "allow")
        await asyncio.wait_for(follower, WAIT)
        # The server's record of the task after the first event received,
        # replayed on a connection never dropped.
        first = ids(seen)[0]
        reference = [e async for e in direct.attach(sid, first, until_idle=True)]

    code, attempt, last = resumed[0]
    assert code in RESUMABLE_CODES and attempt == 1
    assert last in ids(seen)  # it resumed after an id it had received
    # Every message once, in the server's order, to the task's end.
    got = [e.event_id for e in seen if e.message is not None and e.event_id != first]
    assert got == [e.event_id for e in reference if e.message is not None]
    assert len(got) > 3 and len(ids(seen)) == len(set(ids(seen)))
    assert seen[-1].is_task_end
    assert any(e.kind == "approval_decision" for e in seen)


async def test_an_answer_of_the_server_is_raised_without_attaching_again(
    omni_server: OmniServer,
) -> None:
    assert omni_server.grpc is not None
    resumed: list[int] = []
    async with AgentClient(omni_server.grpc.address) as client:
        with pytest.raises(AgentError) as refused:
            async for _ in client.follow(
                "s_unknown", on_resume=lambda e, n, last: resumed.append(n)
            ):
                pass
    assert refused.value.code is grpc.StatusCode.NOT_FOUND
    assert resumed == []


async def test_it_gives_up_after_its_attempts_in_a_row(omni_server: OmniServer) -> None:
    assert omni_server.grpc is not None
    async with AgentClient(omni_server.grpc.address) as direct:
        sid = await direct.run("hi").session()
        async with DroppingLink(grpc_port(omni_server)) as link:
            url = link.url.removeprefix("http://")
        # The link is closed: every attach through it fails as a lost network does.
        resumed: list[int] = []
        async with AgentClient(url) as client:
            with pytest.raises(AgentError) as gone:
                async for _ in client.follow(
                    sid, attempts=2, on_resume=lambda e, n, last: resumed.append(n)
                ):
                    pass
    assert gone.value.code is grpc.StatusCode.UNAVAILABLE
    assert resumed == [1, 2]


async def test_the_attach_command_attaches_again_after_a_dropped_link(
    omni_server: OmniServer,
) -> None:
    assert omni_server.grpc is not None
    async with (
        DroppingLink(grpc_port(omni_server)) as link,
        AgentClient(omni_server.grpc.address) as direct,
    ):
        run = direct.run("list my files", approval_mode="ask", detach_on_cancel=True)
        call_id = ""
        async for event in run:
            if event.kind == "@approval_request":
                call_id = event.server_event.approval_request.tool_call.tool_call.tool_call_id  # type: ignore[union-attr]
                break
        sid = await run.session()
        run.cancel()  # detached: the task waits on its approval without a caller
        cli = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "omni_grpc", "attach", sid, "--json",
            "--target", link.url.removeprefix("http://"),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert cli.stderr is not None and cli.stdout is not None
        said: list[str] = []

        async def read_stderr() -> None:
            assert cli.stderr is not None
            while line := await cli.stderr.readline():
                said.append(line.decode())

        reader = asyncio.create_task(read_stderr())
        out = asyncio.create_task(cli.stdout.read())
        await until(lambda: any("approval pending" in s for s in said), "the CLI's hint")
        assert link.drop() >= 1
        await until(lambda: any("attaching again" in s for s in said), "the CLI re-attaching")
        await direct.approve(sid, call_id, "allow")
        code = await asyncio.wait_for(cli.wait(), WAIT)
        printed = (await out).splitlines()
        await reader
        history = [line async for line in direct.history_lines(sid)]

    assert code == 0, "".join(said)
    assert any(f"attempt 1/{RESUME_ATTEMPTS}" in s for s in said)
    # From the approval on, exactly the trace's lines, each once (the trace
    # keeps complete messages; the live stream also has their fragments).
    complete = [line for line in printed if not is_partial(line)]
    assert len(complete) < len(printed)
    decided = next(i for i, line in enumerate(history) if b'"approval_decision"' in line)
    assert complete[complete.index(history[decided]) :] == history[decided:]


def is_partial(line: bytes) -> bool:
    kind: str = json.loads(line).get("payload", {}).get("type", "")
    return kind.startswith("partial_")
