"""Background trace writer: emit() never blocks, a daemon thread encodes and writes.

Modelled on OpenTelemetry's BatchProcessor. The scheduler thread only appends
a cheap typed snapshot to a bounded deque; when the deque is full the item is
dropped and counted. Building and encoding (orjson) and I/O happen on the
writer thread; the encoder turns each item into a `Record`, and taps (the
live stream, the metrics) get the records with their kind and step already
known, so none of them has to look inside the bytes. A write
error (a full disk, a closed pipe) stops writing for good and counts every
later record as dropped, so the file ends at a clean or torn line, never with
garbage in the middle.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Sequence, Sized
from pathlib import Path
from typing import IO, Any, NamedTuple

import orjson

from tracer.record.indexer import IndexProcess
from tracer.record.snapshot import LAZY_BACKLOG
from tracer.trace import schema

logger = logging.getLogger("schedscope.writer")


class Record(NamedTuple):
    """One encoded trace record: its kind and step (None for records without one:
    header, footer) beside the line written (JSON, newline-terminated)."""

    kind: str
    step: int | None
    line: bytes


Encoder = Callable[[Any], "Record | None"]
Tap = Callable[[list[Record]], None]


def open_sink(path: str | Path) -> IO[bytes]:
    """Open a trace file for appending; `.gz` is compressed transparently, in members."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        return GzipMemberSink(open(path, "ab", buffering=0))  # type: ignore[return-value]
    return open(path, "ab", buffering=0)


class GzipMemberSink:
    """gzip written as independent members of about `member_bytes` uncompressed each,
    each ending where a record ends. Concatenated members are one valid gzip stream
    (`zcat`, `gzip.open` read it whole), and a reader can index them and decompress only
    the member holding a step (tracer.trace.store.GzipMemberStore). flush() syncs the
    deflate stream, as gzip.GzipFile does: a killed server leaves every flushed record
    readable from a truncated last member."""

    # 1 MiB of records a member: a random step decompresses in about 1.5 ms (4 MiB: 6-9 ms,
    # near a viewer's 50 ms per key with a step view on top) for 1.7% more bytes than 4 MiB.
    MEMBER_BYTES = 1 << 20

    def __init__(self, raw: IO[bytes], *, member_bytes: int = MEMBER_BYTES, level: int = 3) -> None:
        self._raw = raw
        self._member_bytes = member_bytes
        self._level = level
        self._z: Any = None  # the open member's compressor
        self._in = 0  # uncompressed bytes in the open member
        self.members = 0  # members finished

    def write(self, data: bytes | memoryview) -> int:
        if self._z is None:
            self._z = zlib.compressobj(self._level, zlib.DEFLATED, 31)
            self._in = 0
        self._put(self._z.compress(data))
        self._in += len(data)
        if self._in >= self._member_bytes and data[-1:] == b"\n":
            self._end_member()
        return len(data)

    def _put(self, out: bytes) -> None:
        view = memoryview(out)
        while view:
            n = self._raw.write(view)
            if not n:
                raise OSError(errno.ENOSPC, "the trace file accepted no more bytes")
            view = view[n:]

    def _end_member(self) -> None:
        z, self._z = self._z, None
        self._put(z.flush(zlib.Z_FINISH))
        self.members += 1

    def flush(self) -> None:
        if self._z is not None:
            self._put(self._z.flush(zlib.Z_SYNC_FLUSH))
        self._raw.flush()

    def close(self) -> None:
        try:
            if self._z is not None:
                self._end_member()
        finally:
            self._raw.close()


# Items queued at which emit() wakes the writer side before its interval is up: half of
# LAZY_BACKLOG, under which steps hand their token lists over uncounted, so a burst of fast
# steps is taken before the scheduler thread has to count them itself.
WAKE_BACKLOG = LAZY_BACKLOG // 2
# The interval of a writer-side thread in EngineCore (a shipper, or a writer thread there).
ENGINE_INTERVAL_S = 0.1


