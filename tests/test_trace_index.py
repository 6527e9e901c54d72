"""The trace index: windows read through it equal the full read's windows.

Generated sessions (the shapes of tests/test_trace_window_properties.py) are
written as shard files, by the indexing writer or as raw bytes with no index,
and every window (tail and ``before`` pages, cursors on and off unit starts,
past a shard's end, into shards that do not exist) is compared with
``window()`` over the whole parsed session. Then the index is deleted,
truncated, corrupted or made stale, the trace edited, torn or appended to by
a writer that keeps no index: the answer stays the full read's, and the index
is written again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_grpc import protocol as p
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.trace import TraceWriter, read_jsonl
from omni_grpc.trace.index import (
    ENTRY_BYTES,
    TRAILER_BYTES,
    Trailer,
    index_path,
    read_window,
)
from omni_grpc.trace.paths import trace_path_for
from omni_grpc.trace.window import Position, Window, positioned, window
from omni_grpc_proto.omni.v1 import omni_pb2
from tests.test_trace_window_properties import sessions

SID = "session-2026-08-23-10-00-00-0a1b2c3d"
DAY = datetime(2026, 8, 23)
Shards = list[tuple[int, list[omni_pb2.OmniMessage]]]


def write_session(root: Path, shards: Shards, *, indexed: bool) -> list[tuple[int, Path]]:
    paths = []
    for number, messages in shards:
        path = trace_path_for(root, SID, number, day=DAY)
        path.parent.mkdir(parents=True, exist_ok=True)
        if indexed:
            writer = TraceWriter(path)
            for msg in messages:
                writer.write(msg)
            if not path.exists():
                path.touch()  # an empty shard still exists
        else:
            path.write_bytes(b"".join(serialize_message(m) + b"\n" for m in messages))
        paths.append((number, path))
    return paths


def full(paths: list[tuple[int, Path]]) -> list[tuple[Position, omni_pb2.OmniMessage]]:
    return positioned(
        [(n, [r.message for r in read_jsonl(path, tolerant=True)]) for n, path in paths]
    )


def same(a: Window, b: Window) -> None:
    assert a.before == b.before
    assert a.prior == b.prior
    assert [(pos, serialize_message(m)) for pos, m in a.messages] == [
        (pos, serialize_message(m)) for pos, m in b.messages
    ]


def cursors(records: list[tuple[Position, omni_pb2.OmniMessage]]) -> list[Position]:
    """Every record's position, one past each shard's end, and shards that do not exist."""
    out = [pos for pos, _ in records]
    shards = sorted({pos[0] for pos in out})
    out += [(n, 1 + max(o for (f, o) in out if f == n)) for n in shards]
    return [*out, (0, 0), (max(shards, default=1) + 1, 0), (1, 10**6)]


def check_all(paths: list[tuple[int, Path]], limits: tuple[int, ...] = (1, 2, 3)) -> None:
    records = full(paths)
    for limit in limits:
        same(read_window(paths, limit, None), window(records, limit))
        for before in cursors(records):
            same(read_window(paths, limit, before), window(records, limit, before))


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sessions(), st.booleans())
def test_windows_through_the_index_equal_the_full_reads(
    tmp_path_factory: pytest.TempPathFactory, shards: Shards, indexed: bool
) -> None:
    root = tmp_path_factory.mktemp("traces")
    paths = write_session(root, shards, indexed=indexed)
    check_all(paths)
    for _, path in paths:  # written by the writer, or by the first read
        assert index_path(path).is_file()
    check_all(paths)  # and read back from the files


def demo_session(tasks: int) -> Shards:
    meta = p.session_meta(p.session_meta_payload(SID, "x", "y", 1, "", "", "/w"))
    counts = {"cache_read": 0, "cache_write": 1, "output": 1, "total": 2}
    first: list[dict[str, object]] = [meta]
    for n in range(tasks):
        first += [
            p.user_text(f"task {n}", timestamp=f"2026-08-23T10:{n:02d}:00.000Z"),
            p.request_begin(),
            p.tool_call("ls", "{}", f"call_{n}"),
            p.tool_call_output("out", f"call_{n}"),
            p.token_usage(counts, counts),
            p.request_end("completed", timestamp=f"2026-08-23T10:{n:02d}:07.000Z"),
        ]
    second = [meta, p.user_text("[context_summary]\nso far"), p.user_text("after the rotation")]
    return [
        (1, [message_from_dict(m) for m in first]),
        (2, [message_from_dict(m) for m in second]),
    ]


@pytest.fixture
def session(tmp_path: Path) -> list[tuple[int, Path]]:
    return write_session(tmp_path, demo_session(12), indexed=True)


def trailer_of(shard: Path) -> Trailer:
    data = index_path(shard).read_bytes()
    trailer = Trailer.unpack(data[-TRAILER_BYTES:])
    assert trailer is not None
    assert len(data) == trailer.units * ENTRY_BYTES + TRAILER_BYTES
    return trailer


def test_the_writer_keeps_the_index_covering_every_record(
    session: list[tuple[int, Path]],
) -> None:
    for number, shard in session:
        trailer = trailer_of(shard)
        assert trailer.covered == shard.stat().st_size
        assert trailer.records == len(full([(number, shard)]))
    assert trailer_of(session[0][1]).units == 12
    assert trailer_of(session[1][1]).units == 1  # the prompt after the summary


@pytest.mark.parametrize(
    "damage",
    ["deleted", "truncated", "garbage", "flipped_entry", "flipped_trailer", "empty", "stale"],
)
def test_a_damaged_index_is_rebuilt_and_gives_the_same_answer(
    session: list[tuple[int, Path]], damage: str
) -> None:
    expected = full(session)
    shard = session[0][1]
    index = index_path(shard)
    good = index.read_bytes()
    if damage == "deleted":
        index.unlink()
    elif damage == "truncated":
        index.write_bytes(good[: len(good) - 7])
    elif damage == "garbage":
        index.write_bytes(os.urandom(len(good)))
    elif damage == "flipped_entry":
        index.write_bytes(bytes([good[0] ^ 0xFF]) + good[1:])
    elif damage == "flipped_trailer":
        index.write_bytes(good[:-20] + bytes([good[-20] ^ 0x01]) + good[-19:])
    elif damage == "empty":
        index.write_bytes(b"")
    else:  # an index from before the last two tasks
        writer = TraceWriter(shard)
        for n in (12, 13):
            writer.write(message_from_dict(p.user_text(f"task {n}")))
            writer.write(message_from_dict(p.assistant_text("done")))
        index.write_bytes(good)
        expected = full(session)
    for limit in (1, 3, 50):
        assert read_window(session, limit, None).messages == window(expected, limit).messages
        same(read_window(session, limit, (1, 20)), window(expected, limit, (1, 20)))
    assert trailer_of(shard).covered == shard.stat().st_size  # written again
    check_all(session)


def test_an_index_entry_pointing_elsewhere_is_caught_by_its_line_crc(
    session: list[tuple[int, Path]],
) -> None:
    shard = session[0][1]
    text = shard.read_bytes()
    # Same size, same inode, same mtime: only the unit's line CRC can tell.
    stat = shard.stat()
    edited = text.replace(b'"task 11"', b'"TASK 11"')
    with shard.open("r+b") as fh:
        fh.write(edited)
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    expected = full(session)
    same(read_window(session, 2, (2, 0)), window(expected, 2, (2, 0)))
    check_all(session)


@pytest.mark.parametrize("edit", ["grown", "shrunk", "same_size", "replaced"])
def test_an_edited_trace_reads_as_edited(session: list[tuple[int, Path]], edit: str) -> None:
    shard = session[0][1]
    text = shard.read_bytes()
    if edit == "grown":
        edited = text.replace(b'"task 3"', b'"task 3, said again at more length"')
    elif edit == "shrunk":  # a task's prompt removed: one unit fewer
        lines = text.split(b"\n")
        edited = b"\n".join(line for line in lines if b'"task 4"' not in line)
    elif edit == "same_size":
        edited = text.replace(b'"task 3"', b'"TASK 3"')
        stat = shard.stat()
        os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns - 10**9))  # another tick
    else:
        edited = text.replace(b'"task 3"', b'"TASK 3"')
    if edit == "replaced":  # as editors save: a new file renamed over the old
        temp = shard.with_name("edit.tmp")
        temp.write_bytes(edited)
        temp.replace(shard)
    else:
        with shard.open("r+b") as fh:
            fh.write(edited)
            fh.truncate(len(edited))
    check_all(session)


def test_appends_by_a_writer_without_the_index_are_caught_up(
    session: list[tuple[int, Path]],
) -> None:
    shard = session[1][1]
    before = trailer_of(shard)
    plain = TraceWriter(shard, index=False)
    for n in range(3):
        plain.write(message_from_dict(p.user_text(f"late {n}")))
        plain.write(message_from_dict(p.assistant_text("ok")))
    check_all(session)
    after = trailer_of(shard)  # the reader wrote what it found
    # "late 0" joins the unprompted send before it (nothing drawn between).
    assert after.units == before.units + 2
    assert after.covered == shard.stat().st_size
    TraceWriter(shard).write(message_from_dict(p.user_text("indexed again")))
    assert trailer_of(shard).units == before.units + 3
    check_all(session)


def test_a_torn_tail_reads_like_the_full_read_and_heals(session: list[tuple[int, Path]]) -> None:
    shard = session[1][1]
    whole = serialize_message(message_from_dict(p.user_text("torn")))
    with shard.open("ab") as fh:
        fh.write(whole[:-5])  # a crash mid-record
    check_all(session)
    with shard.open("ab") as fh:
        fh.write(b"\n" + whole)  # parseable, but unterminated: the reader counts it
    check_all(session)
    TraceWriter(shard).write(message_from_dict(p.user_text("after the crash")))
    check_all(session)


def test_a_read_only_data_dir_still_answers(session: list[tuple[int, Path]]) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes through a read-only mode")
    for _, shard in session:
        index_path(shard).unlink()
    os.chmod(session[0][1].parent, 0o555)
    try:
        check_all(session)
    finally:
        os.chmod(session[0][1].parent, 0o755)


def test_an_index_that_cannot_be_written_is_computed_for_the_read(
    session: list[tuple[int, Path]],
) -> None:
    for _, shard in session:
        index_path(shard).unlink()
        index_path(shard).mkdir()  # in the way of the rebuilt file
    check_all(session)
    assert all(index_path(shard).is_dir() for _, shard in session)


WRITER = textwrap.dedent(
    """
    import sys
    from omni_grpc import protocol as p
    from omni_grpc.convert import message_from_dict
    from omni_grpc.trace import TraceWriter

    path, tasks, pad = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    writer = TraceWriter(path)
    for n in range(tasks):
        writer.write(message_from_dict(p.user_text(f"task {n}")))
        writer.write(message_from_dict(p.assistant_text(f"reply {n} " + "x" * pad)))
    """
)

READER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from omni_grpc.trace.index import read_window

    path, tasks = Path(sys.argv[1]), int(sys.argv[2])
    last = -1
    reads = 0
    while True:
        page = read_window([(1, path)], 3, None)
        texts = [m.text.text for _, m in page.messages]
        ordinals = [pos[1] for pos, _ in page.messages]
        assert ordinals == list(range(ordinals[0], ordinals[0] + len(ordinals))), ordinals
        # Every record whole: after the meta, prompt n at 2n + 1, its reply next.
        for ordinal, text in zip(ordinals, texts):
            if ordinal == 0:
                continue
            n = (ordinal - 1) // 2
            want = f"task {n}" if ordinal % 2 == 1 else f"reply {n} "
            assert text.startswith(want), (ordinal, text[:40])
        newest = ordinals[-1] if ordinals else -1
        assert newest >= last, (newest, last)
        last = newest
        reads += 1
        if newest == 2 * tasks:
            break
    print(reads)
    """
)


