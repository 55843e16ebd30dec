"""Live OpenTelemetry spans: each request of a running server, as `schedscope export --otlp` makes it.

    SCHEDSCOPE_OTLP=http://collector:4318 SCHEDSCOPE_TRACE=/tmp/run.jsonl vllm serve … \
        --scheduler-cls tracer.scheduler.TracingScheduler

A writer tap in the trace process (tracer.live.trace_process), never in EngineCore. The tap only
appends the records it is handed. Its own thread, at most every `interval` seconds (and, after
a build that took long, `BUSY_FACTOR` times its duration), builds a Trace of the records it keeps
(tracer.trace.builder.TraceBuilder) and hands the requests that finished since to the very code
the export uses (tracer.analysis.request_phases, then tracer.render.otlp's spans, ids and
resource), so a request's live spans are its exported ones. Another thread sends them
(tracer.send_spans, the SDK's OTLP/HTTP exporter, `timeout` seconds a batch, retries included)
from a bounded queue.

What is kept stays bounded: only the records from the first step of the oldest request not yet
sent (the window); older ones are let go. A request is sent once `SETTLE_STEPS` steps followed
the step that finished it, as the end of its last step is the start of a later one; at the end
of the trace every request left is sent (those still open as `schedscope.finished` false), as
the export does. A window past `MAX_WINDOW_BYTES` (requests open that long) gives up its oldest
requests; their spans so far are counted as dropped. Two facts the analysis reads off the whole
trace are read off the window: whether the run schedules asynchronously (its first 64 steps,
tracer.analysis.timing.duration_lag) and where TTFT starts (every request's arrival known,
throughput's `basis`); both hold for a server's whole run.

A collector that is down, refusing or slow costs the server nothing: the trace process writes,
streams and counts on its own threads; spans that find the queue full, or whose batch the
collector did not take, are dropped and counted (`schedscope_otlp_spans_dropped_total` on
/metrics, and in the log: the first failure, and the totals at the end).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any

from tracer.analysis.request_phases import NoWallClock, request_phases
from tracer.analysis.requests import request_events
from tracer.analysis.session import Session
from tracer.analysis.step_features import step_pass
from tracer.record.writer import Record
from tracer.render import otlp
from tracer.render.parquet import engine_name
from tracer.send_spans import Delivery, endpoint_url, send
from tracer.trace import schema
from tracer.trace.builder import TraceBuilder

logger = logging.getLogger("schedscope.otlp")

ENV_OTLP = "SCHEDSCOPE_OTLP"
INTERVAL = 1.0  # seconds between two builds of the spans of the requests that finished
TIMEOUT = 5.0  # seconds a batch gets, the exporter's retries included
SETTLE_STEPS = 4  # steps after a request's finish before its last step's end is known
MAX_WINDOW_BYTES = 64 << 20  # records kept for the requests not yet sent
MAX_QUEUED_SPANS = 16384  # spans waiting for the collector; beyond: dropped, counted
FINAL_S = 5.0  # at the end, how long the last spans get (none after a failed batch)
# A build re-reads the window: with long requests at high concurrency it takes a few hundred ms.
# Waiting BUSY_FACTOR times as long as the last build took keeps it to a fifth of a core, so the
# trace process's writer (and its stream and metrics) keep their time; the spans come later.
BUSY_FACTOR = 4.0


class LiveSpans:
    """A TraceWriter tap (`tap`) sending each request's spans to `endpoint` (an OTLP/HTTP URL)."""

    def __init__(
        self,
        endpoint: str,
        *,
        path: str | None,
        engine: str,
        interval: float = INTERVAL,
        timeout: float = TIMEOUT,
        max_queued: int = MAX_QUEUED_SPANS,
        max_window: int = MAX_WINDOW_BYTES,
        start: bool = True,
    ) -> None:
        otlp.require()
        self.url = endpoint_url(endpoint)
        self.path = path
        self.engine = engine  # without a trace file; with one, the file's name (as the export's)
        self.interval = interval
        self.timeout = timeout
        self.max_queued = max_queued
        self.max_window = max_window
        self.sent = 0  # spans the collector took
        self.dropped = 0  # spans it did not, or that found the queue full or the window past its bound
        self.requests = 0  # requests whose spans were made
        self.errors = 0  # builds that raised (logged once)
        self.failure: str | None = None  # the last batch's failure; None once one is taken again
        self.queue_full = 0  # batches that found the queue full (the first is logged)
        self.window_steps = 0  # the steps of the last window built (tests watch it stay small)
        self.lines_dropped = 0  # records the builds fell too far behind to keep (logged once)
        self._header: bytes | None = None
        self._pending: list[Record] = []
        self._pending_bytes = 0
        self._pending_lock = threading.Lock()  # held only to append or swap the list
        self._window: list[Record] = []  # the records from the oldest unsent request's first step
        self._window_bytes = 0
        self._done: set[str] = set()  # ids handed on (or given up) that the window still holds
        self._ended = False  # the footer came: the next build sends every request left
        self._res: Any = None
        self._run = ""  # the run's start time, as the export's ids take it
        self._clockless = False
        self._queue: deque[list[Any]] = deque()
        self._queued = 0  # spans in _queue
        self._in_flight = 0  # spans of the batch being sent
        self._count_lock = threading.Lock()
        self._wake_build = threading.Event()
        self._wake_send = threading.Event()
        self._closed = False
        self._build_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        if start:
            loops = (("schedscope-spans", self._build_loop), ("schedscope-otlp", self._send_loop))
            for name, target in loops:
                thread = threading.Thread(target=target, name=name, daemon=True)
                thread.start()
                self._threads.append(thread)

    # -- writer thread ---------------------------------------------------------------------
    def tap(self, records: list[Record]) -> None:
        """Keep the records for the next build (never waits for one, nor for the collector)."""
        with self._pending_lock:
            for record in records:
                if record.kind == schema.HEADER:
                    if self._header is None:
                        self._header = record.line
                elif record.kind == schema.FOOTER:
                    self._ended = True
                    self._wake_build.set()
                elif self._pending_bytes + len(record.line) > self.max_window:
                    self.lines_dropped += 1
                    if self.lines_dropped == 1:
                        logger.warning("schedscope: %s", otlp.live_behind_line())
                else:
                    self._pending.append(record)
                    self._pending_bytes += len(record.line)

    # -- the build thread ------------------------------------------------------------------
    def _build_loop(self) -> None:
        took = 0.0
        while not self._closed:
            self._wake_build.wait(max(self.interval, BUSY_FACTOR * took))
            self._wake_build.clear()
            began = time.thread_time()
            self.build()
            took = time.thread_time() - began

    def build(self, *, final: bool = False) -> int:
        """Make the spans of the requests ready to send and queue them; returns how many spans.
        `final` (or a footer seen): every request left."""
        with self._build_lock:
            try:
                return self._build(final or self._ended)
            except Exception:  # never let the spans touch the trace, the stream or the metrics
                self.errors += 1
                if self.errors == 1:
                    logger.exception("schedscope: could not make OTLP spans of the trace's requests")
                return 0

    def _build(self, final: bool) -> int:
        with self._pending_lock:
            header, records, self._pending = self._header, self._pending, []
            self._pending_bytes = 0
        if not records and not final:
            return 0  # no new step: no request finished or settled since the last build
        self._window.extend(records)
        self._window_bytes += sum(len(r.line) for r in records)
        if header is None or self._clockless or not any(r.kind == schema.STEP for r in self._window):
            return 0
        builder = TraceBuilder(self.path or "<live>", strict=False)
        builder.feed(header + b"".join(r.line for r in self._window))
        trace = builder.build()
        self.window_steps = len(trace)
        session = Session(trace)
        try:
            phases = request_phases(session, skip=self._done)
        except NoWallClock as exc:
            self._clockless = True
            logger.error("schedscope: no OTLP spans: %s", otlp.no_wall_clock(exc))
            return 0
        if self._res is None:
            if self.path is not None:
                self.engine = engine_name(trace)
            self._res = otlp.resource(self.engine, trace.header, str(trace.path))
            self._run = str(trace.header.get("start_time"))
        times = step_pass(trace).requests
        self._done &= set(times.ids)  # ids no longer in the window cannot come back
        steps = trace.columns["step"]
        last = int(steps[-1])
        events = request_events(trace)
        ready, held = [], []
        for p in phases:
            ev = events.get(p.id)
            finished = ev is not None and ev.finished is not None and ev.finished <= last - SETTLE_STEPS
            (ready if final or finished else held).append(p)
        # The window keeps the records from the first step of every request still held.
        row = {rid: i for i, rid in enumerate(times.ids)}
        queued = times.arrived.copy()
        queued[queued < 0] = times.seen[queued < 0]
        firsts = sorted((int(steps[queued[row[p.id]]]), p.id) for p in held)
        keep_from = firsts[0][0] if firsts else last + 1
        given_up = []
        if self._window_bytes > self.max_window:  # a request that never ends: the oldest go
            keep_from = max(keep_from, self._step_at_half())
            given_up = [p for p in held if int(steps[queued[row[p.id]]]) < keep_from]
        self._trim(keep_from)
        spans = self._enqueue(ready, given_up)
        self._done.update(p.id for p in ready)
        self._done.update(p.id for p in given_up)
        return spans

    def _step_at_half(self) -> int:
        """The step from which the window holds at most half its bound."""
        kept = 0
        for record in reversed(self._window):
            kept += len(record.line)
            if kept > self.max_window // 2:
                return record.step + 1
        return self._window[0].step

    def _trim(self, keep_from: int) -> None:
        if self._window and self._window[0].step < keep_from:
            self._window = [r for r in self._window if r.step >= keep_from]
            self._window_bytes = sum(len(r.line) for r in self._window)

    def _enqueue(self, ready: list[Any], given_up: list[Any]) -> int:
        lost = otlp.span_count(given_up)
        if lost:
            logger.warning("schedscope: %s", otlp.live_window_line(len(given_up), lost))
        made = 0
        with self._count_lock:
            self.dropped += lost
            for batch in otlp.batches(ready, self._res, self.engine, self._run):
                made += len(batch)
                if self._closed or self._queued + len(batch) > self.max_queued:
                    self.dropped += len(batch)
                    self.queue_full += 1
                    if self.queue_full == 1:
                        logger.warning("schedscope: %s", otlp.live_queue_line(self.url, self.max_queued))
                    continue
                self._queue.append(batch)
                self._queued += len(batch)
            self.requests += len(ready)
        if made:
            self._wake_send.set()
        return made

    # -- the sending thread ----------------------------------------------------------------
    def _send_loop(self) -> None:
        while True:
            self._wake_send.wait(self.interval)
            self._wake_send.clear()
            while True:
                with self._count_lock:
                    if self._closed or not self._queue:
                        break
                    batch = self._queue.popleft()
                    self._queued -= len(batch)
                    self._in_flight = len(batch)
                try:
                    done = send([batch], len(batch), self.url, timeout=self.timeout)
                except Exception as exc:  # the exporter itself failed: this batch is lost, counted
                    done = Delivery(self.url, len(batch), 0, 0.0, f"{type(exc).__name__}: {exc}")
                with self._count_lock:
                    if self._in_flight:  # else close() counted it as dropped already
                        self._in_flight = 0
                        self.sent += done.sent
                        if done.failure is not None:
                            self.dropped += done.dropped
                            if self.failure is None:  # the first failure, and the first after a recovery
                                line = otlp.live_failed_line(self.url, done.failure, done.dropped)
                                logger.warning("schedscope: %s", line)
                            self.failure = done.failure
                        else:
                            self.failure = None
            if self._closed:
                return

    # -- the end ---------------------------------------------------------------------------
    def close(self, timeout: float = FINAL_S) -> None:
        """Send every request left, waiting up to `timeout` for the collector (not at all after
        a failed batch); what is left then is dropped and counted. Logs the totals."""
        if self._closed:
            return
        self.build(final=True)
        deadline = time.monotonic() + timeout
        self._wake_send.set()
        while time.monotonic() < deadline:
            with self._count_lock:
                if (not self._queue and not self._in_flight) or self.failure is not None:
                    break
            time.sleep(0.02)
        with self._count_lock:
            self._closed = True
            left = self._queued + self._in_flight
            self._queue.clear()
            self._queued = self._in_flight = 0
            self.dropped += left
        self._wake_send.set()
        self._wake_build.set()
        line = otlp.live_totals_line(self.url, self.requests, self.sent, self.dropped)
        (logger.warning if self.dropped else logger.info)("schedscope: %s", line)
