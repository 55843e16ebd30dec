"""Prometheus metrics from the tracer's own records, served from the EngineCore.

    SCHEDSCOPE_METRICS=127.0.0.1:8800 vllm serve … --scheduler-cls tracer.scheduler.TracingScheduler
    curl http://127.0.0.1:8800/metrics            # or /metrics on the SCHEDSCOPE_STREAM server

The counters are computed from the very records the trace writer encodes (a
writer tap, like the stream hub), by the same code as `schedscope flags`:
`tracer.trace.builder.TraceBuilder` builds a small Trace from each batch, and
`tracer.analysis.budget.analyze`,
`tracer.analysis.flags.detect` and why's per-step pass (`tracer.analysis.why`: the waiting
requests by reason, the preemptions by trigger) run over it. So a scrape's totals are the trace's
totals, and the scheduler thread pays nothing: the tap only appends records;
they are turned into counters at most every PROCESS_INTERVAL where the records are
written (the trace process, or the writer thread with SCHEDSCOPE_WRITER=thread), and by a
scrape (on its HTTP thread) so an idle engine reads exact.

Labels `model_name` (the served model name) and `engine` (the data-parallel
rank) match vLLM's own metrics. Own CollectorRegistry: vLLM's is never touched.
SCHEDSCOPE_METRICS=off turns the counting off, /metrics on the stream server included
(it costs about as much again as encoding the records, off EngineCore's GIL in the trace
process: docs/performance.md).
Security as for the stream: loopback by default; another address needs a
bearer token (SCHEDSCOPE_METRICS_TOKEN, else SCHEDSCOPE_STREAM_TOKEN).
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import numpy as np
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

from tracer.analysis import flags as _flags
from tracer.analysis import step_bindings, why
from tracer.analysis.budget import analyze
from tracer.analysis.reasons import CODES
from tracer.live.net import OwnPortServer, is_loopback, parse_bind
from tracer.record.writer import Record
from tracer.trace import schema
from tracer.trace.builder import TraceBuilder

logger = logging.getLogger("schedscope.metrics")

ENV_METRICS = "SCHEDSCOPE_METRICS"
ENV_TOKEN = "SCHEDSCOPE_METRICS_TOKEN"
DEFAULT_PORT = 8800
PROCESS_INTERVAL = 0.5  # seconds between batches turned into counters where the records are written
MAX_PENDING_BYTES = 64 << 20  # lines waiting to be counted; beyond: dropped and counted
# Target-budget utilisation per step (used / cap): fine near 1, where budget faults live.
UTIL_BUCKETS = (0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)

_COUNTERS = (
    ("steps", "Scheduler steps recorded (schedule() calls)."),
    ("target_tokens_scheduled", "Target tokens scheduled (SchedulerOutput.total_num_scheduled_tokens)."),
    ("draft_slot_rows_reserved", "Draft-slot rows charged against the input budget."),
    ("draft_slot_rows_needed", "Draft-slot rows the spec-decode method needs in the target pass."),
    (
        "tokens_withheld",
        "Target tokens withheld by the additive double reservation (schedscope's budget model; "
        "an upper bound where more than one request's allocation changes).",
    ),
    ("query_rows", "Rows of the separate drafter (query) pass."),
)


class TraceMetrics:
    """Counters over the records of one run; `tap` is a TraceWriter tap."""

    def __init__(self, engine: str = "0", *, interval: float = PROCESS_INTERVAL) -> None:
        self.engine = engine
        self.model_name = ""
        self.interval = interval
        self.dropped_source: Callable[[], int] | None = None  # the writer's dropped count
        self.spans_source: Any = None  # tracer.live.spans.LiveSpans when SCHEDSCOPE_OTLP is on
        self.totals = dict.fromkeys((name for name, _ in _COUNTERS), 0)
        self.flags = dict.fromkeys(_flags.KINDS, 0)
        self.waiting = dict.fromkeys(CODES, 0)  # waiting request-steps by reason (tracer.analysis.why)
        self.triggers = dict.fromkeys(why.TRIGGERS, 0)
        self.util_buckets = np.zeros(len(UTIL_BUCKETS) + 1, dtype=np.int64)  # last: above 1.0
        self.util_sum = 0.0
        self.lines_dropped = 0  # lines the metrics could not keep up with (never the trace's)
        self.errors = 0
        self._header: bytes | None = None
        self._pending: list[Record] = []
        self._pending_bytes = 0
        self._carry: list[Record] = []  # runner records whose step has not arrived yet
        self._pending_lock = threading.Lock()  # held only to append or swap the list
        self._process_lock = threading.Lock()  # one batch turned into counters at a time
        self._last = time.monotonic()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))

    # -- writer thread ---------------------------------------------------------------
    def tap(self, records: list[Record]) -> None:
        """Keep the records; turn them into counters when due. Never waits for a scrape."""
        footer = False
        with self._pending_lock:
            for record in records:
                kind, size = record.kind, len(record.line)
                if kind == schema.HEADER:
                    if self._header is None:  # later ones: a new run (the tracer starts one per process)
                        self._header = record.line
                    continue
                footer = footer or kind == schema.FOOTER
                if self._pending_bytes + size > MAX_PENDING_BYTES:
                    self.lines_dropped += 1
                    continue
                self._pending.append(record)
                self._pending_bytes += size
        now = time.monotonic()
        if (footer or now - self._last >= self.interval) and self._process_lock.acquire(blocking=False):
            try:
                self._last = now
                self._process()
            finally:
                self._process_lock.release()

    # -- writer thread or a scrape ---------------------------------------------------
    def update(self) -> None:
        """Turn every pending record into counters (a scrape calls this first)."""
        with self._process_lock:
            self._process()

    def _process(self) -> None:
        with self._pending_lock:
            header, records = self._header, self._pending
            if header is None:
                return  # nothing to count before the header
            self._pending, self._pending_bytes = [], 0
        records = self._carry + records
        # A step's runner records are written just before it: those after the last
        # step wait for the next batch, so each step is analysed with its own.
        last = max((i for i, r in enumerate(records) if r.kind == schema.STEP), default=-1)
        self._carry = records[last + 1 :]
        if last < 0:
            return
        try:
            self._count(header, [r.line for r in records[: last + 1]])
        except Exception:  # never let the metrics touch the trace or the server
            self.errors += 1
            if self.errors == 1:
                logger.exception("schedscope: could not turn trace records into metrics")

    def _count(self, header: bytes, lines: list[bytes]) -> None:
        builder = TraceBuilder("<metrics>", strict=False)
        builder.feed(header + b"".join(lines))
        trace = builder.build()
        if not self.model_name:
            model = trace.config.get("model")
            self.model_name = str((model[0] if model else "") if isinstance(model, list) else model or "")
        if not len(trace):
            return
        analysis = analyze(trace)
        bindings = step_bindings.bindings(trace)
        report = _flags.detect(trace, analysis, bindings=bindings)
        col = trace.columns
        t = self.totals
        t["steps"] += len(trace)
        t["target_tokens_scheduled"] += int(col["target_used"].sum())
        t["draft_slot_rows_reserved"] += int(analysis.reserved.sum())
        t["draft_slot_rows_needed"] += int(analysis.needed.sum())
        t["tokens_withheld"] += int(analysis.withheld.sum())
        t["query_rows"] += int(analysis.query_rows.sum())
        for kind, n in report.counts().items():
            self.flags[kind] = self.flags.get(kind, 0) + n
        for code, n in step_bindings.waiting_by_reason(trace, bindings).items():
            self.waiting[code] += n
        for kind, n in why.preemption_triggers(trace).items():
            self.triggers[kind] += n
        cap = col["target_cap"]
        util = col["target_used"][cap > 0] / cap[cap > 0]
        where = np.searchsorted(np.array(UTIL_BUCKETS), util, side="left")
        self.util_buckets += np.bincount(where, minlength=len(UTIL_BUCKETS) + 1)
        self.util_sum += float(util.sum())

    # -- scrape ----------------------------------------------------------------------
    def render(self) -> bytes:
        """Prometheus text exposition of the counters, pending lines included; under the
        processing lock, so a scrape never reads a batch half-counted."""
        with self._process_lock:
            self._process()
            return generate_latest(self.registry)

    def records_dropped(self) -> int:
        try:
            return int(self.dropped_source()) if self.dropped_source is not None else 0
        except Exception:
            return 0


class _Collector:
    """Reads TraceMetrics' plain ints at scrape time (no prometheus_client objects to update)."""

    def __init__(self, m: TraceMetrics) -> None:
        self.m = m

    def collect(self) -> Iterator[Any]:
        m = self.m
        names, values = ["model_name", "engine"], [m.model_name, m.engine]
        for name, doc in _COUNTERS:
            c = CounterMetricFamily(f"schedscope_{name}", doc, labels=names)
            c.add_metric(values, m.totals[name])
            yield c
        flags = CounterMetricFamily(
            "schedscope_flags",
            "Budget-accounting flags, as `schedscope flags` reports them.",
            labels=[*names, "kind"],
        )
        for kind, n in m.flags.items():
            flags.add_metric([*values, kind], n)
        yield flags
        waiting = CounterMetricFamily(
            "schedscope_waiting_request_steps",
            "Requests waiting through a step, by the constraint that held them (`schedscope why`).",
            labels=[*names, "reason"],
        )
        for code, n in m.waiting.items():
            waiting.add_metric([*values, code], n)
        yield waiting
        triggers = CounterMetricFamily(
            "schedscope_preemptions",
            "Requests preempted, by what pushed them out: another request's KV allocation "
            "(kv_blocks; priority under priority scheduling), their own (self), or not recorded "
            "(unknown: traces before format 1.3).",
            labels=[*names, "trigger"],
        )
        for kind, n in m.triggers.items():
            triggers.add_metric([*values, kind], n)
        yield triggers
        dropped = CounterMetricFamily(
            "schedscope_records_dropped",
            "Trace records dropped (queue full or file unwritable).",
            labels=names,
        )
        dropped.add_metric(values, m.records_dropped())
        yield dropped
        behind = CounterMetricFamily(
            "schedscope_metrics_lines_dropped",
            "Trace lines the metrics fell too far behind to count (the trace keeps them).",
            labels=names,
        )
        behind.add_metric(values, m.lines_dropped)
        yield behind
        cumulative = np.cumsum(m.util_buckets)
        buckets = [(repr(le), int(n)) for le, n in zip(UTIL_BUCKETS, cumulative, strict=False)]
        buckets.append(("+Inf", int(cumulative[-1])))
        hist = HistogramMetricFamily(
            "schedscope_target_budget_utilization",
            "Per step: target tokens scheduled / max_num_scheduled_tokens.",
            labels=names,
        )
        hist.add_metric(values, buckets, sum_value=m.util_sum)
        yield hist
        spans = m.spans_source  # SCHEDSCOPE_OTLP (tracer.live.spans); 0 and 0 when it is off
        for name, value, doc in (
            ("sent", spans.sent if spans else 0, "Request spans an OTLP collector took (SCHEDSCOPE_OTLP)."),
            (
                "dropped",
                spans.dropped if spans else 0,
                "Request spans not sent (SCHEDSCOPE_OTLP): the collector down, refusing or too slow, "
                "or its queue full.",
            ),
        ):
            family = CounterMetricFamily(f"schedscope_otlp_spans_{name}", doc, labels=names)
            family.add_metric(values, value)
            yield family
        # A count that only grows: a counter (`_total`), as vLLM serves its own counts.
        errors = CounterMetricFamily(
            "schedscope_metrics_errors", "Batches the metrics could not count (logged once).", labels=names
        )
        errors.add_metric(values, m.errors)
        yield errors