def test_a_concurrent_writer_and_readers_never_see_a_half_record(tmp_path: Path) -> None:
    shard = trace_path_for(tmp_path, SID, 1, day=DAY)
    shard.parent.mkdir(parents=True)
    meta = p.session_meta(p.session_meta_payload(SID, "x", "y", 1, "", "", "/w"))
    TraceWriter(shard).write(message_from_dict(meta))
    tasks, pad = 300, 300_000  # records over a page: the file grows while they are written
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", READER, str(shard), str(tasks)], stdout=subprocess.PIPE
        )
        for _ in range(2)
    ]
    writer = subprocess.run(
        [sys.executable, "-c", WRITER, str(shard), str(tasks), str(pad)], check=False
    )
    assert writer.returncode == 0
    for reader in readers:
        out, _ = reader.communicate(timeout=300)
        assert reader.returncode == 0
        assert int(out) >= 1
    check_all([(1, shard)], limits=(1, 7))
    assert trailer_of(shard).covered == shard.stat().st_size


def test_concurrent_rebuilds_agree_and_leave_a_whole_index(
    session: list[tuple[int, Path]],
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    expected = full(session)
    for _, shard in session:
        index_path(shard).unlink()
    with ThreadPoolExecutor(8) as pool:
        pages = list(pool.map(lambda _: read_window(session, 2, None), range(16)))
    for page in pages:
        same(page, window(expected, 2))
    for _, shard in session:
        assert trailer_of(shard).covered == shard.stat().st_size
    assert not [p for p in session[0][1].parent.iterdir() if p.name.endswith(".tmp")]