class Pace:
    """When a writer-side thread wakes: every `interval_s` while records come, and not at all
    once a whole interval brought none, until `emit` (which checks `idle`) or a flush wakes it.

    A timed wake is not free in EngineCore: measured on a live CPU server, each cost the
    waking thread 70-80 µs of CPU (taking the GIL back from the busy scheduler thread), so 50
    wakes a second of an idle or lightly loaded server came to more than the records' own
    shipping. Sleeping while idle and batching by the interval while busy keeps both small.
    """

    __slots__ = ("idle", "interval_s", "timed", "wake")

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.wake = threading.Event()
        self.idle = False  # read by emit(): True while the thread waits for a first record
        self.timed = False  # whether the next wait is an interval's (records were just taken)

    def wait(self, queue: Sized, stop: threading.Event) -> None:
        """Return when `queue` has items to take (or `stop` is set): after an interval while
        records come, or at once on an emit after an idle spell (a new thread starts idle)."""
        if self.timed:
            self.wake.wait(self.interval_s)
            self.wake.clear()
            if queue or stop.is_set():
                return
        self.idle = True
        # An emit after this line sees `idle` and sets `wake`; one before it left an item.
        if not queue and not stop.is_set():
            self.wake.wait()
        self.wake.clear()
        self.idle = False
        self.timed = True


