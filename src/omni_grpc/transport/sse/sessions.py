"""``SessionInfo`` as the reference server writes it, from what the hub knows.

The reference's fields come first, in its order; a bridge has no notion of
some of them, and those carry fixed values:

* ``projectId`` and ``agentId`` are ``"default"``: one server, one engine.
* ``approvalMode`` is the session's own mode, else the server's
  (``--approval-mode``), written in the reference's spelling (our ``ask`` is
  its ``always-ask``); a task may still name its own mode.
* ``thinkingLevel`` and ``title`` are left out (optional there): a session
  pins no thinking level and gets no generated title.
* ``pendingFollowUpCount`` is 0 and ``archived`` is false: there is no
  follow-up queue (``queueIfBusy`` is refused) and no archive.
* ``tracePath`` (the shard being appended to) appears on the single-session
  GET only, once the session has a trace.

Two fields of ours follow: ``messageCount`` (records in the trace) and
``lastEventId``, the newest event id of the session's live log. It is null
when this server process has published nothing for the session, as after a
restart: a client then opens ``/stream`` without ``Last-Event-ID`` and loads
``/messages`` (an id from before the restart gets ``resync_required``).
"""

from __future__ import annotations

from typing import Any

from omni_grpc.runtime.interface import SessionInfo
from omni_grpc.vocabulary import REFERENCE_ASK, ApprovalMode

PROJECT_ID = "default"
AGENT_ID = "default"
# Our approval mode names where the reference spells them differently.
REFERENCE_APPROVAL_MODES = {ApprovalMode.ASK.value: REFERENCE_ASK}


def session_json(info: SessionInfo, *, with_trace_path: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "sessionId": info.session_id,
        "projectId": PROJECT_ID,
        "agentId": AGENT_ID,
        "provider": info.provider,
        "modelId": info.model_id,
        "workspace": info.workspace,
        "approvalMode": REFERENCE_APPROVAL_MODES.get(info.approval_mode, info.approval_mode),
    }
    if info.source is not None:
        body["source"] = info.source
    body.update(
        {
            "createdAt": info.created_at,
            "lastActiveAt": info.updated_at,
            "status": info.state,
            "pendingApprovalCount": info.pending_approvals,
            "pendingFollowUpCount": 0,
            "hasTrace": info.has_trace,
            "archived": False,
        }
    )
    if with_trace_path and info.trace_path is not None:
        body["tracePath"] = info.trace_path
    body["messageCount"] = info.message_count
    body["lastEventId"] = info.last_event_id
    return body
