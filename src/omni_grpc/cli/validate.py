"""``omni-grpc validate FILE``: report protocol violations, change nothing.

Exit status: 0 clean (warnings allowed), 1 violations or unreadable data,
2 usage (bad arguments, unknown format, missing file).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, TextIO

from omni_grpc.convert import ConversionError
from omni_grpc.trace.formats import FORMATS, TraceFormat, format_from_path, read_records
from omni_grpc.trace.records import SkippedLine
from omni_grpc.trace.validate import Issue, TraceValidator

PROG = "omni-grpc validate"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="report protocol violations in a trace or stream file",
        description=(
            "Check a .jsonl/.ndjson or .binpb file against the OmniMessage protocol: "
            "streaming discipline, tool_call/output and request pairing, partials or "
            "origin in a trace, unknown kinds (warnings). Nothing is modified."
        ),
    )
    parser.add_argument("file", metavar="FILE", help="the file to check ('-' for stdin)")
    parser.add_argument(
        "--from", dest="fmt", choices=FORMATS, help="input format (default: from the extension)"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--trace",
        dest="trace",
        action="store_const",
        const=True,
        help="apply the trace rules (default: when the file starts with session_meta)",
    )
    mode.add_argument(
        "--stream", dest="trace", action="store_const", const=False, help="a recorded stream"
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print errors only")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.file != "-" and os.path.isdir(args.file):
        return _usage(f"{args.file} is a directory: name a trace file (.jsonl or .binpb)")
    fmt: TraceFormat | None = args.fmt or format_from_path(args.file)
    if fmt is None:
        return _usage(f"cannot tell the format of {args.file!r}: use --from jsonl|binpb")
    if args.file != "-":
        try:
            open(args.file, "rb").close()
        except OSError as exc:
            return _usage(f"cannot read {args.file}: {exc.strerror}")

    out = sys.stdout
    unit = "line" if fmt == "jsonl" else "record"
    # Issues are sorted by line before printing: finish() and malformed lines
    # would otherwise interleave out of order.
    issues: list[Issue] = []
    malformed = 0

    def on_skip(skipped: SkippedLine) -> None:
        nonlocal malformed
        malformed += 1
        if skipped.torn:
            what = "torn last line (no newline: cut off mid-write)"
        else:
            what = "malformed last line" if skipped.last else "malformed line"
        issues.append(Issue(skipped.line, "error", "malformed", f"{what}: {skipped.reason}"))

    from omni_grpc.convert import message_to_dict

    validator = TraceValidator(trace=args.trace)
    unreadable: str | None = None
    try:
        for record in read_records(args.file, fmt, tolerant=True, on_skip=on_skip):
            try:
                obj = message_to_dict(record.message)
            except ConversionError as exc:  # a record whose fields contradict each other
                on_skip(SkippedLine(record.line, str(exc), last=False))
                continue
            issues.extend(validator.check(record.line, obj))
    except ConversionError as exc:
        unreadable = str(exc)
    issues.extend(validator.finish())
    issues.sort(key=lambda issue: issue.line)  # stable: same-line issues keep their order

    errors = sum(issue.severity == "error" for issue in issues)
    warnings = len(issues) - errors
    if unreadable is not None:
        errors += 1
    for issue in issues:
        if issue.severity == "error" or not args.quiet:
            _print(out, args.file, issue)
    if unreadable is not None:
        _write(out, f"{args.file}: error: {unreadable}")
    kind = "trace" if validator.trace else "stream"
    count = validator.count + malformed  # every non-blank line read, malformed ones too
    _write(
        out,
        f"{args.file}: {count} {unit if count == 1 else unit + 's'} "
        f"checked as a {kind}: {errors} error(s), {warnings} warning(s)",
    )
    return 1 if errors else 0


def _print(out: TextIO, path: str, issue: Issue) -> None:
    _write(out, f"{path}:{issue.line}: {issue.severity}: {issue.message} [{issue.code}]")


def _write(out: TextIO, text: str) -> None:
    """One line of report. Messages quote the file's own strings, which may
    hold lone surrogates (legal in JSON) or bytes a terminal's encoding lacks;
    those are written as escapes rather than crash the report."""
    encoding = getattr(out, "encoding", None) or "utf-8"
    safe = text.encode(encoding, "backslashreplace").decode(encoding, "replace")
    print(safe, file=out)


def _usage(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2
