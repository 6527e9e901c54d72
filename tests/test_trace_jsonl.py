"""JSONL reading: strict vs tolerant, torn tails, CRLF, line numbers."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from omni_grpc.convert import ConversionError, serialize_message
from omni_grpc.trace import SkippedLine, read_jsonl, write_jsonl
from omni_grpc.trace.lines import iter_lines, js_trim

CORPUS = Path(__file__).parent / "conformance"
PARSE_RESULTS = json.loads((CORPUS / "parse_results.json").read_text(encoding="utf-8"))
GOOD = b'{"timestamp":"t","type":"event_msg","payload":{"type":"request_begin"}}'


def read_tolerant(data: bytes) -> tuple[list[int], list[SkippedLine]]:
    skipped: list[SkippedLine] = []
    lines = [r.line for r in read_jsonl(io.BytesIO(data), tolerant=True, on_skip=skipped.append)]
    return lines, skipped


@pytest.mark.parametrize("name", sorted(PARSE_RESULTS))
def test_torn_tail_files_match_the_reference_parse_results(name: str) -> None:
    expected = PARSE_RESULTS[name]
    skipped: list[SkippedLine] = []
    records = list(read_jsonl(CORPUS / name, tolerant=True, on_skip=skipped.append))
    assert len(records) == expected["records"]
    middle = [s.line for s in skipped if not s.last]
    assert middle == expected.get("skippedMiddleLines", [])


def test_torn_last_line_is_reported_as_last() -> None:
    skipped: list[SkippedLine] = []
    path = CORPUS / "trace_torn_tail_before_resume_001.jsonl"
    list(read_jsonl(path, tolerant=True, on_skip=skipped.append))
    assert [(s.line, s.last) for s in skipped] == [(6, True)]


def test_strict_stops_at_the_first_malformed_line_naming_it() -> None:
    with pytest.raises(ConversionError) as caught:
        list(read_jsonl(CORPUS / "trace_torn_tail_healed_001.jsonl"))
    assert caught.value.line == 6
    assert "line 6" in str(caught.value)


def test_strict_reads_every_corpus_trace_without_loss() -> None:
    for path in sorted(CORPUS.glob("*.jsonl")):
        if "torn" in path.name or path.name.startswith("docs_"):
            continue
        out = io.BytesIO()
        write_jsonl((r.message for r in read_jsonl(path)), out)
        assert out.getvalue() == path.read_bytes(), path.name


def test_the_extracted_torn_literals() -> None:
    """Each upstream test literal, appended after a good line, is a torn tail; in the
    middle of a file it is a skipped line."""
    text = (CORPUS / "test_literal_torn_lines.txt").read_text(encoding="utf-8")
    literals = [ln.encode() for ln in text.splitlines() if not ln.startswith("#")]
    assert len(literals) == 4
    for torn in literals:
        lines, skipped = read_tolerant(GOOD + b"\n" + torn)
        assert lines == [1] and [(s.line, s.last) for s in skipped] == [(2, True)]
        lines, skipped = read_tolerant(GOOD + b"\n" + torn + b"\n" + GOOD + b"\n")
        assert lines == [1, 3] and [(s.line, s.last) for s in skipped] == [(2, False)]


def test_crlf_blank_lines_bom_and_whitespace_are_tolerated_in_both_modes() -> None:
    data = b"\xef\xbb\xbf" + GOOD + b"\r\n\r\n   \n\t" + GOOD + b"  \r\n\n"
    strict = list(read_jsonl(io.BytesIO(data)))
    assert [r.line for r in strict] == [1, 4]
    assert all(serialize_message(r.message) == GOOD for r in strict)
    assert read_tolerant(data) == ([1, 4], [])


def test_js_trim_matches_javascript_whitespace() -> None:
    assert js_trim("\u00a0\u3000x\u2028\ufeff".encode()) == b"x"
    # Python's str.strip would also remove these; JavaScript's trim does not.
    assert js_trim("\x1cx\x85".encode()) == "\x1cx\x85".encode()
    assert js_trim(b"\xff x \xff") == b"\xff x \xff"


def test_several_malformed_lines_and_a_torn_tail() -> None:
    data = b"\n".join([GOOD, b"{not json", b"[1,2]", GOOD, b'{"timestamp":'])
    lines, skipped = read_tolerant(data)
    assert lines == [1, 4]
    assert [(s.line, s.last) for s in skipped] == [(2, False), (3, False), (5, True)]
    assert all(s.reason for s in skipped)


def test_a_wrongly_typed_known_field_is_malformed() -> None:
    # (A number there is an enum value from a newer schema, so it is not malformed.)
    bad = b'{"timestamp":"t","type":"event_msg","payload":{"type":"request_end","status":[7]}}'
    with pytest.raises(ConversionError) as caught:
        list(read_jsonl(io.BytesIO(GOOD + b"\n" + bad + b"\n")))
    assert caught.value.line == 2 and caught.value.path.startswith("/payload")


def test_an_oversized_line_is_an_error_and_is_never_held_in_memory() -> None:
    big = b'{"x":"' + b"a" * 5000 + b'"}'
    data = GOOD + b"\n" + big + b"\n" + GOOD + b"\n"
    raws = list(iter_lines(io.BytesIO(data), max_line_bytes=1000))
    assert [(r.number, r.oversized) for r in raws] == [(1, False), (2, True), (3, False)]
    with pytest.raises(ConversionError, match="line 2: line is longer than 1000 bytes"):
        list(read_jsonl(io.BytesIO(data), max_line_bytes=1000))
    skipped: list[SkippedLine] = []
    got = list(
        read_jsonl(io.BytesIO(data), tolerant=True, on_skip=skipped.append, max_line_bytes=1000)
    )
    assert [r.line for r in got] == [1, 3] and [s.line for s in skipped] == [2]
