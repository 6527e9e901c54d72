"""A2A tasks over the hub's runs: their ids, and a task folded from a run's events.

A task is one run of a session: its ``contextId`` is the session id and its id
``<session id>:<event id>`` names the run's first event, so any replica can
find it in the session's shared log (``Runtime.attach`` replays after the
event before it). While that first event is in the session's replay window
the task is folded from its events; after, from the task index's record of
the run (its state, and its place in the trace) and the trace's records
(``TaskView.recorded``), for the session's lifetime.

``TaskView`` folds the run's events, in order, into the A2A task and says for
each event which A2A stream events it makes (the mapping docs/a2a.md tables).
The fold is the same for a live stream, a resumed one and GetTask, so all of
them describe a task alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from a2a.types import a2a_pb2 as a2a
from google.protobuf import struct_pb2

from omni_grpc.runtime.interface import (
    HubEvent,
    TaskRecord,
    format_event_id,
    is_task_end,
    parse_event_id,
    request_failure,
    task_end,
)
from omni_grpc.transport.a2a import extension
from omni_grpc.vocabulary import AbortKind, TaskStatus
from omni_grpc_proto.omni.v1 import omni_pb2

SEPARATOR = ":"
TERMINAL = frozenset({a2a.TASK_STATE_COMPLETED, a2a.TASK_STATE_FAILED, a2a.TASK_STATE_CANCELED})
# States in which SendMessage returns without waiting for the end.
INTERRUPTED = frozenset({a2a.TASK_STATE_INPUT_REQUIRED})
# Who ended a run, as A2A tells it: a client's abort cancels; anything else fails.
# What a run's event makes on an A2A stream.
Event = a2a.TaskStatusUpdateEvent | a2a.TaskArtifactUpdateEvent


@dataclass(frozen=True)
class TaskRef:
    session_id: str
    # The id of the run's first event.
    event_id: str

    @property
    def task_id(self) -> str:
        return f"{self.session_id}{SEPARATOR}{self.event_id}"

    @property
    def seq(self) -> int:
        parsed = parse_event_id(self.event_id)
        assert parsed is not None
        return parsed[1]

    def replay_after(self) -> str:
        """The event id whose replay starts with this task's first event."""
        parsed = parse_event_id(self.event_id)
        assert parsed is not None
        return format_event_id(parsed[0], parsed[1] - 1)


def parse_task_id(task_id: str) -> TaskRef | None:
    session_id, sep, event_id = task_id.partition(SEPARATOR)
    parsed = parse_event_id(event_id)
    if not sep or not session_id or parsed is None or parsed[1] < 1:
        return None
    return TaskRef(session_id, event_id)


def data_value(obj: Mapping[str, Mapping[str, str]]) -> struct_pb2.Value:
    value = struct_pb2.Value()
    value.struct_value.update(obj)
    return value


@dataclass
class _Fragment:
    """An open text or thinking fragment: its artifact and the delta held back,
    so the last one can carry ``lastChunk``."""

    artifact_id: str
    name: str
    sent: int = 0
    held: str | None = None


