"""Connect and gRPC-Web at the HTTP level: CORS for the operator's origins
(and nothing for others), and bad input answered with a clear error that
records nothing."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import socket
import struct
from pathlib import Path

import httpx
import pytest
from connect_serving import Served, serving

from omni_grpc.client import AgentClient
from omni_grpc.vocabulary import SessionState
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb

ALLOWED = "http://app.example:3000"


def envelope(data: bytes, flags: int = 0) -> bytes:
    return struct.pack(">BI", flags, len(data)) + data


def _whole_frames(body: bytes) -> list[tuple[int, bytes]]:
    out, at = [], 0
    while at + 5 <= len(body):
        flags, length = struct.unpack_from(">BI", body, at)
        if at + 5 + length > len(body):
            break
        out.append((flags, body[at + 5 : at + 5 + length]))
        at += 5 + length
    return out


def _asks(data: bytes, content_type: str) -> bool:
    if content_type.endswith("json"):
        return "approvalRequest" in json.loads(data).get("event", {})
    response = pb.RunResponse.FromString(data)
    return response.WhichOneof("kind") == "event" and response.event.HasField("approval_request")


def frames(body: bytes) -> list[tuple[int, bytes]]:
    out, at = [], 0
    while at < len(body):
        flags, length = struct.unpack_from(">BI", body, at)
        out.append((flags, body[at + 5 : at + 5 + length]))
        at += 5 + length
    return out


async def _sessions(served: Served) -> list[pb.SessionInfo]:
    async with AgentClient(served.grpc_target) as client:
        return await client.list_sessions()


# ---- CORS ------------------------------------------------------------------------


async def test_a_preflight_from_an_allowed_origin_gets_connects_headers(tmp_path: Path) -> None:
    async with (
        serving(tmp_path / "data", cors_origins=[ALLOWED]) as served,
        httpx.AsyncClient() as http,
    ):
        r = await http.options(
            served.url("Run"),
            headers={
                "origin": ALLOWED,
                "access-control-request-method": "POST",
                "access-control-request-headers": "content-type,connect-protocol-version,"
                "connect-timeout-ms,authorization,x-grpc-web,x-user-agent,grpc-timeout",
            },
        )
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == ALLOWED
        allowed = r.headers["access-control-allow-headers"].lower()
        for header in ("connect-protocol-version", "x-grpc-web", "authorization", "grpc-timeout"):
            assert header in allowed
        # The call itself: its answer exposes the statuses a browser must read.
        call = await http.post(
            served.url("ListSessions"),
            content=b"{}",
            headers={"origin": ALLOWED, "content-type": "application/json"},
        )
        assert call.status_code == 200 and call.json() == {}
        exposed = call.headers["access-control-expose-headers"].lower()
        for header in ("grpc-status", "grpc-message", "grpc-status-details-bin", "omni-session-id"):
            assert header in exposed


async def test_other_origins_are_refused(tmp_path: Path) -> None:
    async with (
        serving(tmp_path / "data", cors_origins=[ALLOWED]) as served,
        httpx.AsyncClient() as http,
    ):
        preflight = await http.options(
            served.url("Run"),
            headers={"origin": "http://evil.example", "access-control-request-method": "POST"},
        )
        assert preflight.status_code == 400
        assert "access-control-allow-origin" not in preflight.headers
        run = await http.post(
            served.url("Run"),
            content=envelope(b'{"prompt": "hi"}'),
            headers={"origin": "http://evil.example", "content-type": "application/connect+json"},
        )
        [(flags, end)] = frames(run.content)
        assert flags == 0x02 and json.loads(end)["error"]["code"] == "permission_denied"
        assert await _sessions(served) == []  # nothing ran


async def test_without_cors_origins_no_browser_origin_is_allowed(tmp_path: Path) -> None:
    async with serving(tmp_path / "data") as served, httpx.AsyncClient() as http:
        r = await http.post(
            served.url("ListSessions"),
            content=b"{}",
            headers={"origin": ALLOWED, "content-type": "application/json"},
        )
        assert r.status_code == 403 and r.json()["code"] == "permission_denied"
        assert "access-control-allow-origin" not in r.headers


# ---- bad input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "why"),
    [
        ("text/plain", "not a Connect or gRPC-Web request"),
        ("application/proto", "for unary methods"),  # Run streams
        ("application/grpc", "gRPC port"),
        ("application/connect+xml", "codec 'xml'"),
        ("application/grpc-web-text+json", "not served"),
    ],
)
async def test_wrong_content_types_are_415_naming_the_problem(
    tmp_path: Path, content_type: str, why: str
) -> None:
    async with serving(tmp_path / "data") as served, httpx.AsyncClient() as http:
        r = await http.post(
            served.url("Run"), content=b'{"prompt":"hi"}', headers={"content-type": content_type}
        )
        assert r.status_code == 415, r.text
        assert (
            why in r.json()["message"] and "application/connect+proto" in r.headers["accept-post"]
        )
        assert await _sessions(served) == []


@pytest.mark.parametrize(
    ("body", "code", "why"),
    [
        # No message, or two, is a cardinality violation: unimplemented, as
        # in connect-go and conformance's server-stream/no-request and
        # server-stream/multiple-requests.
        (b"", "unimplemented", "empty"),
        (envelope(b"{}") * 2, "unimplemented", "more than one message"),
        (b"\x00\x00\x00", "invalid_argument", "shorter than an envelope"),
        (envelope(b'{"prompt":"hi"}')[:-3], "invalid_argument", "truncated"),
        (envelope(b'{"prompt":"hi"}') + b"\x00", "invalid_argument", "after its one message"),
        (envelope(b'{"prompt":"hi"}', flags=0x40), "invalid_argument", "unknown flags"),
        (envelope(b'{"prompt": 3'), "invalid_argument", "not a valid RunRequest"),
        (envelope(b'{"prompt": 7}'), "invalid_argument", "not a valid RunRequest"),
        (envelope(b"\xff\xfe"), "invalid_argument", "not a valid RunRequest"),
    ],
)
async def test_bad_envelopes_end_the_stream_naming_the_problem(
    tmp_path: Path, body: bytes, code: str, why: str
) -> None:
    async with serving(tmp_path / "data") as served, httpx.AsyncClient() as http:
        r = await http.post(
            served.url("Run"), content=body, headers={"content-type": "application/connect+json"}
        )
        assert r.status_code == 200  # Connect streams say it in the end-of-stream message
        [(flags, end)] = frames(r.content)
        error = json.loads(end)["error"]
        assert flags == 0x02 and error["code"] == code and why in error["message"], error
        assert await _sessions(served) == []


async def test_grpc_web_refusals_are_trailers_only(tmp_path: Path) -> None:
    async with serving(tmp_path / "data") as served, httpx.AsyncClient() as http:
        r = await http.post(
            served.url("Run"),
            content=envelope(b"\x0a\x03bad")[:-1],
            headers={"content-type": "application/grpc-web+proto"},
        )
        assert r.status_code == 200 and r.content == b""
        assert r.headers["grpc-status"] == "3" and "truncated" in r.headers["grpc-message"]
        text = await http.post(
            served.url("Attach"),
            content=base64.b64encode(
                envelope(pb.AttachRequest(session_id="x").SerializeToString())
            ),
            headers={"content-type": "application/grpc-web-text"},
        )
        assert text.headers["grpc-status"] == "5"  # NOT_FOUND
        assert "grpc-status-details-bin" in text.headers


async def test_oversized_messages_are_resource_exhausted(tmp_path: Path) -> None:
    async with (
        serving(tmp_path / "data", max_message_bytes=1000) as served,
        httpx.AsyncClient() as http,
    ):
        big = json.dumps({"prompt": "x" * 2000}).encode()
        r = await http.post(
            served.url("Run"),
            content=envelope(big),
            headers={"content-type": "application/connect+json"},
        )
        [(_, end)] = frames(r.content)
        error = json.loads(end)["error"]
        assert error["code"] == "resource_exhausted" and "1000 bytes" in error["message"]
        # A small gzip body that inflates past the limit is refused the same way.
        bomb = gzip.compress(json.dumps({"sessionId": "s" * 50_000}).encode())
        assert len(bomb) < 1000
        unary = await http.post(
            served.url("Abort"),
            content=bomb,
            headers={"content-type": "application/json", "content-encoding": "gzip"},
        )
        assert unary.status_code == 429 and unary.json()["code"] == "resource_exhausted"
        # gzip within the limit is read.
        small = await http.post(
            served.url("ListSessions"),
            content=gzip.compress(b"{}"),
            headers={"content-type": "application/json", "content-encoding": "gzip"},
        )
        assert small.status_code == 200
        odd = await http.post(
            served.url("ListSessions"),
            content=b"{}",
            headers={"content-type": "application/json", "content-encoding": "br"},
        )
        assert odd.status_code == 501 and "'br'" in odd.json()["message"]
        assert await _sessions(served) == []


async def test_a_bad_deadline_or_protocol_version_is_invalid_argument(tmp_path: Path) -> None:
    async with serving(tmp_path / "data") as served, httpx.AsyncClient() as http:
        for header, value in (("connect-timeout-ms", "soon"), ("connect-protocol-version", "2")):
            r = await http.post(
                served.url("ListSessions"),
                content=b"{}",
                headers={"content-type": "application/json", header: value},
            )
            assert r.status_code == 400 and header in r.json()["message"]


async def test_a_deadline_aborts_a_run_that_did_not_detach(tmp_path: Path) -> None:
    async with (
        serving(tmp_path / "data") as served,
        httpx.AsyncClient(timeout=30) as http,
        AgentClient(served.grpc_target) as client,
    ):
        r = await http.post(
            served.url("Run"),
            content=envelope(b'{"prompt": "list my files", "approvalMode": "APPROVAL_MODE_ASK"}'),
            headers={"content-type": "application/connect+json", "connect-timeout-ms": "1500"},
        )
        *messages, (flags, end) = frames(r.content)
        assert flags == 0x02 and json.loads(end)["error"]["code"] == "deadline_exceeded"
        session_id = json.loads(messages[0][1])["sessionId"]
        # The deadline answers the client at once; the run's close (its
        # request_end, then the abort) is recorded after, on the trace's own
        # threads: read the history once the run has ended.
        async with asyncio.timeout(60):
            await served.server.hub.wait_idle(session_id)
        history = [m async for m in client.history(session_id)]
        assert history[-1].HasField("abort")  # the run the deadline ended was aborted


async def test_a_client_that_never_reads_holds_nothing_back(tmp_path: Path) -> None:
    """A Run whose client sends its request and then reads nothing: the run
    goes on to its end (the hub never waits for a reader) and is recorded
    whole."""
    async with (
        serving(tmp_path / "data", engine_options={"repeat": "300"}) as served,
        AgentClient(served.grpc_target) as client,
    ):
        host, port = served.base_url.removeprefix("http://").split(":")
        body = envelope(b'{"prompt": "hi"}')
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        request = (
            f"POST /omni.v1.AgentService/Run HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Content-Type: application/connect+json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        sock.sendall(request)
        try:
            hub = served.server.hub
            async with asyncio.timeout(60):
                # Until the run has started: a session is listed before its
                # run is registered, and wait_idle waits only on a registered one.
                while not (sessions := await hub.list_sessions()) or (
                    sessions[0].state is SessionState.IDLE and sessions[0].message_count == 0
                ):
                    await asyncio.sleep(0.005)
                await hub.wait_idle(sessions[0].session_id)
            [info] = await _sessions(served)
            # Thousands of events went by the unread socket; none was waited for.
            assert info.state == pb.SESSION_STATE_IDLE
            assert int(info.last_event_id.rsplit("-", 1)[1]) > 2000
            history = [m async for m in client.history(info.session_id)]
            assert not any(m.HasField("abort") for m in history)
            assert history[-1].HasField("request_end")
        finally:
            sock.close()


@pytest.mark.parametrize("content_type", ["application/connect+json", "application/grpc-web+proto"])
@pytest.mark.parametrize("detach", [False, True])
async def test_a_client_that_leaves_aborts_or_detaches_as_on_grpc(
    tmp_path: Path, content_type: str, detach: bool
) -> None:
    request = pb.RunRequest(
        prompt="list my files", approval_mode=pb.APPROVAL_MODE_ASK, detach_on_cancel=detach
    )
    body = (
        json.dumps(
            {
                "prompt": request.prompt,
                "approvalMode": "APPROVAL_MODE_ASK",
                "detachOnCancel": detach,
            }
        ).encode()
        if content_type.endswith("json")
        else request.SerializeToString()
    )
    async with (
        serving(tmp_path / "data") as served,
        httpx.AsyncClient(timeout=30) as http,
        AgentClient(served.grpc_target) as client,
    ):
        async with http.stream(
            "POST",
            served.url("Run"),
            content=envelope(body),
            headers={"content-type": content_type},
        ) as r:
            session_id = r.headers["omni-session-id"]
            seen = b""
            async for chunk in r.aiter_bytes():
                seen += chunk
                if any(_asks(data, content_type) for _, data in _whole_frames(seen)):
                    break  # the run waits for an answer: hang up now
        hub = served.server.hub
        if detach:
            [info] = await hub.list_sessions()
            assert info.state.value == "running"  # the task lives on, for an Attach
            await client.abort(session_id)
        await hub.wait_idle(session_id)
        history = [m async for m in client.history(session_id)]
        assert history[-1].HasField("abort")
        reason = history[-1].abort.reason
        assert ("cancelled" in reason) is not detach, reason
