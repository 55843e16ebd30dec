"""The writer never blocks its producer; drops, write failures and encode errors are counted."""

from __future__ import annotations

import errno
import gzip
import io
import os
import subprocess
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import orjson

from tracer.record.writer import GzipMemberSink, Record, TraceWriter, open_sink


def encode(item: Any) -> Record:
    return Record("test", None, orjson.dumps(item, option=orjson.OPT_APPEND_NEWLINE))


class BlockingSink(io.BytesIO):
    """A sink whose writes hang until released: a stuck disk or pipe."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def write(self, data: Any) -> int:
        self.release.wait()
        return super().write(data)

    def close(self) -> None:  # keep the buffer readable after shutdown
        pass


class FullDisk(io.BytesIO):
    def __init__(self, fail_after: int) -> None:
        super().__init__()
        self.fail_after = fail_after

    def write(self, data: Any) -> int:
        if self.tell() + len(data) > self.fail_after:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)

    def close(self) -> None:
        pass


def test_emit_never_waits_for_a_blocked_sink_and_counts_drops() -> None:
    sink = BlockingSink()
    writer = TraceWriter(sink, encode, max_queue=100, interval_s=0.001)
    done = threading.Event()

    def produce() -> None:
        for i in range(5000):
            writer.emit({"i": i})
        done.set()

    threading.Thread(target=produce, daemon=True).start()
    assert done.wait(10), "emit() blocked on a stuck sink"
    assert writer.dropped >= 5000 - 100 - 4096  # at most one queue plus one batch in flight
    sink.release.set()
    writer.shutdown(5, last=lambda: {"footer": True, "dropped": writer.dropped})
    lines = sink.getvalue().splitlines()
    footer = orjson.loads(lines[-1])
    assert footer["dropped"] == writer.dropped == 5000 - (len(lines) - 1)


def test_full_disk_stops_writing_and_counts_the_rest() -> None:
    sink = FullDisk(fail_after=200)
    writer = TraceWriter(sink, encode, interval_s=0.001)
    for i in range(10):
        writer.emit({"record": i, "pad": "x" * 20})
        writer.force_flush(2)
    writer.shutdown(2, last=lambda: {"footer": 1})
    assert writer.failed is not None and "No space left" in writer.failed
    written = sink.getvalue().splitlines()
    assert all(orjson.loads(line) for line in written)  # only whole lines before the failure
    assert writer.records_written == len(written)
    assert writer.dropped == 10 + 1 - len(written)  # the footer too could not be written


def test_an_unencodable_record_is_skipped_and_counted() -> None:
    sink = io.BytesIO()
    sink.close = lambda: None  # type: ignore[method-assign]
    writer = TraceWriter(sink, encode, interval_s=0.001)
    writer.emit({"ok": 1})
    writer.emit({"bad": object()})
    writer.emit({"ok": 2})
    writer.shutdown(2)
    assert writer.errors == 1
    assert [orjson.loads(x) for x in sink.getvalue().splitlines()] == [{"ok": 1}, {"ok": 2}]


def test_force_flush_writes_everything_emitted() -> None:
    sink = io.BytesIO()
    writer = TraceWriter(sink, encode, interval_s=10)  # only flush wakes it
    for i in range(3):
        writer.emit(i)
    assert writer.force_flush(5)
    assert sink.getvalue() == b"0\n1\n2\n"
    writer.shutdown(2)


def _members(data: bytes) -> list[bytes]:
    """Each gzip member's decompressed bytes, in file order."""
    out = []
    while data:
        d = zlib.decompressobj(wbits=31)
        out.append(d.decompress(data))
        assert d.eof, "a member was left open"
        data = d.unused_data
    return out


def test_gz_sink_writes_independent_members_that_read_as_one_stream(tmp_path: Path) -> None:
    path = tmp_path / "t.gz"
    sink = open_sink(path)
    writer = TraceWriter(sink, encode, interval_s=0.001)
    records = [{"i": i, "pad": "x" * (i % 700)} for i in range(30_000)]  # ~11 MB: several members
    for rec in records:
        while not writer.emit(rec):
            time.sleep(0.001)
    writer.shutdown()
    data = path.read_bytes()
    expected = b"".join(encode(r).line for r in records)
    members = _members(data)
    assert len(members) >= 3 and sink.members == len(members)
    assert all(m.endswith(b"\n") for m in members), "a member ends inside a record"
    limit = GzipMemberSink.MEMBER_BYTES + 2048  # a member ends at the first record past the size
    assert all(len(m) < limit for m in members), [len(m) for m in members]
    assert b"".join(members) == expected
    with gzip.open(path) as f:
        assert f.read() == expected
    zcat = subprocess.run(["gzip", "-dc", str(path)], capture_output=True, check=True)
    assert zcat.stdout == expected