@dataclass
class TaskView:
    ref: TaskRef
    # The lossless extension is active for this client.
    lossless: bool = False
    # Whether history and the artifacts' contents are kept for ``task()``
    # (see ``streaming``).
    keep_contents: bool = True
    state: int = a2a.TASK_STATE_SUBMITTED
    status_message: a2a.Message | None = None
    history: list[a2a.Message] = field(default_factory=list)
    artifacts: dict[str, a2a.Artifact] = field(default_factory=dict)
    # Tool calls waiting for a decision, by tool_call_id.
    pending: dict[str, omni_pb2.OmniMessage] = field(default_factory=dict)
    ended: bool = False
    _decided: set[str] = field(default_factory=set)
    _started: bool = False
    _open: dict[str, _Fragment] = field(default_factory=dict)
    # The kind of the fragment just closed: its complete message repeats it.
    _streamed: set[str] = field(default_factory=set)
    _count: int = 0
    _abort: tuple[AbortKind | None, str] | None = None
    _failure: str | None = None
    _timestamp: str = ""
    # The id the client gave the message that started the task: its first
    # history entry keeps it.
    client_message_id: str | None = None

    @property
    def task_id(self) -> str:
        return self.ref.task_id

    @property
    def timestamp(self) -> str:
        """The newest message's timestamp text (ISO 8601 UTC, so it sorts)."""
        return self._timestamp

    @property
    def context_id(self) -> str:
        return self.ref.session_id

    def streaming(self) -> None:
        """The stream has sent the task whole: from here it sends only each
        event's own update, so the history (the prompt among it) and the
        artifacts' text so far are let go rather than held, each large
        message a second and third time, to the task's end."""
        self.keep_contents = False
        del self.history[:]
        for artifact in self.artifacts.values():
            del artifact.parts[:]

    def task(self, history_length: int | None = None) -> a2a.Task:
        history = self.history
        if history_length is not None:
            history = history[-history_length:] if history_length > 0 else []
        return a2a.Task(
            id=self.task_id,
            context_id=self.context_id,
            status=self._status(),
            artifacts=list(self.artifacts.values()),
            history=history,
        )

    def _status(self) -> a2a.TaskStatus:
        status = a2a.TaskStatus(state=self.state)  # type: ignore[arg-type]
        if self.status_message is not None:
            status.message.CopyFrom(self.status_message)
        if self._timestamp:
            try:
                status.timestamp.FromJsonString(self._timestamp)
            except ValueError:
                status.ClearField("timestamp")  # a timestamp the engine spelled oddly
        return status

    # ---- the fold -----------------------------------------------------------------

    def apply(self, event: HubEvent) -> list[Event]:
        """Folds ``event`` in; the A2A events it makes, in order."""
        if self.ended:
            return []
        out: list[Event] = []
        msg = event.message
        if msg is not None:
            self._stamp(msg)
            if self.lossless:
                out.append(
                    self._chunk(
                        extension.ARTIFACT_ID,
                        "omni-messages",
                        [extension.message_part(event.event_id, event.data)],
                        append=extension.ARTIFACT_ID in self.artifacts,
                        last=False,
                    )
                )
            if not msg.origin:
                out.extend(self._message(event, msg))
            return out
        server_event = event.server_event
        if server_event is None:
            return out
        if is_task_end(event):
            return out + self._end(event)
        kind = server_event.WhichOneof("kind")
        if kind == "task_state" and not self._started:
            self._started = True
            if self.state == a2a.TASK_STATE_SUBMITTED:
                self.state = a2a.TASK_STATE_WORKING
                out.append(self._status_update())
        elif kind == "approval_request":
            out.extend(self._ask(event.event_id, server_event.approval_request.tool_call))
        return out

    def _stamp(self, msg: omni_pb2.OmniMessage) -> None:
        if msg.timestamp:
            self._timestamp = msg.timestamp

    def recorded(self, record: TaskRecord, messages: list[omni_pb2.OmniMessage]) -> None:
        """The task from its record in the task index and its records in the
        trace (``messages``, from ``first_record``): for a task whose first
        event has left the replay window. The trace has no partials and no
        event ids (each message is named by its record number), and the
        state is the record's."""
        self.client_message_id = record.message_id
        # Tool calls the trace has neither a decision nor an output for.
        undecided: dict[str, omni_pb2.OmniMessage] = {}
        for number, msg in enumerate(messages, start=record.first_record or 1):
            if msg.origin:
                continue
            if not self._started and not _is_input(msg):
                self._started = True
            self._stamp(msg)
            self._message_as(f"record-{number}", None, msg)
            arm = msg.WhichOneof("payload")
            if arm == "tool_call":
                undecided[msg.tool_call.tool_call_id] = msg
            elif arm == "tool_call_output":
                undecided.pop(msg.tool_call_output.tool_call_id, None)
        self.pending.clear()
        status = TaskStatus(record.state)
        if status is TaskStatus.INPUT_REQUIRED:
            # What it waits on (the approval requests themselves are events,
            # not records): so an answer to it can name or omit the call.
            self.pending.update(
                (call_id, msg) for call_id, msg in undecided.items() if call_id not in self._decided
            )
        self.state = _STATES[status]
        self.ended = status.ended
        self._timestamp = record.updated_at
        self.status_message = None
        if record.reason is not None:
            said = self._said(record.last_event_id, a2a.ROLE_AGENT, [a2a.Part(text=record.reason)])
            self.status_message = said
            self.history.append(said)

    def _message(self, event: HubEvent, msg: omni_pb2.OmniMessage) -> list[Event]:
        return self._message_as(event.event_id, event.abort_kind, msg)

    def _message_as(
        self, event_id: str, abort_kind: AbortKind | None, msg: omni_pb2.OmniMessage
    ) -> list[Event]:
        arm = msg.WhichOneof("payload")
        if not self._started:
            if not self.keep_contents:
                return []
            part = _input_part(msg)
            if part is not None:
                said = self._said(event_id, a2a.ROLE_USER, [part])
                if not self.history and self.client_message_id:
                    said.message_id = self.client_message_id
                self.history.append(said)
            return []
        if arm == "partial_text" and msg.partial_text.role == omni_pb2.ROLE_ASSISTANT:
            return self._partial("text", msg.partial_text.event_type, msg.partial_text.text)
        if arm == "partial_thinking":
            return self._partial(
                "thinking", msg.partial_thinking.event_type, msg.partial_thinking.thinking
            )
        if arm == "text" and msg.text.role == omni_pb2.ROLE_ASSISTANT:
            return self._whole("text", msg.text.text)
        if arm == "thinking":
            return self._whole("thinking", msg.thinking.thinking)
        if arm == "tool_call":
            call = msg.tool_call
            data = {
                "toolCall": {
                    "toolCallId": call.tool_call_id,
                    "name": call.name,
                    "arguments": call.arguments,
                }
            }
            return [
                self._status_update(
                    self._said(event_id, a2a.ROLE_AGENT, [a2a.Part(data=data_value(data))])
                )
            ]
        if arm == "tool_call_output":
            output = msg.tool_call_output
            data = {"toolCallOutput": {"toolCallId": output.tool_call_id, "output": output.output}}
            return [
                self._status_update(
                    self._said(event_id, a2a.ROLE_AGENT, [a2a.Part(data=data_value(data))])
                )
            ]
        if arm == "approval_decision":
            return self._decided_on(event_id, msg.approval_decision)
        if arm == "abort":
            self._abort = (abort_kind, msg.abort.reason or "aborted")
        elif arm == "request_end":
            # None again for a retried request that then succeeded.
            self._failure = request_failure(msg.request_end)
        return []

    def _partial(self, name: str, event_type: int, text: str) -> list[Event]:
        out: list[Event] = []
        if event_type == omni_pb2.EVENT_TYPE_START:
            self._count += 1
            self._open[name] = _Fragment(f"{name}-{self._count}", name)
            self._streamed.discard(name)
            return out
        fragment = self._open.get(name)
        if fragment is None:
            return out
        if event_type == omni_pb2.EVENT_TYPE_DELTA:
            if text:
                if fragment.held is not None:
                    out.append(self._fragment_chunk(fragment, last=False))
                fragment.held = text
        elif event_type == omni_pb2.EVENT_TYPE_STOP:
            del self._open[name]
            if fragment.held is not None:
                out.append(self._fragment_chunk(fragment, last=True))
                self._streamed.add(name)
        return out

    def _fragment_chunk(self, fragment: _Fragment, *, last: bool) -> Event:
        assert fragment.held is not None
        chunk = self._chunk(
            fragment.artifact_id,
            fragment.name,
            [a2a.Part(text=fragment.held)],
            append=fragment.sent > 0,
            last=last,
        )
        fragment.sent += 1
        fragment.held = None
        return chunk

    def _whole(self, name: str, text: str) -> list[Event]:
        if name in self._streamed:  # the complete message after its fragment
            self._streamed.discard(name)
            return []
        if not text:
            return []
        self._count += 1
        return [
            self._chunk(
                f"{name}-{self._count}", name, [a2a.Part(text=text)], append=False, last=True
            )
        ]

    def _chunk(
        self, artifact_id: str, name: str, parts: list[a2a.Part], *, append: bool, last: bool
    ) -> Event:
        artifact = self.artifacts.get(artifact_id)
        if artifact is None:
            artifact = self.artifacts[artifact_id] = a2a.Artifact(
                artifact_id=artifact_id, name=name
            )
        for part in parts if self.keep_contents else ():
            tail = artifact.parts[-1] if artifact.parts else None
            if tail is not None and tail.HasField("text") and part.HasField("text"):
                tail.text += part.text  # the task holds the text whole; the stream its chunks
            else:
                artifact.parts.append(part)
        update = a2a.TaskArtifactUpdateEvent(
            task_id=self.task_id,
            context_id=self.context_id,
            artifact=a2a.Artifact(artifact_id=artifact_id, name=name, parts=parts),
            append=append,
            last_chunk=last,
        )
        return update

    def _ask(self, event_id: str, call_msg: omni_pb2.OmniMessage) -> list[Event]:
        call = call_msg.tool_call
        if call.tool_call_id in self.pending or call.tool_call_id in self._decided:
            return []  # an attach's snapshot repeats the asks it replayed
        self.pending[call.tool_call_id] = call_msg
        self.state = a2a.TASK_STATE_INPUT_REQUIRED
        data = {
            "approvalRequest": {
                "toolCallId": call.tool_call_id,
                "name": call.name,
                "arguments": call.arguments,
            }
        }
        text = (
            f"Approve the tool call {call.name}({call.arguments})? Answer with a message on"
            f' this task whose data part is {{"toolCallId": "{call.tool_call_id}",'
            ' "decision": "allow"} (or "deny").'
        )
        said = self._said(
            event_id, a2a.ROLE_AGENT, [a2a.Part(text=text), a2a.Part(data=data_value(data))]
        )
        return [self._status_update(said)]

    def _decided_on(self, event_id: str, decision: omni_pb2.ApprovalDecision) -> list[Event]:
        self._decided.add(decision.tool_call_id)
        self.pending.pop(decision.tool_call_id, None)
        if not self.pending and self.state == a2a.TASK_STATE_INPUT_REQUIRED:
            self.state = a2a.TASK_STATE_WORKING
        word = omni_pb2.Decision.Name(decision.decision).removeprefix("DECISION_").lower()
        data = {"approvalDecision": {"toolCallId": decision.tool_call_id, "decision": word}}
        return [
            self._status_update(
                self._said(event_id, a2a.ROLE_AGENT, [a2a.Part(data=data_value(data))])
            )
        ]

    def _end(self, event: HubEvent) -> list[Event]:
        out: list[Event] = []
        for fragment in list(self._open.values()):
            if fragment.held is not None:
                out.append(self._fragment_chunk(fragment, last=True))
        self._open.clear()
        self.pending.clear()
        failure = event.failure.message if event.failure is not None else None
        status, reason = task_end(failure, self._abort, self._failure)
        self.state = _STATES[status]
        # A finished task's answer is in its artifacts; a status message is why it did not finish.
        self.status_message = None
        said = None
        if reason is not None:
            said = self._said(event.event_id, a2a.ROLE_AGENT, [a2a.Part(text=reason)])
        self.ended = True
        out.append(self._status_update(said))
        return out

    def _status_update(self, said: a2a.Message | None = None) -> Event:
        if said is not None:
            self.status_message = said
            if self.keep_contents:
                self.history.append(said)
        update = a2a.TaskStatusUpdateEvent(
            task_id=self.task_id, context_id=self.context_id, status=self._status()
        )
        return update

    def _said(self, event_id: str, role: int, parts: list[a2a.Part]) -> a2a.Message:
        return a2a.Message(
            message_id=f"{self.task_id}/{event_id}",
            context_id=self.context_id,
            task_id=self.task_id,
            role=role,  # type: ignore[arg-type]
            parts=parts,
        )


_STATES = {
    TaskStatus.WORKING: a2a.TASK_STATE_WORKING,
    TaskStatus.INPUT_REQUIRED: a2a.TASK_STATE_INPUT_REQUIRED,
    TaskStatus.COMPLETED: a2a.TASK_STATE_COMPLETED,
    TaskStatus.CANCELED: a2a.TASK_STATE_CANCELED,
    TaskStatus.FAILED: a2a.TASK_STATE_FAILED,
}
# A2A's TaskState for each state the task index keeps, and back (ListTasks' filter).
STATUS_OF = {state: status for status, state in _STATES.items()}


def _input_part(msg: omni_pb2.OmniMessage) -> a2a.Part | None:
    """A run input's A2A part (the user's text, an image URL); None for anything else."""
    arm = msg.WhichOneof("payload")
    if arm == "text" and msg.text.role == omni_pb2.ROLE_USER:
        return a2a.Part(text=msg.text.text)
    if arm == "image_url":
        return a2a.Part(url=msg.image_url.image_url)
    return None


def _is_input(msg: omni_pb2.OmniMessage) -> bool:
    return _input_part(msg) is not None
