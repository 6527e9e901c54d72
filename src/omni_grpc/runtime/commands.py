"""Approve and Abort reach a run wherever it executes.

A run in this process is signalled directly: no lease lookup, no round trip
through the control channel, and no window after its task ends (a run still
starting keeps an abort for when it starts). A run on another replica gets a
command on the channel, addressed to the lease's owner and carrying the
lease's token: a command that arrives after its run ended (or moved) names
a token no run here holds, and is dropped rather than hitting the session's
next run.
"""

from __future__ import annotations

from collections.abc import Mapping

from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.control_channel import Command
from omni_grpc.runtime.errors import ApprovalNotPending
from omni_grpc.runtime.run import Run, Starting
from omni_grpc.runtime.run_task import abort_local
from omni_grpc.vocabulary import AbortKind, Decision


class Commands:
    def __init__(
        self, backend: Backend, runs: Mapping[str, Run], starting: Mapping[str, Starting]
    ) -> None:
        self._backend = backend
        self._runs = runs
        self._starting = starting

    async def approve(self, session_id: str, tool_call_id: str, chosen: Decision) -> None:
        # Taking the ask (with its decision) is what makes this Approve the one
        # that counts, here or on the owner.
        take = self._backend.approvals.take
        run = self._runs.get(session_id)
        if run is not None:
            if not await take(session_id, tool_call_id, chosen.value):
                raise ApprovalNotPending(session_id, tool_call_id)
            if not run.approvals.resolve(tool_call_id, chosen):
                raise ApprovalNotPending(session_id, tool_call_id)  # the ask ended (an abort)
            return
        owner = await self._backend.leases.owner(session_id)
        if owner is None or not await take(session_id, tool_call_id, chosen.value):
            raise ApprovalNotPending(session_id, tool_call_id)
        await self._backend.control.send(
            owner.replica,
            Command(session_id, "approve", owner.token, tool_call_id=tool_call_id, decision=chosen),
        )

    async def abort(self, session_id: str, reason: str | None, kind: AbortKind) -> bool:
        """False when the session is idle."""
        run = self._runs.get(session_id)
        if run is not None:
            abort_local(run, reason, kind)
            return True
        starting = self._starting.get(session_id)
        if starting is not None:
            starting.abort.set(reason or kind.default_reason, kind)
            return True
        owner = await self._backend.leases.owner(session_id)
        if owner is None:
            return bool(await self._backend.leases.running([session_id]))  # orphan: being closed
        command = Command(session_id, "abort", owner.token, reason=reason, abort_kind=kind)
        await self._backend.control.send(owner.replica, command)
        return True

    def received(self, command: Command) -> None:
        """A command from another replica, for the run here that holds the
        token it names; dropped when none does (the run ended, or moved,
        before it arrived: the session's next run is not its target)."""
        run = self._runs.get(command.session_id)
        if run is not None and run.lease.token == command.token:
            if command.kind == "abort":
                abort_local(run, command.reason, AbortKind(command.abort_kind))
            elif command.kind == "approve":
                run.approvals.resolve(command.tool_call_id, Decision(command.decision))
            return
        starting = self._starting.get(command.session_id)
        if (
            command.kind == "abort"
            and starting is not None
            and starting.claim.lease.token == command.token
        ):
            kind = AbortKind(command.abort_kind)
            starting.abort.set(command.reason or kind.default_reason, kind)
