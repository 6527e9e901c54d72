"""Misbehaving command-engine children, one per mode (argv[1]).

Each reads the run request, writes a little valid protocol, then breaks it the
way real programs do: crashing, printing junk, going silent, ignoring abort.
"""

from __future__ import annotations

import json
import signal
import sys
import time


def send(payload: dict[str, object], kind: str = "event_msg") -> None:
    msg = {"timestamp": "2026-01-01T00:00:00.000Z", "type": kind, "payload": payload}
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def partial_start() -> None:
    send({"type": "partial_text", "role": "assistant", "event_type": "start", "text": "",
          "stop_reason": "completed"}, "model_msg")  # fmt: skip
    send({"type": "partial_text", "role": "assistant", "event_type": "delta", "text": "Half",
          "stop_reason": "completed"}, "model_msg")  # fmt: skip


def main() -> None:
    mode = sys.argv[1]
    request = json.loads(sys.stdin.readline())
    assert request["type"] == "run" and request["protocol"] == 1
    send({"type": "request_begin"})
    if mode == "crash":
        partial_start()
        sys.stderr.write("Traceback: something broke inside the agent\n")
        sys.stderr.flush()
        sys.exit(3)
    if mode == "garbage":
        sys.stdout.write("this is not json\n")
        sys.stdout.flush()
        time.sleep(30)
    if mode == "bad-message":
        sys.stdout.write(
            '{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":{}}}\n'
        )
        sys.stdout.flush()
        time.sleep(30)
    if mode == "hang":
        partial_start()
        time.sleep(30)
    if mode in ("ignore-abort", "stubborn"):
        if mode == "stubborn":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        partial_start()
        for line in sys.stdin:  # reads the abort line and carries on regardless
            sys.stderr.write(f"got {line.strip()}\n")
            sys.stderr.flush()
            with open("got-abort", "w") as seen:  # in the engine's cwd, for the test
                seen.write(line)
        time.sleep(30)
    if mode == "unfinished":
        partial_start()
        sys.exit(0)
    if mode == "echo-request":
        text = json.dumps(request)
        send({"type": "text", "role": "assistant", "text": text, "stop_reason": "completed"},
             "model_msg")  # fmt: skip
        send({"type": "request_end", "status": "completed"})
        sys.exit(0)
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
