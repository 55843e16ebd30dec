"""The live outputs of a trace being written: the stream server, the /metrics counters and
each request's OpenTelemetry spans.

Started where the records are written: beside the writer thread in EngineCore, or in the
trace process (tracer.live.trace_process). The spans (SCHEDSCOPE_OTLP) run in the trace process
only: they load the OpenTelemetry SDK and the analysis, which EngineCore is kept free of. A
part that cannot start is logged and left out; the trace goes on without it.
"""

from __future__ import annotations

import atexit
import logging
from dataclasses import dataclass, field
from typing import Any

from tracer.live import stream
from tracer.record.writer import Tap

logger = logging.getLogger("schedscope.scheduler")


@dataclass
class LiveTaps:
    """What `start` started: the writer's taps and the servers behind them (None: not started)."""

    taps: list[Tap] = field(default_factory=list)
    stream: stream.StreamServer | None = None
    metrics: Any = None  # tracer.live.metrics.TraceMetrics
    metrics_server: Any = None
    spans: Any = None  # tracer.live.spans.LiveSpans

    def flush_stream(self, timeout: float) -> None:
        """Give connected viewers up to `timeout` to receive what was published (the footer)."""
        if self.stream is not None and not self.stream.hub.flush(timeout):
            logger.warning("schedscope: a stream viewer lacked the footer after %.1fs", timeout)

    def count_drops(self, dropped: Any) -> None:
        """Where /metrics reads the records dropped: a callable returning the count."""
        if self.metrics is not None:
            self.metrics.dropped_source = dropped

    def close_spans(self, timeout: float) -> None:
        """Send the spans of the requests left, giving the collector up to `timeout`."""
        if self.spans is not None:
            self.spans.close(timeout)


def start(
    *,
    stream_at: str,
    stream_token: str | None,
    metrics_at: str,
    metrics_token: str | None,
    engine: str,
    otlp: str = "",
    otlp_timeout: float = 5.0,
    path: str | None = None,
    in_engine_core: bool = False,
) -> LiveTaps:
    """The stream at `stream_at` (HOST:PORT, "" for none) and the counters, served at `metrics_at`
    (HOST:PORT), or on the stream server only ("" with a stream), or not at all ("off"); each
    request's spans to the OTLP/HTTP collector `otlp` ("" for none; not `in_engine_core`), their
    ids made from the trace file's name (`path`), as the export's are."""
    live = LiveTaps()
    if otlp and in_engine_core:  # render.otlp would load the analysis here: the sentence is kept inline
        logger.warning(
            "schedscope: SCHEDSCOPE_OTLP needs the trace process (SCHEDSCOPE_WRITER=process, the "
            "default); no spans are sent from a writer thread in EngineCore"
        )
    elif otlp:
        _start_spans(live, otlp, otlp_timeout, path, engine)
    metrics_off = metrics_at.lower() == "off"
    if metrics_off:
        metrics_at = ""
    if (metrics_at or stream_at) and not metrics_off:
        _start_metrics(live, metrics_at, metrics_token, engine)
    if stream_at:
        try:
            hub, server = stream.start_from_env(stream_at, stream_token)
            server.metrics = live.metrics
            live.stream = server
            live.taps.append(hub.publish)
            atexit.register(server.close)
            logger.info("schedscope: streaming scheduler steps at %s", server.url)
        except Exception:
            logger.exception("schedscope: cannot serve the live stream at %s; continuing without", stream_at)
    return live


def _start_spans(live: LiveTaps, endpoint: str, timeout: float, path: str | None, engine: str) -> None:
    try:
        from tracer.live import spans  # the SDK and the analysis: only when wanted, never in EngineCore

        live.spans = spans.LiveSpans(endpoint, path=path, engine=engine, timeout=timeout)
    except Exception as exc:  # no SDK (OtlpUnavailable), a bad endpoint (ValueError): said once
        logger.error("schedscope: SCHEDSCOPE_OTLP=%s: no spans are sent: %s", endpoint, exc)
        return
    live.taps.append(live.spans.tap)
    logger.info("schedscope: sending each request's spans to %s", live.spans.url)


def _start_metrics(live: LiveTaps, metrics_at: str, token: str | None, engine: str) -> None:
    """The metrics counters, and their own HTTP server if `metrics_at` names one."""
    try:
        from tracer.live import metrics  # numpy, prometheus_client and the analysis: only when wanted

        counters = metrics.TraceMetrics(engine=engine)
    except Exception:
        logger.exception("schedscope: cannot count metrics; continuing without")
        return
    live.metrics = counters
    counters.spans_source = live.spans
    live.taps.append(counters.tap)
    if metrics_at:
        try:
            server = metrics.start_from_env(counters, metrics_at, token)
            live.metrics_server = server
            atexit.register(server.close)
            logger.info("schedscope: serving Prometheus metrics at %s", server.url)
        except Exception:
            logger.exception("schedscope: cannot serve metrics at %s; continuing without", metrics_at)
