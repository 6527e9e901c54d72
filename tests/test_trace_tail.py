"""Lining the trace up with the log (``trace_tail``), over every prefix (#25).

The owner writes each record to the trace, then publishes it to the log; a
run cut between the two leaves the trace records ahead, and whoever closes
the run publishes those records first (``trace_tail`` finds them). Records
recur byte for byte (the same message in the same millisecond), so the log's
last record can be in the trace several times. Here a trace is built over a
small alphabet of such records (so they recur as often as can be), the log
holds any prefix of it (from its start, or a window that lost its start),
with ``task_state`` events between the records, and the tail must be exactly
what the log has not got: nothing skipped, nothing twice.
"""

from __future__ import annotations

from pathlib import Path
from tempfile import TemporaryDirectory

from hypothesis import given, settings
from hypothesis import strategies as st

from omni_grpc import protocol as p
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.runtime import bodies
from omni_grpc.runtime.events import EventBody, HubEvent
from omni_grpc.runtime.recovery import trace_tail
from omni_grpc.vocabulary import SessionState

STAMP = "2026-12-05T12:00:00.000Z"  # one millisecond for all: equal records are equal bytes

ALPHABET = [
    p.user_text("go", timestamp=STAMP),
    p.request_begin(timestamp=STAMP),
    p.assistant_text("a", timestamp=STAMP),
    p.assistant_text("b", timestamp=STAMP),
    p.request_end("completed", timestamp=STAMP),
]
RECORDS = [bodies.message_body(message_from_dict(item)) for item in ALPHABET]
META = p.session_meta(
    p.session_meta_payload("session-x", "omni-grpc", "demo", "unknown", "", "", "/w"),
    timestamp=STAMP,
)
STATES = [
    bodies.task_state_body(SessionState.RUNNING),
    bodies.task_state_body(SessionState.IDLE),
]


def window_of(logged: list[EventBody], first_seq: int, states: list[int]) -> list[HubEvent]:
    """The log's events from ``first_seq`` on: ``logged``'s records, with a
    task_state before the record at each index in ``states`` (not records)."""
    out: list[HubEvent] = []
    for index, body in enumerate([*logged, None]):
        for _ in range(states.count(index)):
            out.append(_event(first_seq + len(out), STATES[index % 2]))
        if body is not None:
            out.append(_event(first_seq + len(out), body))
    return out


def _event(seq: int, body: EventBody) -> HubEvent:
    return HubEvent(seq, f"e-{seq}", body, True)


def tail_of(trace: list[int], logged: list[HubEvent], torn: bool) -> list[bytes]:
    with TemporaryDirectory() as tmp:
        path = Path(tmp) / "shard.jsonl"
        lines = [bodies.message_body(message_from_dict(META)).data]
        lines += [RECORDS[i].data for i in trace]
        text = b"".join(line + b"\n" for line in lines)
        if torn:  # a crash's half-written last line: never written whole, never seen
            text += RECORDS[0].data[:9]
        path.write_bytes(text)
        return [serialize_message(m) for m in trace_tail(path, logged)]


TRACES = st.lists(st.integers(0, len(RECORDS) - 1), max_size=24)


@settings(max_examples=400, deadline=None)
@given(data=st.data(), trace=TRACES, torn=st.booleans())
def test_a_log_with_its_start_gets_exactly_what_it_missed(
    data: st.DataObject, trace: list[int], torn: bool
) -> None:
    published = data.draw(st.integers(0, len(trace)), label="published")
    states = data.draw(st.lists(st.integers(0, published), max_size=4), label="states")
    window = window_of([RECORDS[i] for i in trace[:published]], 1, states)
    expected = [RECORDS[i].data for i in trace[published:]]
    assert tail_of(trace, window, torn) == expected


@settings(max_examples=400, deadline=None)
@given(data=st.data(), trace=TRACES)
def test_a_window_that_lost_its_start_lines_up_where_its_records_are(
    data: st.DataObject, trace: list[int]
) -> None:
    """Without the log's start the window's own records are all there is to
    go by: the tail follows a place where all of them are in the trace, and
    it is the right one whenever they are there only once."""
    published = data.draw(st.integers(0, len(trace)), label="published")
    lost = data.draw(st.integers(1, published + 1), label="lost")  # events trimmed
    kept = trace[min(lost, published) : published]
    # At least one event kept (an empty log is one that never had any).
    states = data.draw(st.lists(st.integers(0, len(kept)), min_size=1, max_size=4), label="states")
    window = window_of([RECORDS[i] for i in kept], 1 + lost, states)
    tail = tail_of(trace, window, False)
    if not kept:
        assert tail == []  # nothing to line up with
        return
    places = [
        end for end in range(len(kept), len(trace) + 1) if trace[end - len(kept) : end] == kept
    ]
    assert [[RECORDS[i].data for i in trace[end:]] for end in places].count(tail) >= 1
    if len(places) == 1:
        assert tail == [RECORDS[i].data for i in trace[published:]]


def test_the_log_s_last_record_recurring_later_is_not_where_it_lines_up() -> None:
    """The soak's case by hand: the log ends with a request_end and the trace,
    past it, holds another request_end of the same millisecond."""
    user, begin, text_a, _, end = range(5)
    trace = [user, begin, text_a, end, begin, text_a, end]
    window = window_of([RECORDS[i] for i in trace[:4]], 1, [1])
    assert tail_of(trace, window, False) == [RECORDS[i].data for i in (begin, text_a, end)]


def test_a_log_record_the_trace_does_not_hold_lines_up_nothing() -> None:
    user, begin, text_a, text_b, end = range(5)
    window = window_of([RECORDS[i] for i in (user, begin, text_b)], 1, [])
    assert tail_of([user, begin, text_a, end], window, False) == []
