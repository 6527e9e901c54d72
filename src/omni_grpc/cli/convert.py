"""``omni-grpc convert INPUT OUTPUT``: JSONL <-> ``.binpb`` trace conversion.

Streams in constant memory. The output appears only when the conversion has
succeeded (written to a temporary file beside it, then renamed). Exit status:
0 ok, 1 data error (the message names the line or record), 2 usage.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from omni_grpc.cli.pipes import stdout_gone
from omni_grpc.convert import ConversionError
from omni_grpc.trace.convert import binpb_to_jsonl, jsonl_to_binpb
from omni_grpc.trace.formats import (
    FORMATS,
    TraceFormat,
    format_from_path,
    read_records,
    write_records,
)
from omni_grpc.trace.records import SkippedLine, TraceRecord

PROG = "omni-grpc convert"
# Below this a conversion takes about a second; no progress bar needed.
PROGRESS_MIN_BYTES = 16 * 1024 * 1024


class UsageError(Exception):
    pass


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "convert",
        help="convert a trace between JSONL and .binpb",
        description=(
            "Convert between JSONL (.jsonl, .ndjson) and delimited protobuf (.binpb). "
            "Formats come from the extensions; '-' is stdin/stdout and needs --from/--to."
        ),
    )
    parser.add_argument("input", metavar="INPUT", help="input file, or '-' for stdin")
    parser.add_argument("output", metavar="OUTPUT", help="output file, or '-' for stdout")
    parser.add_argument("--from", dest="from_fmt", choices=FORMATS, help="input format")
    parser.add_argument("--to", dest="to_fmt", choices=FORMATS, help="output format")
    parser.add_argument(
        "--tolerant",
        action="store_true",
        help="skip malformed JSONL lines and a torn last line (reported on stderr) "
        "instead of stopping at the first",
    )
    parser.add_argument(
        "--compress",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="store each large .binpb record compressed (zlib_record) when that is smaller; "
        "only readers that inflate zlib_record can read such a file (default: only large "
        "tool lists, in the marked form)",
    )
    parser.add_argument(
        "--plain",
        action="store_true",
        help="write every .binpb record as its message with base64 as text, the form readers "
        "built from older stubs read whole (default: fidelity's long base64 as bytes, "
        "base64_values; large tool lists compressed in the marked form)",
    )
    parser.add_argument(
        "--progress",
        choices=("auto", "always", "never"),
        default="auto",
        help="progress bar on stderr (auto: on a terminal, for inputs over 16 MiB)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        in_fmt = _format(args.input, args.from_fmt, "--from")
        out_fmt = _format(args.output, args.to_fmt, "--to")
        if args.tolerant and in_fmt != "jsonl":
            raise UsageError("--tolerant applies to JSONL input only")
        if args.compress and out_fmt != "binpb":
            raise UsageError("--compress applies to .binpb output only")
        if args.plain and out_fmt != "binpb":
            raise UsageError("--plain applies to .binpb output only")
        if args.plain and args.compress:
            raise UsageError("--plain and --compress contradict each other")
        if args.input != "-" and args.output != "-" and _same_file(args.input, args.output):
            raise UsageError("INPUT and OUTPUT are the same file")
        source = _open_input(args.input)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    with source as stream:
        return _convert(args, stream, in_fmt, out_fmt)


def _convert(
    args: argparse.Namespace, source: BinaryIO, in_fmt: TraceFormat, out_fmt: TraceFormat
) -> int:
    def on_skip(skipped: SkippedLine) -> None:
        if skipped.torn:
            what = "torn last line ignored"
        else:
            what = "malformed last line skipped" if skipped.last else "malformed line skipped"
        print(
            f"{PROG}: warning: {args.input}: line {skipped.line}: {what}: {skipped.reason}",
            file=sys.stderr,
        )

    current = 0  # the record being written, to name it when writing fails

    def messages(records: Iterator[TraceRecord], tick: Tick | None) -> Iterator[Any]:
        nonlocal current
        for n, record in enumerate(records):
            current = record.line
            if tick is not None and n % 4096 == 0:
                tick()
            yield record.message

    try:
        with _output(args.output) as sink, _progress(args, source) as tick:
            if in_fmt == "jsonl" and out_fmt == "binpb":
                jsonl_to_binpb(
                    source,
                    sink,
                    tolerant=args.tolerant,
                    on_skip=on_skip,
                    progress=tick,
                    compress=args.compress,
                    plain=args.plain,
                )
            elif in_fmt == "binpb" and out_fmt == "jsonl":
                binpb_to_jsonl(source, sink, progress=tick)
            else:  # the same format: each record is read and written again
                records = read_records(source, in_fmt, tolerant=args.tolerant, on_skip=on_skip)
                write_records(
                    messages(records, tick), sink, out_fmt, compress=args.compress, plain=args.plain
                )
    except ConversionError as exc:
        # Only the same-format JSONL path can fail writing a record it read
        # (a .binpb frame is written back as it came, and the converters
        # name their records themselves); its line is the one being written.
        if exc.line is None and current and in_fmt == "jsonl":
            exc = exc.at_line(current)
        print(f"{PROG}: error: {args.input}: {exc}", file=sys.stderr)
        return 1
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of stdout went away: stop, quietly
        return stdout_gone()
    except OSError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _format(path: str, explicit: TraceFormat | None, flag: str) -> TraceFormat:
    if explicit is not None:
        return explicit
    fmt = format_from_path(path)
    if fmt is None:
        what = "stdin/stdout" if path == "-" else repr(path)
        raise UsageError(
            f"cannot tell the format of {what}: use {flag} jsonl|binpb "
            "(or a .jsonl, .ndjson or .binpb name)"
        )
    return fmt


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _open_input(path: str) -> contextlib.AbstractContextManager[BinaryIO]:
    if path == "-":
        return contextlib.nullcontext(sys.stdin.buffer)
    try:
        return open(path, "rb", buffering=1024 * 1024)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from exc


@contextlib.contextmanager
def _output(path: str) -> Iterator[BinaryIO]:
    """Yields a sink; a file appears at ``path`` only if the block succeeds."""
    if path == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(
            dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".part"
        )
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "wb", buffering=1024 * 1024) as sink:
            yield sink
            sink.flush()
            os.fsync(sink.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


Tick = Callable[[], None]


@contextlib.contextmanager
def _progress(args: argparse.Namespace, source: BinaryIO) -> Iterator[Tick | None]:
    """Yields a function that moves the bar to where the input is read, or
    None when no bar is shown."""
    total = _size(source)
    wanted = args.progress == "always" or (
        args.progress == "auto" and sys.stderr.isatty() and total >= PROGRESS_MIN_BYTES
    )
    if not wanted or total <= 0:
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    progress = Progress(
        TextColumn("[bold]converting"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with progress:
        task = progress.add_task("convert", total=total)
        yield lambda: progress.update(task, completed=source.tell())
        progress.update(task, completed=total)


def _size(source: BinaryIO) -> int:
    try:
        st = os.fstat(source.fileno())
    except (OSError, ValueError):
        return 0
    import stat

    return st.st_size if stat.S_ISREG(st.st_mode) else 0