def test_gz_sink_flushed_records_survive_a_kill(tmp_path: Path) -> None:
    """A killed server never closes its last member: every flushed record still reads."""
    path = tmp_path / "t.gz"
    sink = open_sink(path)
    writer = TraceWriter(sink, encode, interval_s=0.001)
    for i in range(200):
        writer.emit({"i": i})
    assert writer.force_flush()
    data = path.read_bytes()  # the open member, synced but never finished
    d = zlib.decompressobj(wbits=31)
    got = d.decompress(data)
    assert not d.eof
    assert got == b"".join(encode({"i": i}).line for i in range(200))
    writer.shutdown()


def test_gz_sink_reports_a_full_disk() -> None:
    """A raw file that accepts nothing any more fails the writer; the records that fit are counted."""
    disk = FullDisk(fail_after=300)
    writer = TraceWriter(GzipMemberSink(disk, member_bytes=64), encode, interval_s=0.001)
    for i in range(5_000):
        writer.emit({"i": i, "noise": os.urandom(16).hex()})
    writer.shutdown()
    assert writer.failed is not None and writer.dropped > 0
    assert writer.records_written + writer.dropped + writer.errors == 5_000


def test_shutdown_keeps_its_bound_while_the_index_follower_lags(tmp_path: Path) -> None:
    """A recording index follower still behind (here a real process that never finishes) is left to
    finish on its own: the writer's shutdown stays within the bound its caller gave."""
    from tracer.record.indexer import IndexProcess

    lagging = subprocess.Popen(["sleep", "30"], stdin=subprocess.PIPE, start_new_session=True)
    try:
        sink = open_sink(tmp_path / "t.jsonl")
        writer = TraceWriter(sink, encode, interval_s=0.001, index=IndexProcess(lagging))
        writer.emit({"a": 1})
        t0 = time.monotonic()
        writer.shutdown(timeout=0.5)
        assert time.monotonic() - t0 < 2.0
        assert lagging.poll() is None  # not killed: it finishes its index on its own
        assert (tmp_path / "t.jsonl").read_bytes() == b'{"a":1}\n'
    finally:
        lagging.kill()
        lagging.wait()


class Sink(io.BytesIO):
    def close(self) -> None:  # keep the buffer readable after shutdown
        pass


def _timed_waits(writer: TraceWriter) -> list[float | None]:
    """Every wait of the writer's wake-up, by its timeout (None: until woken)."""
    seen: list[float | None] = []
    wait = writer._pace.wake.wait

    def counted(timeout: float | None = None) -> bool:
        seen.append(timeout)
        return wait(timeout)

    writer._pace.wake.wait = counted  # type: ignore[method-assign]
    return seen


def test_an_idle_writer_sleeps_until_a_record_comes() -> None:
    """No timed wakes while nothing is emitted (each costs EngineCore's GIL a hand-over); the
    first record after an idle spell wakes the writer at once, with no flush asked."""
    sink = Sink()
    writer = TraceWriter(sink, encode, max_queue=100, interval_s=0.01)
    seen = _timed_waits(writer)
    time.sleep(0.3)  # 30 intervals
    assert [t for t in seen if t is not None] == [] and writer._pace.idle, seen
    writer.emit({"n": 1})
    deadline = time.monotonic() + 2
    while not sink.getvalue() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert sink.getvalue() == b'{"n":1}\n'
    writer.shutdown()


def test_a_burst_wakes_a_writer_before_its_interval() -> None:
    """Records come in: the writer takes them each interval, or as soon as WAKE_BACKLOG are
    queued (so steps keep handing their token lists over uncounted)."""
    from tracer.record.writer import WAKE_BACKLOG

    sink = Sink()
    writer = TraceWriter(sink, encode, max_queue=10_000, interval_s=30.0)
    writer.emit({"n": 0})  # wakes the idle writer, which then waits its 30 s interval
    time.sleep(0.2)
    for n in range(1, WAKE_BACKLOG):
        writer.emit({"n": n})
    time.sleep(0.2)
    assert sink.getvalue().count(b"\n") == 1  # the rest wait for the interval
    writer.emit({"n": WAKE_BACKLOG})
    writer.emit({"n": WAKE_BACKLOG + 1})  # the one that finds WAKE_BACKLOG queued wakes it
    deadline = time.monotonic() + 2
    while sink.getvalue().count(b"\n") < WAKE_BACKLOG + 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert sink.getvalue().count(b"\n") == WAKE_BACKLOG + 2
    writer.shutdown()
