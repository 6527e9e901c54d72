"""Nothing of a run is accepted into the log after its close (#25 point 4).

Once a run is closed (its ``task_state idle`` published with ``end_run``, by
its owner or by the replica that took it over) every later write under its
lease's token is refused with ``Fenced``: a retry of a close whose first try
landed, an owner paused past its lease coming back with queued events, a
partial a stopped engine still had in flight. The chaos run saw
``partial_tool_call_output`` and ``tool_call_output`` published after a run's
abort; the refusal is in the log's own write (one script on Redis), so it
holds whichever replica writes. On a real redis-server.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Callable, Iterator

import pytest

from omni_grpc import protocol as p
from omni_grpc.convert import message_from_dict
from omni_grpc.runtime import bodies
from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.errors import Fenced
from omni_grpc.runtime.events import EventBody
from omni_grpc.vocabulary import SessionState

WAIT = 120.0  # bounds a hang only
CALL = "call_demo_1"


def late_writes() -> list[EventBody]:
    """What a run's owner may still have queued when its run is closed."""
    return [
        bodies.message_body(message_from_dict(item))
        for item in (
            p.partial_tool_call_output("delta", "o", CALL),
            p.tool_call_output("ok", CALL),
            p.request_end("completed"),
        )
    ] + [bodies.task_state_body(SessionState.IDLE)]


async def refused_everywhere(backend: Backend, session_id: str, token: int) -> None:
    """Every late write under ``token`` is refused, one by one and as a batch,
    and the log is as it was."""
    event_log = backend.logs.get(session_id)
    before = [e.event_id for e in await event_log.window()]
    with unretrieved_reported() as reported:
        for body in late_writes():
            with pytest.raises(Fenced):
                await event_log.publish(body, fence=token)
            with pytest.raises(Fenced):
                await event_log.publish_nowait(body, fence=token)
        # The close's messages, published together after a write under the
        # token failed: refused, and the bodies after the first are refused
        # quietly (not reported later as futures whose error no one read).
        with pytest.raises(Fenced):
            await event_log.publish_many(late_writes(), fence=token)
        # Nothing holds the futures any more (the failure the log keeps for
        # the token is what holds them until its owner gives it up).
        event_log.forgive(token)
    assert reported == []
    with pytest.raises(Fenced):
        await event_log.publish(
            bodies.task_state_body(SessionState.IDLE), fence=token, end_run=True
        )
    # Another replica's view of the log holds nothing more either.
    assert [e.event_id for e in await event_log.window()] == before


@contextlib.contextmanager
def unretrieved_reported() -> Iterator[list[str]]:
    """What asyncio reports of this loop's futures (an exception no one
    retrieved is logged, with its traceback, in a replica's log)."""
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(str(context.get("message"))))
    try:
        yield reported
        gc.collect()  # a future's unretrieved exception is reported when it is freed
    finally:
        loop.set_exception_handler(previous)


@pytest.mark.parametrize("backend_kind", ["redis"])
async def test_a_run_closed_by_its_owner_accepts_nothing_more(
    make_backend: Callable[..., Backend],
) -> None:
    backend = make_backend()
    session_id = "session-2026-12-05-12-00-00-0000c125"
    lease = await backend.leases.acquire(session_id, "owner")
    assert lease is not None
    event_log = backend.logs.get(session_id)
    await event_log.publish(bodies.task_state_body(SessionState.RUNNING), fence=lease.token)
    abort = message_from_dict(p.abort_event("stopped"))
    await event_log.publish(bodies.message_body(abort), fence=lease.token)
    await event_log.publish(
        bodies.task_state_body(SessionState.IDLE), fence=lease.token, end_run=True
    )
    await refused_everywhere(make_backend(), session_id, lease.token)


@pytest.mark.parametrize("backend_kind", ["redis"])
async def test_a_run_taken_over_and_closed_accepts_nothing_of_its_owner(
    make_backend: Callable[..., Backend],
) -> None:
    backend = make_backend(owner_loss_timeout=0.5)
    session_id = "session-2026-12-05-12-00-00-0001c125"
    owner = await backend.leases.acquire(session_id, "owner")
    assert owner is not None
    event_log = backend.logs.get(session_id)
    await event_log.publish(bodies.task_state_body(SessionState.RUNNING), fence=owner.token)

    # The owner renews nothing: another replica takes the run over.
    async def orphaned() -> None:
        while session_id not in await backend.leases.orphans():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(orphaned(), WAIT)
    other = make_backend(owner_loss_timeout=0.5)
    taker = await other.leases.take_over(session_id, "closer")
    assert taker is not None and taker.token > owner.token
    # Between the take-over and the close the owner is refused already...
    await refused_everywhere(backend, session_id, owner.token)
    closing = other.logs.get(session_id)
    abort = message_from_dict(p.abort_event("taken over"))
    await closing.publish(bodies.message_body(abort), fence=taker.token)
    await closing.publish(
        bodies.task_state_body(SessionState.IDLE), fence=taker.token, end_run=True
    )
    # ...and after it, the owner and the closer alike.
    await refused_everywhere(backend, session_id, owner.token)
    await refused_everywhere(other, session_id, taker.token)
