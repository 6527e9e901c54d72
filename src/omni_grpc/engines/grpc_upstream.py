"""The ``grpc://HOST:PORT`` engine: another AgentService as this server's engine.

Messages are forwarded as the protobuf the upstream sent, hints included,
so they reach traces and transports byte for byte: as its very wire bytes
(``WireMessage``), which the hub records and sends without serializing the
message again, unless a tool call id had to be renamed here. The upstream runs in
approval mode ASK: each ``approval_request`` it raises goes to this server's
approve callback (and so to this server's clients or policy), and the decision
goes back with ``Approve``. An abort here becomes an ``Abort`` RPC there; the
upstream's own closing messages end the run, and if it stays silent past the
grace period the call is cancelled and the stream closed here.

Each local session is paired with one upstream session. The pairing is kept
beside the local trace, so a restarted gateway resumes the same upstream
conversation. ``grpcs://`` uses TLS (``ca=`` for a private CA); ``token=``
is sent as a bearer token.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

from omni_grpc.client import AgentClient, AgentError, RunStream
from omni_grpc.convert import message_from_dict, message_to_dict
from omni_grpc.engines.asking import ask
from omni_grpc.engines.base import (
    ApprovalUnanswered,
    Decision,
    EngineMessage,
    RunOptions,
    WireMessage,
)
from omni_grpc.engines.call_ids import CallIdRegistry
from omni_grpc.engines.pairing import Pairings
from omni_grpc.protocol.open_run import OpenRun
from omni_grpc.vocabulary import USER_ABORT_REASON, StopReason
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import omni_pb2

JsonObject = dict[str, Any]
log = logging.getLogger(__name__)

_AUTH_CODES = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
_INPUT_ARMS = frozenset({"text", "image_url", "inline_data", "tool_call_output"})


class GrpcUpstreamEngine:
    # The run lives in the upstream server, which this one cannot start again
    # on a past: a run whose process was lost is closed with abort.
    resumable = False
    name = "grpc-upstream"

    def __init__(
        self,
        target: str,
        *,
        tls: bool = False,
        token: str | None = None,
        ca: Path | None = None,
        grace: float = 5.0,
    ) -> None:
        self.target = target
        self.tls = tls
        self.token = token
        self.ca = ca
        self.grace = grace
        self._client: AgentClient | None = None
        self._pairings = Pairings("grpc-upstream", target)
        self._call_ids = CallIdRegistry()

    def client(self) -> AgentClient:
        # A grpc.aio channel belongs to the running loop: make it on first use.
        if self._client is None:
            self._client = AgentClient(self.target, token=self.token, tls=self.tls, tls_ca=self.ca)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def run(
        self, input: list[JsonObject], options: RunOptions
    ) -> AsyncIterator[EngineMessage]:
        proxy = _ProxiedRun(self, options)
        async for message in proxy.run(input):
            yield message

    # ---- the local -> upstream session pairing ---------------------------------------

    def upstream_session(self, options: RunOptions) -> str | None:
        return self._pairings.get(options)

    def pair(self, options: RunOptions, upstream_id: str | None) -> None:
        self._pairings.set(options, upstream_id)


class _ProxiedRun:
    def __init__(self, engine: GrpcUpstreamEngine, options: RunOptions) -> None:
        self.engine = engine
        self.options = options
        # The upstream's tool call ids may repeat across its tasks; the session's may not.
        self.call_ids = engine._call_ids.for_run(options)
        # What the upstream's stream has opened and not closed.
        self.open_run = OpenRun()
        self.finished = False
        self.stream: RunStream | None = None
        self.cancelled_here = False

    async def run(self, run_input: list[JsonObject]) -> AsyncIterator[EngineMessage]:
        upstream_id = self.engine.upstream_session(self.options)
        sent = [message_from_dict(m) for m in run_input]
        self.stream = self.engine.client().run(
            input=sent,
            session_id=upstream_id,
            thinking_level=self.options.thinking_level,
            approval_mode="ask",
            metadata=self.options.metadata or None,
        )
        watcher = asyncio.create_task(self._forward_abort())
        try:
            async for message in self._relay(sent):
                yield message
        except AgentError as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND:
                self.engine.pair(
                    self.options, None
                )  # the upstream forgot it: start afresh next run
            for closing in self._failure(exc):
                yield closing
            return
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            if not self.finished and self.stream is not None:
                self.stream.cancel()
        if self.options.abort.is_set() and not self.open_run.abort_seen:
            reason = self.options.abort.reason or USER_ABORT_REASON
            for closing in self.open_run.closing(StopReason.ABORTED, abort_reason=reason):
                yield closing
        elif not self.finished and not self.open_run.abort_seen:
            for closing in self._failure(None):
                yield closing

    async def _relay(self, sent: list[omni_pb2.OmniMessage]) -> AsyncIterator[EngineMessage]:
        assert self.stream is not None
        # An upstream like this server publishes the run's input first, which
        # this server already has; other upstreams (say, the Go example) do
        # not. So only a leading message whose payload is the input's own is
        # an echo; the first anything else ends the echo.
        echo = list(sent)
        try:
            async for event in self.stream:
                if event.session_id:
                    self.engine.pair(self.options, event.session_id)
                if event.message is not None:
                    message = event.message
                    if echo and _echoes(message, echo[0]):
                        echo.pop(0)
                        continue
                    echo.clear()
                    relayed = self.call_ids.incoming(message)
                    self._observe(relayed)
                    if relayed is message and event.wire is not None:
                        yield WireMessage(message, event.wire)  # as it arrived
                    else:
                        yield relayed  # renamed: its bytes are not the upstream's
                    del relayed
                elif event.server_event is not None:
                    await self._on_event(event.server_event)
                if event.is_task_end:
                    self.finished = True
                    return
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not self.cancelled_here or (task is not None and task.cancelling()):
                raise  # not our grace-period cancel: let it through

    async def _on_event(self, event: pb.ServerEvent) -> None:
        if event.WhichOneof("kind") != "approval_request":
            return  # task_state and friends describe the upstream; this hub makes its own
        request = event.approval_request
        call = message_to_dict(self.call_ids.incoming(request.tool_call))
        if request.origin and not call.get("origin"):
            call["origin"] = list(request.origin)
        try:
            decision = await ask(self.options.approve, call, self.options.abort)
        except ApprovalUnanswered as why:
            if why.stop_reason == StopReason.ABORTED:
                return  # the abort is forwarded; the upstream records its own end
            decision = Decision.DENY  # the wait expired: the upstream knows only decisions
        assert self.stream is not None and self.stream.session_id is not None
        try:
            await self.engine.client().approve(
                self.stream.session_id, request.tool_call.tool_call.tool_call_id, decision
            )
        except AgentError as exc:  # e.g. already resolved upstream; its stream tells the rest
            log.warning("upstream Approve failed: %s", exc)

    async def _forward_abort(self) -> None:
        await self.options.abort.wait()
        assert self.stream is not None
        reason = self.options.abort.reason or USER_ABORT_REASON
        with contextlib.suppress(AgentError, asyncio.TimeoutError):
            session = await asyncio.wait_for(self.stream.session(), timeout=self.engine.grace)
            await asyncio.wait_for(self.engine.client().abort(session, reason), self.engine.grace)
        await asyncio.sleep(self.engine.grace)
        # The upstream had its chance to close its own stream.
        self.cancelled_here = True
        self.stream.cancel()

    def _observe(self, message: omni_pb2.OmniMessage) -> None:
        self.open_run.observe(message)

    def _failure(self, error: AgentError | None) -> list[JsonObject]:
        detail = (
            f"{error.code.name}: {error.message}"
            if error is not None
            else "the stream ended before the task finished"
        )
        reason = f"upstream AgentService {self.engine.target}: {detail}"
        status = (
            StopReason.AUTH
            if error is not None and error.code in _AUTH_CODES
            else StopReason.FAILED
        )
        log.warning("grpc upstream: %s", reason)
        # The error travels in a request_end, in a request of its own if none is open.
        return self.open_run.closing(
            StopReason.FAILED,
            abort_reason=reason,
            error=reason,
            request_status=status,
            report_error=True,
        )


def _echoes(message: omni_pb2.OmniMessage, sent: omni_pb2.OmniMessage) -> bool:
    arm = message.WhichOneof("payload")
    return (
        not message.origin
        and arm in _INPUT_ARMS
        and arm == sent.WhichOneof("payload")
        and getattr(message, arm) == getattr(sent, arm)
    )


def create(spec: str, **options: str) -> GrpcUpstreamEngine:
    """``grpc://HOST:PORT`` or ``grpcs://HOST:PORT`` with ``--engine-opt`` options."""
    scheme, sep, target = spec.partition("://")
    if not sep or scheme not in ("grpc", "grpcs") or not target or "/" in target:
        raise ValueError(f"grpc upstream: {spec!r}: expected grpc://HOST:PORT or grpcs://HOST:PORT")
    unknown = sorted(set(options) - {"token", "ca", "grace_ms"})
    if unknown:
        raise ValueError(f"grpc upstream: unknown option(s) {', '.join(unknown)}")
    ca = Path(options["ca"]) if "ca" in options else None
    if ca is not None and not ca.is_file():
        raise ValueError(f"grpc upstream: ca={options['ca']!r} is not a file")
    try:
        grace = float(options.get("grace_ms", "5000")) / 1000
    except ValueError:
        raise ValueError(
            f"grpc upstream: grace_ms={options['grace_ms']!r} is not a number"
        ) from None
    if not grace >= 0:  # also refuses nan
        raise ValueError(f"grpc upstream: grace_ms={options['grace_ms']!r} must not be negative")
    return GrpcUpstreamEngine(
        target, tls=scheme == "grpcs" or ca is not None, token=options.get("token"), ca=ca,
        grace=grace,
    )  # fmt: skip