class MetricsServer:
    """GET /metrics on its own loopback port (net.OwnPortServer, daemon threads)."""

    def __init__(self, metrics: TraceMetrics, host: str, port: int, token: str | None = None) -> None:
        if not is_loopback(host) and not token:
            raise ValueError(
                f"refusing to serve metrics on non-loopback address {host}: set {ENV_TOKEN} "
                "(a bearer token) to allow it"
            )
        if not is_loopback(host):
            logger.warning("schedscope: serving metrics on %s:%d (token required)", host, port)
        server = self
        self.metrics = metrics
        self.token = token

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet: vLLM owns the log
                logger.debug(format, *args)

            def do_GET(self) -> None:
                serve_metrics(self, server.metrics, server.token)

        self.httpd = OwnPortServer((host, port), Handler)
        self.address = self.httpd.server_address
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="schedscope-metrics", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self.address[:2]
        return f"http://{host}:{port}/metrics"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def serve_metrics(h: BaseHTTPRequestHandler, metrics: TraceMetrics, token: str | None) -> None:
    """Answer one GET /metrics (also used by the stream server's /metrics path)."""
    if h.path.split("?", 1)[0] != "/metrics":
        h.send_error(404, "GET /metrics")
        return
    if token and not hmac.compare_digest(
        h.headers.get("Authorization", "").encode(), f"Bearer {token}".encode()
    ):
        h.send_error(401, "bearer token required")
        return
    body = metrics.render()
    h.send_response(200)
    h.send_header("Content-Type", CONTENT_TYPE_LATEST)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def start_from_env(metrics: TraceMetrics, value: str, token: str | None) -> MetricsServer:
    host, port = parse_bind(value, DEFAULT_PORT)
    return MetricsServer(metrics, host, port, token or None)
