"""The A2A methods over the hub, once for every binding (the SDK's ``RequestHandler``).

The SDK's JSON-RPC, HTTP+JSON and gRPC front ends decode each request and call
these methods; they answer from the hub alone (no task store of their own), so
a task started over A2A is the same run AgentService and SSE clients see, on
any replica. Streams never abort their run when the client goes away (an A2A
task outlives its connection: SubscribeToTask picks it up again); CancelTask
does.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from datetime import UTC
from typing import NoReturn

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types import a2a_pb2 as a2a
from a2a.utils.errors import (
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf import json_format

from omni_grpc.protocol.run_input import InputProblem, check_run_input
from omni_grpc.runtime.errors import HubError, InvalidRequest, SessionNotFound
from omni_grpc.runtime.interface import (
    HubEvent,
    RunRequest,
    Runtime,
    Subscription,
    TaskRecord,
    is_task_end,
)
from omni_grpc.transport.a2a import extension, inputs
from omni_grpc.transport.a2a.errors import a2a_error, invalid
from omni_grpc.transport.a2a.tasks import (
    INTERRUPTED,
    STATUS_OF,
    TERMINAL,
    TaskRef,
    TaskView,
    parse_task_id,
)
from omni_grpc.vocabulary import AbortKind, TaskStatus
from omni_grpc_proto.omni.v1 import omni_pb2

CANCEL_REASON = "canceled by an A2A client"
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
_FIELDS = {"session_id": "message.contextId"}
StreamEvent = a2a.Task | a2a.TaskStatusUpdateEvent | a2a.TaskArtifactUpdateEvent


class HubRequestHandler(RequestHandler):
    def __init__(self, hub: Runtime, card: a2a.AgentCard) -> None:
        self.hub = hub
        self.card = card

    # ---- sending --------------------------------------------------------------------

    async def on_message_send(
        self, params: a2a.SendMessageRequest, context: ServerCallContext
    ) -> a2a.Task:
        view, sub = await self._send(params, context)
        try:
            if not params.configuration.return_immediately:
                await _follow(view, sub, until=TERMINAL | INTERRUPTED)
        finally:
            sub.close()
        return view.task(_history_length(params.configuration))

    async def on_message_send_stream(
        self, params: a2a.SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[StreamEvent]:
        view, sub = await self._send(params, context)
        # The request is in the run by now; this generator lasts as long as the
        # run, and for a large message its request is one of the message's copies.
        del params
        async for event in _stream(view, sub, until=TERMINAL | INTERRUPTED):
            yield event

    async def _send(
        self, params: a2a.SendMessageRequest, context: ServerCallContext
    ) -> tuple[TaskView, Subscription]:
        message = params.message
        if not message.message_id:
            raise invalid("message.messageId", "is required")
        inputs.check_sender(message)
        _history_length(params.configuration)  # refused before anything runs
        lossless = extension.URI in context.requested_extensions
        if message.task_id:
            return await self._answer(message, lossless)
        metadata = json_format.MessageToDict(params.metadata)
        metadata.update(json_format.MessageToDict(message.metadata))
        request = RunRequest(
            input=inputs.run_input(message),
            session_id=message.context_id or None,
            thinking_level=inputs.thinking_level(metadata),
            approval_mode=inputs.approval_mode(metadata),
            message_id=message.message_id,
        )
        try:
            check_run_input(request.input)
        except InputProblem as exc:
            raise invalid(f"message.{exc.field}", exc.reason) from None
        try:
            await self._check_context(request.session_id)
            session_id, sub = await self.hub.run(request)
        except InvalidRequest as exc:
            # The hub names its own fields; an A2A client knows them by A2A's names.
            field = _FIELDS.get(exc.field, exc.field)
            raise invalid(field, exc.description) from None
        except HubError as exc:
            raise a2a_error(exc) from None
        first = await _next(sub)
        if first is None:
            sub.close()
            raise a2a_error(HubError("the server stopped before the task started"))
        view = TaskView(TaskRef(session_id, first.event_id), lossless=lossless)
        view.client_message_id = message.message_id
        view.apply(first)
        return view, sub

    async def _check_context(self, session_id: str | None) -> None:
        if session_id is None:
            return
        try:
            await self.hub.require_session(session_id)
        except HubError as exc:
            if isinstance(exc, SessionNotFound):
                raise invalid(
                    "message.contextId",
                    f"no context {session_id!r} here (leave it out to start one)",
                ) from None
            raise

    async def _answer(self, message: a2a.Message, lossless: bool) -> tuple[TaskView, Subscription]:
        """A message to an existing task: the answer to its approval request."""
        ref = _ref(message.task_id)
        if message.context_id and message.context_id != ref.session_id:
            raise invalid("message.contextId", f"task {message.task_id!r} is in another context")
        view, sub = await self._open(ref, lossless)
        try:
            if view.ended:
                raise UnsupportedOperationError(
                    f"task {ref.task_id!r} has ended;"
                    " send a message without taskId to start another"
                )
            if view.state != a2a.TASK_STATE_INPUT_REQUIRED:
                raise invalid(
                    "message.taskId", "the task takes a message only while it waits for approval"
                )
            answer = inputs.answer(message)
            call_id = answer.tool_call_id
            if call_id is None:
                if len(view.pending) != 1:
                    raise invalid(
                        "message.parts", "name the toolCallId: several calls wait for approval"
                    )
                call_id = next(iter(view.pending))
            await self.hub.approve(ref.session_id, call_id, answer.decision.value)
            # Up to the decision, so what the caller gets next is the task going on.
            while call_id in view.pending and not view.ended:
                event = await _next(sub)
                if event is None:
                    break
                view.apply(event)
        except HubError as exc:
            sub.close()
            raise a2a_error(exc) from None
        except BaseException:
            sub.close()
            raise
        return view, sub

    # ---- tasks ------------------------------------------------------------------------

    async def on_get_task(self, params: a2a.GetTaskRequest, context: ServerCallContext) -> a2a.Task:
        length = _checked_length(params.history_length, params.HasField("history_length"))
        view = await self._view(_ref(params.id), extension.URI in context.requested_extensions)
        return view.task(length)

    async def _view(self, ref: TaskRef, lossless: bool) -> TaskView:
        """The task as the session's replay window tells it, else as its record
        and the trace do (no stream held)."""
        try:
            record = await self.hub.task_record(ref.session_id, ref.event_id)
            views = await _Views(self.hub, lossless).of([record] if record else [], ref)
        except HubError as exc:
            raise a2a_error(exc) from None
        if not views:
            raise _not_found(ref.task_id)
        return views[0]

    async def on_list_tasks(
        self, params: a2a.ListTasksRequest, context: ServerCallContext
    ) -> a2a.ListTasksResponse:
        size = params.page_size if params.HasField("page_size") else DEFAULT_PAGE_SIZE
        if not 1 <= size <= MAX_PAGE_SIZE:
            raise invalid("pageSize", f"must be between 1 and {MAX_PAGE_SIZE}")
        if params.status not in a2a.TaskState.values():
            raise invalid("status", f"{params.status} is not a TaskState")
        length = _checked_length(params.history_length, params.HasField("history_length"))
        lossless = extension.URI in context.requested_extensions
        start = 0
        if params.page_token:
            if not params.page_token.isdigit():
                raise invalid("pageToken", "not a token ListTasks gave out")
            start = int(params.page_token)
        status = STATUS_OF.get(params.status) if params.status else None
        if params.status and status is None:
            # SUBMITTED and the like: a state no task is kept in.
            return a2a.ListTasksResponse(page_size=size, total_size=0)
        after = None
        if params.HasField("status_timestamp_after"):
            after = params.status_timestamp_after.ToDatetime(tzinfo=UTC).timestamp()
        try:
            # Newest first, as the SDK's own store lists them; a context that
            # matches nothing lists no tasks (a filter, not an address).
            records, total = await self.hub.task_records(
                session_id=params.context_id or None,
                state=status,
                updated_after=after,
                offset=start,
                limit=size,
            )
            views = await _Views(self.hub, lossless).of(records)
        except HubError as exc:
            raise a2a_error(exc) from None
        tasks = [v.task(length) for v in views]
        if not params.include_artifacts:
            for task in tasks:
                del task.artifacts[:]
        following = start + size
        return a2a.ListTasksResponse(
            tasks=tasks,
            next_page_token=str(following) if following < total else "",
            page_size=size,
            total_size=total,
        )

    async def on_cancel_task(
        self, params: a2a.CancelTaskRequest, context: ServerCallContext
    ) -> a2a.Task:
        ref = _ref(params.id)
        lossless = extension.URI in context.requested_extensions
        if await self._ended(ref):
            raise TaskNotCancelableError(f"task {ref.task_id!r} has already ended")
        try:
            view, sub = await self._open(ref, lossless)
        except TaskNotFoundError:
            return await self._cancel_late(ref, lossless)
        try:
            if view.ended:
                raise TaskNotCancelableError(f"task {ref.task_id!r} has already ended")
            try:
                await self.hub.abort(ref.session_id, CANCEL_REASON, AbortKind.USER)
            except HubError as exc:
                raise a2a_error(exc) from None
            await _follow(view, sub, until=TERMINAL)
        finally:
            sub.close()
        return view.task()

    async def _cancel_late(self, ref: TaskRef, lossless: bool) -> a2a.Task:
        """CancelTask of a running task whose start left the replay window: the
        session runs one task at a time, so the running one is this one; it
        is aborted, and the task told as it ended (from its record and the
        trace) once the run's end is out."""
        try:
            record = await self.hub.task_record(ref.session_id, ref.event_id)
            if record is None or TaskStatus(record.state).ended:
                raise _not_found(ref.task_id)
            sub = await self.hub.attach(ref.session_id, None)
        except HubError as exc:
            raise a2a_error(exc) from None
        try:
            if await self.hub.abort(ref.session_id, CANCEL_REASON, AbortKind.USER):
                while (event := await _next(sub)) is not None and not is_task_end(event):
                    pass
        except HubError as exc:
            raise a2a_error(exc) from None
        finally:
            sub.close()
        return (await self._view(ref, lossless)).task()

    async def on_subscribe_to_task(
        self, params: a2a.SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[StreamEvent]:
        ref = _ref(params.id)
        if await self._ended(ref):
            raise UnsupportedOperationError(f"task {ref.task_id!r} has ended; GetTask returns it")
        view, sub = await self._open(ref, extension.URI in context.requested_extensions)
        if view.ended:
            sub.close()
            raise UnsupportedOperationError(f"task {ref.task_id!r} has ended; GetTask returns it")
        async for event in _stream(view, sub, until=TERMINAL):
            yield event

    async def _ended(self, ref: TaskRef) -> bool:
        """Whether the task index has the task as ended (its start may have
        left the window; an unknown task is ``_open``'s to refuse)."""
        try:
            record = await self.hub.task_record(ref.session_id, ref.event_id)
        except HubError as exc:
            raise a2a_error(exc) from None
        return record is not None and TaskStatus(record.state).ended

    async def _open(self, ref: TaskRef, lossless: bool) -> tuple[TaskView, Subscription]:
        """A subscription from the task's first event, its replay folded in: the
        view is up to date and the subscription goes on live from there."""
        try:
            sub = await self.hub.attach(ref.session_id, ref.replay_after())
        except HubError as exc:
            raise a2a_error(exc) from None
        view = TaskView(ref, lossless=lossless)
        try:
            record = await self.hub.task_record(ref.session_id, ref.event_id)
            view.client_message_id = record.message_id if record else None
            first = await _next(sub)
            if first is None or first.seq != ref.seq or not first.buffered:
                if first is None or first.buffered or not _waiting(record):
                    raise _not_found(ref.task_id)
                # Its start left the window (the attach resynced): a task
                # waiting for a decision publishes nothing until it gets
                # one, so its record and trace, then the live stream from
                # this attach's snapshot on, tell it without a gap.
                assert record is not None
                (view,) = await _Views(self.hub, lossless).of([record])
                await _to_snapshot(sub)
                return view, sub
            view.apply(first)
            while not view.ended:
                event = await _next(sub)
                if event is None:
                    break
                if not event.buffered and _is_task_state(event):
                    break  # the attach's snapshot: the replay is over, live from here
                view.apply(event)
        except BaseException:
            sub.close()
            raise
        return view, sub

    # ---- what this server does not offer -----------------------------------------------

    async def on_create_task_push_notification_config(
        self, params: a2a.TaskPushNotificationConfig, context: ServerCallContext
    ) -> a2a.TaskPushNotificationConfig:
        _no_push()

    async def on_get_task_push_notification_config(
        self, params: a2a.GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> a2a.TaskPushNotificationConfig:
        _no_push()

    async def on_list_task_push_notification_configs(
        self, params: a2a.ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> a2a.ListTaskPushNotificationConfigsResponse:
        _no_push()

    async def on_delete_task_push_notification_config(
        self, params: a2a.DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        _no_push()

    async def on_get_extended_agent_card(
        self, params: a2a.GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> a2a.AgentCard:
        raise UnsupportedOperationError("this agent has no extended card")


def _no_push() -> NoReturn:
    raise PushNotificationNotSupportedError()


def _ref(task_id: str) -> TaskRef:
    if not task_id:
        raise invalid("id", "is required")
    ref = parse_task_id(task_id)
    if ref is None:
        raise _not_found(task_id)
    return ref


def _not_found(task_id: str) -> TaskNotFoundError:
    return TaskNotFoundError(
        f"no task {task_id!r} here (a task is found for its context's lifetime)"
    )


def _history_length(configuration: a2a.SendMessageConfiguration) -> int | None:
    return _checked_length(configuration.history_length, configuration.HasField("history_length"))


def _checked_length(length: int, present: bool) -> int | None:
    """``historyLength`` as asked (None: all of it); a negative one is refused
    (A2A 1.0, section 6.5's validation example: "Must be non-negative integer")."""
    if not present:
        return None
    if length < 0:
        raise invalid("historyLength", f"must be 0 or more, not {length}")
    return length


def _waiting(record: TaskRecord | None) -> bool:
    return record is not None and TaskStatus(record.state) is TaskStatus.INPUT_REQUIRED


async def _to_snapshot(sub: Subscription) -> None:
    """Past the attach's own events up to its task state snapshot (a resync's
    first): what follows is the pending approvals, then the live stream."""
    while (event := await _next(sub)) is not None:
        if not event.buffered and _is_task_state(event):
            return


def _is_task_state(event: HubEvent) -> bool:
    server_event = event.server_event
    return server_event is not None and server_event.WhichOneof("kind") == "task_state"


async def _next(sub: Subscription) -> HubEvent | None:
    try:
        return await sub.next()
    except HubError as exc:  # the shared log went away
        raise a2a_error(exc) from None


async def _follow(view: TaskView, sub: Subscription, *, until: frozenset[int]) -> None:
    while not view.ended and view.state not in until:
        event = await _next(sub)
        if event is None:
            return
        view.apply(event)


async def _stream(
    view: TaskView, sub: Subscription, *, until: frozenset[int]
) -> AsyncGenerator[StreamEvent]:
    """The task as it is, then its events until it ends or reaches a state of
    ``until`` (or the client leaves).

    A message's stream stops where SendMessage would return: at the end, or
    when the task waits for input (A2A 1.0, section 11.7: events "until the
    task reaches a terminal or interrupted state, at which point the stream
    closes"; the Python SDK's event consumer stops there too). The client
    answers with another message, whose stream goes on from there, or follows
    the task with SubscribeToTask, which stays open to the terminal state
    (section 3.1.6), across the waits; a wait is bounded by the approval
    timeout (``--max-approval-wait``), so that stream ends too.
    """
    try:
        yield view.task()
        view.streaming()
        while not view.ended and view.state not in until:
            event = await _next(sub)
            if event is None:
                return
            for update in view.apply(event):
                yield update
    finally:
        sub.close()


class _Views:
    """Tasks for their records: each folded from its session's replay window
    while its first event is there, else from its record and the trace. Each
    session's window, and trace, is read once, and of the trace only the
    records of the tasks asked are kept (a trace may hold large messages)."""

    def __init__(self, hub: Runtime, lossless: bool) -> None:
        self.hub = hub
        self.lossless = lossless
        self._windows: dict[str, dict[TaskRef, TaskView]] = {}

    async def of(self, records: list[TaskRecord], ref: TaskRef | None = None) -> list[TaskView]:
        """``ref``: a task asked for by id, looked for in the window even
        without a record (a run the index missed)."""
        if ref is not None and not records:
            try:
                found = (await self._window(ref.session_id)).get(ref)
            except SessionNotFound:
                return []  # a deleted context's tasks are gone with it
            return [found] if found is not None else []
        views: dict[str, TaskView] = {}
        older: dict[str, list[TaskRecord]] = {}
        for record in records:
            task = TaskRef(record.session_id, record.event_id)
            try:
                view = (await self._window(record.session_id)).get(task)
            except SessionNotFound:
                continue  # deleted since it was listed
            if view is None:
                older.setdefault(record.session_id, []).append(record)
            else:
                views[record.key] = view
        for session_id, kept in older.items():
            try:
                slices = await self._slices(session_id, kept)
            except SessionNotFound:
                continue
            for record, messages in zip(kept, slices, strict=True):
                view = TaskView(TaskRef(session_id, record.event_id), lossless=self.lossless)
                view.recorded(record, messages)
                views[record.key] = view
        out: list[TaskView] = []
        for record in records:
            view = views.get(record.key)
            if view is None:
                continue
            view.client_message_id = record.message_id
            if view.history and view.history[0].role == a2a.ROLE_USER and record.message_id:
                view.history[0].message_id = record.message_id
            out.append(view)
        return out

    async def _window(self, session_id: str) -> dict[TaskRef, TaskView]:
        if session_id not in self._windows:
            window = await self.hub.replay_window(session_id)
            self._windows[session_id] = {v.ref: v for v in _runs(session_id, window, self.lossless)}
        return self._windows[session_id]

    async def _slices(
        self, session_id: str, records: list[TaskRecord]
    ) -> list[list[omni_pb2.OmniMessage]]:
        """Each record's messages in the trace (``first_record`` to
        ``last_record``, or to the end for a run still going), in one read."""
        slices: list[list[omni_pb2.OmniMessage]] = [[] for _ in records]
        spans = [(r.first_record or 1, r.last_record) for r in records]
        number = 0
        async for message in await self.hub.history(session_id):
            number += 1
            for at, (first, last) in enumerate(spans):
                if first <= number and (last is None or number <= last):
                    slices[at].append(message)
        return slices


def _runs(session_id: str, window: list[HubEvent], lossless: bool) -> list[TaskView]:
    """The runs whose first event the window still holds, each folded."""
    views: list[TaskView] = []
    view: TaskView | None = None
    # The window's first event starts a run only if nothing was kept before it.
    at_start = bool(window) and (
        window[0].prev == 0 or (window[0].prev is None and window[0].seq == 1)
    )
    for event in window:
        if view is None and at_start and event.body.is_message:
            view = TaskView(TaskRef(session_id, event.event_id), lossless=lossless)
            views.append(view)
        if view is not None:
            view.apply(event)
            if view.ended:
                view = None
        if is_task_end(event):
            at_start = True
    return views
