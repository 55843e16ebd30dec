"""The writer never blocks its producer; drops, write failures and encode errors are counted."""

from __future__ import annotations

import errno
import io
import threading
from typing import Any

import orjson

from tracer.record.writer import Record, TraceWriter


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
