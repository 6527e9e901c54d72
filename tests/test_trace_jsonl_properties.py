"""Property test: the streaming tolerant reader agrees with a direct transcription
of the reference ``parseTraceLines`` (whole-file split, trim, classify)."""

from __future__ import annotations

import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from omni_grpc.convert import serialize_message
from omni_grpc.trace import SkippedLine, read_jsonl

GOOD = [
    b'{"timestamp":"t","type":"event_msg","payload":{"type":"request_begin"}}',
    '{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":"user","text":"é\\n"}}'.encode(),
]
BAD = [b"{not json", b'{"timestamp":"2026', b"[1]", b'"str"', b"\xff\xfe"]
PAD = [b"", b" ", b"\t", b"\r", "\u00a0".encode(), "\ufeff".encode()]


def reference(data: bytes) -> tuple[list[tuple[int, bytes]], list[int], int | None]:
    """(records as (line, bytes), skipped middle lines, ignored last line)."""
    entries = []
    for number, raw in enumerate(data.split(b"\n"), 1):
        try:
            text = raw.decode("utf-8").strip(" \t\n\v\f\r\u00a0\ufeff")
        except UnicodeDecodeError:
            text = raw.decode("utf-8", "replace")
        if text:
            entries.append((number, text))
    records, skipped = [], []
    for i, (number, text) in enumerate(entries):
        try:
            obj = json.loads(text)
            ok = isinstance(obj, dict)
        except ValueError:
            ok = False
        if ok:
            records.append((number, text.encode()))
        elif i == len(entries) - 1:
            return records, skipped, number
        else:
            skipped.append(number)
    return records, skipped, None


lines = st.tuples(
    st.sampled_from(PAD), st.sampled_from(GOOD + BAD + [b""]), st.sampled_from(PAD)
).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(lines, max_size=12), st.booleans())
def test_tolerant_reader_matches_parse_trace_lines(body: list[bytes], final_newline: bool) -> None:
    data = b"\n".join(body) + (b"\n" if final_newline and body else b"")
    skipped: list[SkippedLine] = []
    got = [
        (r.line, serialize_message(r.message))
        for r in read_jsonl(io.BytesIO(data), tolerant=True, on_skip=skipped.append)
    ]
    records, middle, last = reference(data)
    assert got == records
    assert [s.line for s in skipped if not s.last] == middle
    assert [s.line for s in skipped if s.last] == ([last] if last is not None else [])