class TraceWriter:
    """Bounded, non-blocking queue in front of a sink, drained by a daemon thread."""

    def __init__(
        self,
        sink: IO[bytes],
        encode: Encoder | None = None,
        *,
        max_queue: int = 65_536,
        interval_s: float = 0.02,
        name: str = "schedscope-writer",
        taps: Sequence[Tap] = (),
        index: IndexProcess | None = None,
    ) -> None:
        self._sink = sink
        # The process following the file `sink` writes, building its recording index: told when
        # the file is closed. None for gzip, a stream only, or off.
        self._index = index
        # Taps (the live stream) see every encoded record, on the writer thread,
        # even after the file failed; they must not block.
        self._taps = list(taps)
        # None until its owner binds one (`bind`), before it emits anything.
        self._encode = encode
        self._max_queue = max_queue
        self._queue: deque[Any] = deque()
        self._pace = Pace(interval_s)
        self._stop = threading.Event()
        self._flushed = threading.Condition()
        self._emitted = 0  # items accepted by emit(), scheduler thread only
        self._done = 0  # items handled (written, dropped or failed), writer thread only
        # Producer and consumer count drops separately, so neither races the other.
        self._dropped_emit = 0
        self._dropped_write = 0
        self.errors = 0
        # CPU seconds this writer's thread has used (it sets them; the footer's writer_thread_s)
        self.cpu_s = 0.0
        self.records_written = 0
        self.failed: str | None = None
        self._closed = False
        # The footer's facts kept current in a file of their own (keep_footer): fd, path, builder.
        self._kept: tuple[int, Path, Callable[[], dict[str, Any]]] | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def bind(self, encode: Encoder) -> None:
        """Set the encoder: the Recorder that owns this writer binds its own (it builds
        step records from its snapshots), before emitting its first item."""
        self._encode = encode

    def keep_footer(self, path: Path, facts: Callable[[], dict[str, Any]]) -> None:
        """Keep `facts()` (the footer as it would be now) in `path`, rewritten in place after
        every drain: a process killed before `shutdown` leaves the footer's facts there. Locked
        (flock) while this writer lives; removed once the real footer is written. Best effort: a
        file that cannot be made is no fault."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as exc:
            logger.warning("schedscope: cannot keep the footer's facts in %s: %s", path, exc)
            return
        with contextlib.suppress(OSError):  # held while this process lives (a kill releases it)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._kept = (fd, path, facts)

    def _write_kept(self) -> None:
        kept = self._kept
        if kept is None:  # (after a write failure too: the facts then name it)
            return
        fd, _, facts = kept
        try:
            line = orjson.dumps(facts())
            if len(line) < schema.KEPT_FOOTER_BYTES:  # one pwrite of one size: never a torn mix
                os.pwrite(fd, line.ljust(schema.KEPT_FOOTER_BYTES), 0)
        except Exception:
            self.errors += 1

    def _end_kept(self, written: bool) -> None:
        kept, self._kept = self._kept, None
        if kept is None:
            return
        fd, path, _ = kept
        try:
            os.close(fd)
            if written:  # the trace holds its footer: the kept copy has done its job
                os.unlink(path)
        except OSError:
            pass

    # -- producer side: must stay cheap and never block -------------------------
    def emit(self, item: Any) -> bool:
        """Queue one item; drop and count it if the queue is full or closed."""
        queued = len(self._queue)
        if self._closed or queued >= self._max_queue:
            self._dropped_emit += 1
            if self._dropped_emit == 1:
                logger.warning("schedscope: trace queue full or closed, dropping records")
            return False
        self._queue.append(item)
        self._emitted += 1
        if self._pace.idle or queued == WAKE_BACKLOG:  # asleep until a record came, or a burst
            self._pace.wake.set()
        return True

    @property
    def backlog(self) -> int:
        """Items emitted and not yet taken by the writer side."""
        return len(self._queue)

    @property
    def dropped(self) -> int:
        return self._dropped_emit + self._dropped_write

    # -- control -----------------------------------------------------------------
    def force_flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything emitted so far is written; False on timeout."""
        target = self._emitted
        self._pace.wake.set()
        deadline = time.monotonic() + timeout
        with self._flushed:
            while self._done < target and self._thread.is_alive():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._flushed.wait(min(left, 0.05))
        return self._done >= target or not self._thread.is_alive()

    def shutdown(self, timeout: float = 5.0, last: Callable[[], Any] | None = None) -> None:
        """Drain, write `last()` (the footer, built after the drain so its counts
        are final) if given, and close the sink. Idempotent."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + timeout  # the whole shutdown, the index's wait included
        self._stop.set()
        self._pace.wake.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("schedscope: writer did not drain within %.1fs", timeout)
            return
        if last is not None:
            self._write_batch([last()])
        try:
            self._sink.close()
        except OSError as exc:
            self._fail(exc)
        self._end_kept(written=last is not None and self.failed is None)
        if self._index is not None:
            # Its last segment (the footer's, or a torn file's last whole record's) within what is
            # left of `timeout`; a follower still behind finishes it on its own.
            self._index.close(max(0.0, deadline - time.monotonic()))
        if self.dropped:
            logger.warning("schedscope: %d trace records dropped", self.dropped)

    def write_now(self, items: list[Any]) -> None:
        """Encode and write `items` on the caller's thread, then the footer's facts: for the
        trace process (tracer.live.trace_process), whose main thread does nothing else and
        calls `emit` never, so this thread's queue stays empty."""
        self._write_batch(items)
        self._write_kept()

    # -- consumer side -------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._pace.wait(self._queue, self._stop)
            self._drain()
            if self._stop.is_set() and not self._queue:
                return

    def _drain(self) -> None:
        queue = self._queue
        while queue:
            batch = []
            while queue and len(batch) < 4096:
                batch.append(queue.popleft())
            self._write_batch(batch)
            self.cpu_s = time.thread_time()
            if not queue:  # everything emitted so far is in the file: so are the facts
                self._write_kept()
            with self._flushed:
                self._done += len(batch)
                self._flushed.notify_all()

    def _write_batch(self, batch: list[Any]) -> None:
        if self.failed is not None and not self._taps:
            self._dropped_write += len(batch)
            return
        records = []
        encode = self._encode
        for item in batch:
            try:
                record = encode(item)  # type: ignore[misc]  # bound before the first emit
            except Exception:  # a bad record must not stop the trace
                self.errors += 1
                if self.errors == 1:
                    logger.exception("schedscope: could not encode a trace record")
                continue
            if record is not None:
                records.append(record)
        if not records:
            return
        for tap in self._taps:
            try:
                tap(records)
            except Exception:
                self.errors += 1
                if self.errors == 1:
                    logger.exception("schedscope: a trace tap failed")
        if self.failed is not None:
            self._dropped_write += len(records)
            return
        # Record by record, each in full: on a disk that fills up, every record that fit
        # is kept whole (a raw file's write may also stop short without raising).
        write = self._sink.write
        for i, record in enumerate(records):
            try:
                view = memoryview(record.line)
                while view:
                    n = write(view)
                    if not n:
                        raise OSError(errno.ENOSPC, "the trace file accepted no more bytes")
                    view = view[n:]
            except (OSError, ValueError) as exc:
                self._dropped_write += len(records) - i
                self._fail(exc)
                return
            self.records_written += 1
        try:
            self._sink.flush()
        except (OSError, ValueError) as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if self.failed is None:
            self.failed = f"{type(exc).__name__}: {exc}"
            logger.error("schedscope: trace writing stopped (%s); later records are dropped", exc)
