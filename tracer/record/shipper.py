"""The server's writer: snapshots shipped to the trace process, which encodes and writes them.

Building and encoding a step's record, the live stream and the /metrics counting all cost
Python time; on a writer thread in EngineCore they hold the GIL the scheduler needs. So a
server hands them to a process of its own (tracer.live.trace_process): EngineCore keeps the
scheduler thread's snapshots and, on this shipper's thread, makes each batch portable (request
objects to ids, statuses to names: tracer.record.snapshot.portable), pickles it (C) and
writes it to the process's stdin (the GIL released while the pipe takes it).

emit() is TraceWriter's: a bounded deque, never blocking; full, it drops and counts. A
process that falls behind fills the pipe, the shipper's thread waits on it, the deque fills
and records are dropped and counted, never waited for. A process that died (or never started)
turns every later record into a counted drop. The process outlives a killed EngineCore: at
the end of its input it writes what it got, and the footer's kept facts say how far it went.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tracer
from tracer.record.snapshot import portable
from tracer.record.writer import ENGINE_INTERVAL_S, WAKE_BACKLOG, Pace

logger = logging.getLogger("schedscope.writer")

FRAME = struct.Struct("<I")  # each frame: its length, then pickle of (items, facts, end)
BATCH = 4096


def frame(payload: Any) -> bytes:
    """One frame: its length, then `payload` pickled."""
    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    return FRAME.pack(len(data)) + data


def write_whole(fd: int, data: bytes) -> None:
    """All of `data` to `fd` (os.write releases the GIL while the pipe is full)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class TraceShipper:
    """Bounded, non-blocking queue in front of the trace process, drained by a daemon thread."""

    def __init__(
        self, proc: subprocess.Popen[bytes], *, max_queue: int, interval_s: float = ENGINE_INTERVAL_S
    ) -> None:
        self._proc = proc
        assert proc.stdin is not None
        self._fd = proc.stdin.fileno()
        self._max_queue = max_queue
        self._queue: deque[Any] = deque()
        self._pace = Pace(interval_s)
        self._stop = threading.Event()
        self._flushed = threading.Condition()
        self._emitted = 0  # scheduler thread only
        self._done = 0  # shipper thread only
        self._dropped_emit = 0
        self._dropped_ship = 0
        self.errors = 0
        # CPU seconds this shipper's thread has used (it sets them; the footer's writer_thread_s)
        self.cpu_s = 0.0
        self.failed: str | None = None
        self._closed = False
        self._facts: Callable[[], dict[str, Any]] | None = None
        self._thread = threading.Thread(target=self._run, name="schedscope-shipper", daemon=True)
        self._thread.start()

    @classmethod
    def start(
        cls,
        path: Path | None,
        *,
        max_queue: int,
        stream_at: str = "",
        stream_token: str | None = None,
        metrics_at: str = "",
        metrics_token: str | None = None,
        engine: str = "0",
        otlp: str = "",
        otlp_timeout: float = 5.0,
    ) -> TraceShipper | None:
        """The trace process for `path` (None: no file, the stream or metrics only), or None if
        it cannot start (the caller then writes on a thread of its own)."""
        if path is not None:  # one run per file, there from the scheduler's start (the process appends)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.unlink(missing_ok=True)
                path.touch()
            except OSError as exc:
                logger.warning("schedscope: cannot create %s (%s); writing on a thread", path, exc)
                return None
        # The package's own location first: the server may have found it some other way. The
        # tokens stay in the environment the process inherits, off its command line.
        root = str(Path(tracer.__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        for name, token in (
            ("SCHEDSCOPE_STREAM_TOKEN", stream_token),
            ("SCHEDSCOPE_METRICS_TOKEN", metrics_token),
        ):
            env.pop(name, None)
            if token:
                env[name] = token
        argv = [sys.executable, "-m", "tracer.live.trace_process", str(path) if path is not None else "-"]
        argv += ["--queue", str(max_queue), "--stream", stream_at, "--metrics", metrics_at]
        argv += ["--engine", engine]
        if otlp:
            argv += ["--otlp", otlp, "--otlp-timeout", repr(otlp_timeout)]
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                env=env,
                close_fds=True,
                # Its own session: a Ctrl-C to the server's group lets it finish the trace.
                start_new_session=True,
            )
        except OSError as exc:
            logger.warning("schedscope: cannot start the trace process (%s); writing on a thread", exc)
            return None
        return cls(proc, max_queue=max_queue)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def keep_footer(self, path: Path, facts: Callable[[], dict[str, Any]]) -> None:
        """The process keeps the footer's facts beside the trace (`path`); this side's part of
        them (records dropped here, errors) goes with every frame."""
        self._facts = facts

    # -- producer side: as TraceWriter.emit ----------------------------------------------
    def emit(self, item: Any) -> bool:
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
        return self._dropped_emit + self._dropped_ship

    # -- control ---------------------------------------------------------------------------
    def force_flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything emitted so far is in the pipe (not yet in the file: the
        process writes it when it reads it); False on timeout."""
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
        """Ship what is queued and the end (the footer's facts from `last`), and wait up to
        `timeout` in all for the process to write the footer and exit. Idempotent."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + timeout
        if last is not None:
            self._facts = last
        self._stop.set()
        self._pace.wake.set()
        self._thread.join(timeout)
        if self._thread.is_alive():  # the process stopped reading: it is not waited for
            logger.warning("schedscope: the trace process took not the last records in %.1fs", timeout)
            return
        self._ship([], end=True)
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._proc.stdin = None  # closed above; Popen must not close it again
        try:
            self._proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            logger.info("schedscope: the trace process is still writing (pid %d)", self._proc.pid)
        if self.dropped:
            logger.warning("schedscope: %d trace records dropped", self.dropped)

    # -- consumer side -----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._pace.wait(self._queue, self._stop)
            queue = self._queue
            while queue:
                batch = []
                while queue and len(batch) < BATCH:
                    batch.append(queue.popleft())
                self._ship(batch)
                self.cpu_s = time.thread_time()
                with self._flushed:
                    self._done += len(batch)
                    self._flushed.notify_all()
            if self._stop.is_set() and not self._queue:
                return

    def _ship(self, batch: list[Any], *, end: bool = False) -> None:
        if self.failed is not None:
            self._dropped_ship += len(batch)
            return
        items = []
        for item in batch:
            try:
                items.append(portable(item))
            except Exception:  # one bad snapshot must not stop the trace
                self.errors += 1
                if self.errors == 1:
                    logger.exception("schedscope: could not ship a trace record")
        try:
            facts = self._facts() if self._facts is not None else None
            data = frame((items, facts, end))
        except Exception:  # an item that does not pickle: this batch is lost, counted
            self.errors += 1
            self._dropped_ship += len(items)
            if self.errors == 1:
                logger.exception("schedscope: could not ship a batch of trace records")
            return
        try:
            write_whole(self._fd, data)
        except OSError as exc:
            self._dropped_ship += len(items)
            self.failed = f"{type(exc).__name__}: {exc}"
            logger.error("schedscope: the trace process stopped taking records (%s); dropping", exc)
