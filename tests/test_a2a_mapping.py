"""The A2A fold (transport/a2a/tasks.py) for the class of streams an engine
makes: any interleaving of text and thinking fragments, deltas of any text
(empty, non-ASCII, astral), fragments with no deltas, complete messages with
and without fragments before them. Whatever the stream, a client that puts
the chunks together the A2A way gets exactly the complete texts, GetTask's
artifacts hold the same, and the lossless artifact holds every message."""

from __future__ import annotations

from a2a.types import a2a_pb2 as a2a
from a2a_support import artifact_texts
from hypothesis import given, settings
from hypothesis import strategies as st

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.runtime import bodies
from omni_grpc.runtime.events import HubEvent
from omni_grpc.transport.a2a import extension
from omni_grpc.transport.a2a.tasks import TaskRef, TaskView
from omni_grpc.vocabulary import AbortKind, SessionState, StopReason

EPOCH = "e0"
# One fragment: its kind, its deltas, and whether it is streamed at all.
fragment = st.tuples(
    st.sampled_from(["text", "thinking"]),
    st.lists(st.text(max_size=6), max_size=6),
    st.booleans(),
)


def events_of(messages: list[dict[str, object]], end: bodies.EventBody) -> list[HubEvent]:
    out = []
    body_list = [bodies.message_body(message_from_dict(m)) for m in messages]
    body_list.insert(1, bodies.task_state_body(SessionState.RUNNING))
    body_list.append(end)
    for seq, body in enumerate(body_list, start=1):
        out.append(HubEvent(seq, f"{EPOCH}-{seq}", body, True, seq - 1))
    return out


def stream(
    fragments: list[tuple[str, list[str], bool]],
) -> tuple[list[dict[str, object]], dict[str, list[str]]]:
    messages: list[dict[str, object]] = [protocol.user_text("go")]
    complete: dict[str, list[str]] = {"text": [], "thinking": []}
    for kind, deltas, streamed in fragments:
        whole = "".join(deltas)
        if streamed:
            partial = protocol.partial_text if kind == "text" else protocol.partial_thinking
            messages.append(partial("start"))
            messages += [partial("delta", d) for d in deltas]
            messages.append(partial("stop"))
        build = protocol.assistant_text if kind == "text" else protocol.thinking
        messages.append(build(whole))
        if whole:
            complete[kind].append(whole)
    messages.append(protocol.request_end(StopReason.COMPLETED))
    return messages, complete


@settings(max_examples=150, deadline=None)
@given(st.lists(fragment, max_size=6), st.booleans())
def test_chunks_put_together_are_the_complete_texts(
    fragments: list[tuple[str, list[str], bool]], lossless: bool
) -> None:
    messages, complete = stream(fragments)
    events = events_of(messages, bodies.task_state_body(SessionState.IDLE))
    view = TaskView(TaskRef("s", f"{EPOCH}-1"), lossless=lossless)
    updates: list[a2a.StreamResponse] = []
    for event in events:
        for update in view.apply(event):
            if isinstance(update, a2a.TaskArtifactUpdateEvent):
                updates.append(a2a.StreamResponse(artifact_update=update))
            else:
                updates.append(a2a.StreamResponse(status_update=update))
    assert view.ended and view.state == a2a.TASK_STATE_COMPLETED
    for kind in ("text", "thinking"):
        assert artifact_texts(updates, kind) == complete[kind]
        held = [a for a in view.task().artifacts if a.name == kind]
        assert ["".join(p.text for p in a.parts) for a in held] == complete[kind]
        assert all(len(a.parts) == 1 for a in held)  # the task holds each text whole
    carried = [a for a in view.task().artifacts if a.artifact_id == extension.ARTIFACT_ID]
    if lossless:
        [omni] = carried
        expected = [e.data for e in events if e.body.is_message]
        got = [p.data.struct_value.fields["json"].string_value.encode() for p in omni.parts]
        assert got == expected
        ids = [p.data.struct_value.fields["eventId"].string_value for p in omni.parts]
        assert ids == [e.event_id for e in events if e.body.is_message]
    else:
        assert carried == []


@given(st.sampled_from(list(AbortKind)), st.booleans())
def test_how_a_run_ends_is_the_task_state(kind: AbortKind, failed_first: bool) -> None:
    messages: list[dict[str, object]] = [protocol.user_text("go")]
    if failed_first:
        messages.append(protocol.request_end(StopReason.FAILED, error_message="boom"))
    messages.append(protocol.abort_event("stopped"))
    events = events_of(messages, bodies.task_state_body(SessionState.IDLE))
    events[-2] = HubEvent(
        events[-2].seq, events[-2].event_id, bodies.with_abort_kind(events[-2].body, kind), True
    )
    view = TaskView(TaskRef("s", f"{EPOCH}-1"))
    for event in events:
        view.apply(event)
    cancel = kind in (AbortKind.USER, AbortKind.CLIENT_GONE)
    assert view.state == (a2a.TASK_STATE_CANCELED if cancel else a2a.TASK_STATE_FAILED)
    assert view.task().status.message.parts[0].text == "stopped"


def test_a_failed_request_without_abort_fails_the_task_and_a_retry_that_succeeds_does_not() -> None:
    for ends, state in (
        ([StopReason.FAILED], a2a.TASK_STATE_FAILED),
        ([StopReason.TIMEOUT, StopReason.COMPLETED], a2a.TASK_STATE_COMPLETED),
    ):
        messages: list[dict[str, object]] = [protocol.user_text("go")]
        for stop in ends:
            failed = stop != StopReason.COMPLETED
            messages.append(protocol.request_end(stop, error_message="x" if failed else None))
        view = TaskView(TaskRef("s", f"{EPOCH}-1"))
        for event in events_of(messages, bodies.task_state_body(SessionState.IDLE)):
            view.apply(event)
        assert view.state == state
