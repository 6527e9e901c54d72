"""What a client is told about a session (``SessionInfo``), from its record.

The record is what the index keeps; the rest (running or idle, the last event
id, pending approvals) is asked of the backend, so every replica describes a
session alike.
"""

from __future__ import annotations

from collections.abc import Sequence

from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.interface import SessionInfo
from omni_grpc.runtime.recorder import Recorder
from omni_grpc.runtime.session_index import SessionRecord, session_mode
from omni_grpc.runtime.trace_store import TraceStore
from omni_grpc.vocabulary import SessionState


async def session_infos(
    records: Sequence[SessionRecord],
    *,
    backend: Backend,
    traces: TraceStore,
    recorder: Recorder,
    default_approval: ApprovalMode,
) -> list[SessionInfo]:
    running = await backend.leases.running([r.session_id for r in records])
    out = []
    for r in records:
        meta = r.meta
        if meta is None:
            workspace = traces.workspaces_dir / r.session_id
            meta = recorder.meta_for(r.session_id, workspace)
        source = meta.get("source")
        out.append(
            SessionInfo(
                session_id=r.session_id,
                state=SessionState.RUNNING if r.session_id in running else SessionState.IDLE,
                created_at=r.created_at,
                updated_at=r.updated_at,
                message_count=r.message_count,
                last_event_id=await backend.logs.last_event_id(r.session_id),
                provider=str(meta.get("provider", "")),
                model_id=str(meta.get("model_id", "")),
                workspace=str(meta.get("workspace", "")),
                source=source if isinstance(source, str) else None,
                approval_mode=(session_mode(r) or default_approval).value,
                pending_approvals=len(await backend.approvals.list(r.session_id)),
                trace_path=str(traces.paths(r)[-1]) if r.message_count else None,
            )
        )
    return out
