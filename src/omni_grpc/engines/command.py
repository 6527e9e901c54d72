"""The ``command:`` engine: any program as an engine, JSONL over stdio.

Each run starts the command once. The bridge writes one ``run`` request line to
its stdin; the child writes OmniMessage JSON lines to stdout and exits when the
run is over. After each complete ``tool_call`` (stop_reason ``completed``) the
bridge asks the host and writes an ``approval`` line; an abort is an ``abort``
line, then SIGTERM after a grace period, then SIGKILL. The protocol is
specified in ``docs/engines-real.md``.

A child that crashes, writes a line that is not an OmniMessage, or goes silent
for ``idle_timeout`` seconds ends the run with ``request_end`` failed and
``abort``, both naming the reason; what it left open is closed first. The
server process is unaffected: the child is only a subprocess.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import shlex
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from omni_grpc.convert import ConversionError, message_to_dict, parse_message
from omni_grpc.engines.asking import ask
from omni_grpc.engines.base import (
    AbortSignal,
    ApprovalUnanswered,
    Decision,
    EngineMessage,
    RunOptions,
)
from omni_grpc.engines.call_ids import CallIdRegistry
from omni_grpc.protocol.open_run import OpenRun
from omni_grpc.vocabulary import USER_ABORT_REASON, StopReason
from omni_grpc_proto.omni.v1 import omni_pb2

JsonObject = dict[str, Any]
log = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
MAX_LINE_BYTES = 64 * 1024 * 1024
STDERR_TAIL = 20


class _Failed(Exception):
    """The child broke the protocol or died; the message is the user-facing reason."""


class CommandEngine:
    # The command is started again with the carried-over input and the trace path.
    resumable = True
    name = "command"

    def __init__(
        self,
        argv: list[str],
        *,
        grace: float = 5.0,
        idle_timeout: float | None = 300.0,
        cwd: Path | None = None,
    ) -> None:
        if not argv:
            raise ValueError("command engine: name the program, as command:PROGRAM ARGS...")
        self.argv = argv
        self.grace = grace
        self.idle_timeout = idle_timeout
        self.cwd = cwd
        self._children: set[asyncio.subprocess.Process] = set()
        self._call_ids = CallIdRegistry()

    async def run(
        self, input: list[JsonObject], options: RunOptions
    ) -> AsyncIterator[EngineMessage]:
        bridge = _Bridge(self, options)
        async for message in bridge.run(input):
            yield message

    async def aclose(self) -> None:
        for child in list(self._children):
            await _stop(child, 0.5)


class _Bridge:
    """One run: one child process and the state needed to close its stream."""

    def __init__(self, engine: CommandEngine, options: RunOptions) -> None:
        self.engine = engine
        self.options = options
        # The child's tool call ids may repeat across runs; the session's may not.
        self.call_ids = engine._call_ids.for_run(options)
        # What the child's stream has opened and not closed.
        self.open_run = OpenRun()
        self.stderr: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self.proc: asyncio.subprocess.Process | None = None
        self._drain: asyncio.Task[None] | None = None
        self.line = 0
        self.lines: asyncio.Queue[bytes | _Failed] = asyncio.Queue(maxsize=1024)

    async def run(self, run_input: list[JsonObject]) -> AsyncIterator[EngineMessage]:
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.engine.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self.engine.cwd,
                limit=MAX_LINE_BYTES,
                start_new_session=True,  # signals reach the child, not the server's group
            )
        except OSError as exc:
            for closing in self._failure(f"cannot start {self.engine.argv[0]!r}: {exc}"):
                yield closing
            return
        self.engine._children.add(self.proc)
        drain = self._drain = asyncio.create_task(self._drain_stderr())
        pump = asyncio.create_task(self._pump_stdout())
        try:
            async for message in self._converse(run_input):
                yield message
        finally:
            self.engine._children.discard(self.proc)
            await _stop(self.proc, self.engine.grace)
            for helper in (drain, pump):
                helper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await helper

    async def _converse(self, run_input: list[JsonObject]) -> AsyncIterator[EngineMessage]:
        try:
            await self._send(self._request(run_input))
            async for message in self._relay():
                yield message
        except _Failed as exc:
            assert self.proc is not None
            await _stop(self.proc, 0.5)
            for closing in self._failure(str(exc)):
                yield closing

    async def _relay(self) -> AsyncIterator[EngineMessage]:
        """Child messages until it exits; approvals and abort are answered on the way."""
        assert self.proc is not None and self.proc.stdout is not None
        abort = self.options.abort
        while True:
            raw = await self._read_line(abort)
            if raw is None:  # aborted
                async for message in self._abort():
                    yield message
                return
            if not raw:
                await self._check_exit()
                return
            message = self.call_ids.incoming(self._parse(raw))
            self._observe(message)
            yield message
            if _needs_approval(message):
                try:
                    decision = await ask(self.options.approve, message_to_dict(message), abort)
                except ApprovalUnanswered as why:
                    if why.stop_reason == StopReason.ABORTED:
                        continue  # the next read turns into the abort path
                    decision = Decision.DENY  # the wait expired: the child knows only decisions
                answer = {"type": "approval", "decision": decision}
                call_id = self.call_ids.theirs(message.tool_call.tool_call_id)
                await self._send({**answer, "tool_call_id": call_id})

    async def _read_line(self, abort: AbortSignal) -> bytes | None:
        """The next stdout line (b"" at EOF), or None once aborted."""
        if abort.is_set():
            return None
        # Lines usually arrive in bursts: take a queued one without waiting.
        item = self.lines.get_nowait() if not self.lines.empty() else None
        if item is None:
            getter = asyncio.ensure_future(self.lines.get())
            waiter = asyncio.ensure_future(abort.wait())
            try:
                done, _ = await asyncio.wait(
                    {getter, waiter},
                    timeout=self.engine.idle_timeout,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                waiter.cancel()
            if getter not in done:
                getter.cancel()
                if abort.is_set():
                    return None
                raise _Failed(f"engine process wrote nothing for {self.engine.idle_timeout:g} s")
            item = getter.result()
        if isinstance(item, _Failed):
            raise item
        if item:
            self.line += 1
        return item

    async def _pump_stdout(self) -> None:
        """Moves stdout lines to ``self.lines``; the bounded queue keeps pipe backpressure."""
        assert self.proc is not None and self.proc.stdout is not None
        try:
            while line := await self.proc.stdout.readline():
                await self.lines.put(line)
        except ValueError:  # asyncio's LimitOverrunError surfaces as ValueError
            too_long = f"engine process wrote a line longer than {MAX_LINE_BYTES} bytes"
            await self.lines.put(_Failed(too_long))
            return
        await self.lines.put(b"")

    def _parse(self, raw: bytes) -> omni_pb2.OmniMessage:
        try:
            return parse_message(raw.rstrip(b"\r\n"), line=self.line)
        except ConversionError as exc:
            where = f"{exc.path}: " if exc.path else ""
            raise _Failed(
                f"engine process wrote an invalid OmniMessage on stdout line {self.line}: "
                f"{where}{exc.reason}"
            ) from None

    def _observe(self, message: omni_pb2.OmniMessage) -> None:
        self.open_run.observe(message)

    async def _check_exit(self) -> None:
        assert self.proc is not None
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout=self.engine.grace)
        except TimeoutError:
            raise _Failed("engine process closed stdout but did not exit") from None
        if code != 0:
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            raise _Failed(f"engine process {how}{self._stderr_note()}")
        if self.open_run.abort_seen:
            return
        if self.open_run.unfinished:
            raise _Failed(
                "engine process exited with its stream unfinished (an open fragment or request)"
            )

    async def _abort(self) -> AsyncIterator[EngineMessage]:
        """Asks the child to stop, relays what it still says, then closes what it left open."""
        assert self.proc is not None
        reason = self.options.abort.reason or USER_ABORT_REASON
        with contextlib.suppress(_Failed):
            await self._send({"type": "abort", "reason": reason})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.engine.grace
        quiet = AbortSignal()  # never set: the abort has been delivered already
        with contextlib.suppress(_Failed, TimeoutError):
            while not self.open_run.abort_seen and (left := deadline - loop.time()) > 0:
                raw = await asyncio.wait_for(self._read_line(quiet), timeout=left)
                if not raw:
                    break
                message = self._parse(raw)
                self._observe(message)
                yield message
        if self.open_run.abort_seen:
            return  # the child ended its run itself
        for closing in self.open_run.closing(StopReason.ABORTED, abort_reason=reason):
            yield closing

    def _failure(self, reason: str) -> list[JsonObject]:
        log.warning("command engine %s: %s", shlex.join(self.engine.argv), reason)
        # The error travels in a request_end, in a request of its own if none is open.
        return self.open_run.closing(
            StopReason.FAILED, abort_reason=reason, error=reason, report_error=True
        )

    def _request(self, run_input: list[JsonObject]) -> JsonObject:
        o = self.options
        return {
            "type": "run",
            "protocol": PROTOCOL_VERSION,
            "session_id": o.session_id,
            "input": run_input,
            "thinking_level": o.thinking_level,
            "workspace": str(o.workspace),
            "trace_path": str(o.trace_path) if o.trace_path else None,
            "metadata": o.metadata,
        }

    async def _send(self, line: JsonObject) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(orjson.dumps(line) + b"\n")
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            raise _Failed(await self._stdin_closed()) from None

    async def _stdin_closed(self) -> str:
        """Why the child stopped reading. Usually it has exited (``command:false``
        exits 1 before reading its request): then its exit status says more."""
        assert self.proc is not None
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout=self.engine.grace)
        except TimeoutError:
            return f"engine process closed its stdin{self._stderr_note()}"
        if self._drain is not None:  # its last stderr line may still be in the pipe
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._drain), timeout=self.engine.grace)
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        # The same words as when it exits after reading: which of the two a
        # child that exits at once hits is a race.
        return f"engine process {how}{self._stderr_note()}"

    async def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            text = line.decode("utf-8", errors="replace").rstrip()
            self.stderr.append(text)
            log.debug("engine stderr: %s", text)

    def _stderr_note(self) -> str:
        if not self.stderr:
            return ""
        return f"; its stderr ends: {self.stderr[-1][:500]}"


async def _stop(proc: asyncio.subprocess.Process, grace: float) -> None:
    """Waits up to ``grace`` for the child to exit, then SIGTERM, then SIGKILL."""
    if proc.returncode is not None:
        return
    if proc.stdin is not None and not proc.stdin.is_closing():
        proc.stdin.close()
    for step in ("wait", "terminate", "kill"):
        if step == "terminate":
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        elif step == "kill":
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        try:
            await asyncio.wait_for(proc.wait(), timeout=grace if step != "kill" else None)
            return
        except TimeoutError:
            continue


def _needs_approval(message: omni_pb2.OmniMessage) -> bool:
    """A complete tool_call (stop_reason completed, or left out as the docs allow)."""
    if message.WhichOneof("payload") != "tool_call":
        return False
    return message.tool_call.stop_reason in (
        omni_pb2.STOP_REASON_COMPLETED, omni_pb2.STOP_REASON_UNSPECIFIED,
    )  # fmt: skip


def _seconds(options: Mapping[str, str], key: str, default: float) -> float:
    raw = options.get(key)
    try:
        value = float(raw) if raw is not None else default
    except ValueError:
        raise ValueError(f"command engine: {key}={raw!r} is not a number") from None
    if value < 0:
        raise ValueError(f"command engine: {key}={raw!r} must not be negative")
    return value


def create(spec: str, **options: str) -> CommandEngine:
    """``command:PROGRAM ARGS...`` (shell-style quoting) with ``--engine-opt`` options."""
    argv = shlex.split(spec.removeprefix("command:"))
    unknown = sorted(set(options) - {"grace_ms", "idle_timeout", "cwd"})
    if unknown:
        raise ValueError(f"command engine: unknown option(s) {', '.join(unknown)}")
    grace = _seconds(options, "grace_ms", 5000) / 1000
    idle = _seconds(options, "idle_timeout", 300)
    cwd = Path(options["cwd"]) if "cwd" in options else None
    if cwd is not None and not cwd.is_dir():
        raise ValueError(f"command engine: cwd={options['cwd']!r} is not a directory")
    return CommandEngine(argv, grace=grace, idle_timeout=idle if idle > 0 else None, cwd=cwd)


__all__ = ["PROTOCOL_VERSION", "CommandEngine", "create"]
