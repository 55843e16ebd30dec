"""`schedscope export --otlp` / `--otlp-json`: each request of a trace as OpenTelemetry spans.

One `llm_request` span per request (vLLM's own span name and kind, SERVER), from its arrival
to its last token, with three children, `queue`, `prefill` and `decode`
(tracer.analysis.request_phases says where each starts and ends). vLLM's attribute names
(vllm/tracing/utils.py `SpanAttributes`, written out here: tracer loads without vLLM) carry
what vLLM's own span carries; schedscope's own are under `schedscope.*`:

- `schedscope.waiting.<reason>`: queue seconds by the binding constraint of each step the
  request waited through (`schedscope why`'s codes, docs/why.md), on the request and its
  `queue` span, and `schedscope.binding`, the reason that held it longest;
- `schedscope.preemptions` and `schedscope.preemption.lost_tokens`, and a `preempted` event
  per preemption (its trigger, the request whose allocation failed, the tokens lost) and a
  `resumed` event;
- `schedscope.ttft_from`: where the span and its TTFT start (`arrival`; `engine`, the
  schedule() call that first had the request, or `seen`, the first step that listed it: lower
  bounds), `schedscope.finished`: false for a request the trace ends before.

Ids are derived from the engine, the run's start time and the request id, so exporting a
trace twice gives the same spans (a backend keeps one copy). Needs the OpenTelemetry SDK and
its OTLP exporter (`pip install 'schedscope[otlp]'`), imported here only.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from tracer import __version__
from tracer.analysis.request_phases import NoWallClock, RequestPhases
from tracer.render.command_lines import error_line

# vLLM's span and attribute names (vllm.tracing.utils.SpanAttributes).
REQUEST_SPAN = "llm_request"
REQUEST_ID = "gen_ai.request.id"
PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"
MAX_TOKENS = "gen_ai.request.max_tokens"
TIME_IN_QUEUE = "gen_ai.latency.time_in_queue"
TIME_TO_FIRST_TOKEN = "gen_ai.latency.time_to_first_token"
E2E = "gen_ai.latency.e2e"
PREFILL_TIME = "gen_ai.latency.time_in_model_prefill"
DECODE_TIME = "gen_ai.latency.time_in_model_decode"
INFERENCE_TIME = "gen_ai.latency.time_in_model_inference"
PHASES = ("queue", "prefill", "decode")
SCOPE = "schedscope"
BATCH = 512  # requests per export request (about 2,000 spans, well under a collector's 4 MiB)
ID_FIELDS = ("traceId", "spanId", "parentSpanId")  # OTLP JSON writes these as hex, not base64


class OtlpUnavailable(RuntimeError):
    """The OpenTelemetry SDK or its OTLP exporter is not installed."""


def require() -> None:
    """Raise OtlpUnavailable, saying what to install, unless the SDK and exporter import."""
    try:
        import opentelemetry.exporter.otlp.proto.common.trace_encoder
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise OtlpUnavailable(
            f"--otlp needs the OpenTelemetry SDK and OTLP exporter: pip install 'schedscope[otlp]' ({exc})"
        ) from None


def resource(engine: str, header: dict[str, Any], path: str) -> Any:
    """The resource every span of one trace shares. OTEL_SERVICE_NAME and
    OTEL_RESOURCE_ATTRIBUTES override it, as for any OpenTelemetry SDK."""
    from opentelemetry.sdk.resources import Resource

    attrs = {
        "service.name": "schedscope",
        "service.version": __version__,
        "service.instance.id": engine,
        "schedscope.engine": engine,
        "schedscope.trace": path,
        "schedscope.vllm_version": str(header.get("vllm_version")),
        "schedscope.scheduler_cls": str(header.get("scheduler_cls")),
    }
    return Resource.create(attrs)


def _id(bits: int, *parts: str) -> int:
    digest = hashlib.blake2b("\0".join(parts).encode(), digest_size=bits // 8).digest()
    return int.from_bytes(digest, "big") or 1  # 0 is OpenTelemetry's invalid id


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _reasons(p: RequestPhases) -> dict[str, Any]:
    out: dict[str, Any] = {f"schedscope.waiting.{code}": s for code, s in p.waiting.items()}
    if p.binding is not None:
        out["schedscope.binding"] = p.binding
    return out


def request_attributes(p: RequestPhases) -> dict[str, Any]:
    """The `llm_request` span's attributes: vLLM's names, then schedscope's."""
    attrs: dict[str, Any] = {REQUEST_ID: p.id, COMPLETION_TOKENS: p.output_tokens, E2E: p.end - p.start}
    optional = {
        PROMPT_TOKENS: p.prompt_tokens,
        MAX_TOKENS: p.max_tokens,
        TIME_IN_QUEUE: p.time_in_queue,
        TIME_TO_FIRST_TOKEN: p.ttft,
        PREFILL_TIME: p.prefill,
        DECODE_TIME: p.decode,
        INFERENCE_TIME: None if p.scheduled is None or p.first_token is None else p.end - p.scheduled,
        "schedscope.priority": p.priority,
    }
    attrs.update({k: v for k, v in optional.items() if v is not None})
    attrs["schedscope.ttft_from"] = p.ttft_from
    attrs["schedscope.finished"] = p.finished
    attrs["schedscope.preemptions"] = len(p.preemptions)
    lost = [e.lost for e in p.preemptions if e.lost is not None]
    if lost:
        attrs["schedscope.preemption.lost_tokens"] = sum(lost)
    attrs.update(_reasons(p))
    return attrs


def request_spans(p: RequestPhases, res: Any, engine: str, run: str) -> list[Any]:
    """The request's span and its children (only the phases it reached), as SDK ReadableSpans."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

    scope = InstrumentationScope(SCOPE, __version__)
    trace_id = _id(128, engine, run, p.id)
    sampled = TraceFlags(TraceFlags.SAMPLED)

    def context(name: str) -> Any:
        return SpanContext(trace_id, _id(64, engine, run, p.id, name), is_remote=False, trace_flags=sampled)

    root = context(REQUEST_SPAN)
    events = []
    for e in p.preemptions:
        attrs: dict[str, Any] = {"schedscope.preemption.trigger": e.trigger, "schedscope.step": e.step}
        if e.by is not None:
            attrs["schedscope.preemption.by"] = e.by
        if e.lost is not None:
            attrs["schedscope.preemption.lost_tokens"] = e.lost
        events.append(Event("preempted", attrs, _ns(e.time)))
        if e.resumed is not None:
            events.append(Event("resumed", {}, _ns(e.resumed)))
    spans = [
        ReadableSpan(
            REQUEST_SPAN,
            context=root,
            resource=res,
            attributes=request_attributes(p),
            events=events,
            kind=SpanKind.SERVER,
            start_time=_ns(p.start),
            end_time=_ns(p.end),
            instrumentation_scope=scope,
        )
    ]
    queue_end = p.scheduled if p.scheduled is not None else p.end
    bounds = {
        "queue": (p.queued, queue_end, _reasons(p)),
        "prefill": (p.scheduled, p.first_token, {PROMPT_TOKENS: p.prompt_tokens}),
        "decode": (p.first_token, p.end if p.first_token is not None else None, {}),
    }
    for name in PHASES:
        lo, hi, attrs = bounds[name]
        if lo is None or hi is None:
            continue
        spans.append(
            ReadableSpan(
                name,
                context=context(name),
                parent=root,
                resource=res,
                attributes={k: v for k, v in attrs.items() if v is not None},
                kind=SpanKind.INTERNAL,
                start_time=_ns(lo),
                end_time=_ns(max(hi, lo)),
                instrumentation_scope=scope,
            )
        )
    return spans


def span_count(phases: Sequence[RequestPhases]) -> int:
    """The spans `batches` makes of `phases`, without making them."""
    # The request and its queue always; prefill and decode once it had its first token.
    return sum(
        2 + (p.first_token is not None) + (p.scheduled is not None and p.first_token is not None)
        for p in phases
    )


def batches(
    phases: Sequence[RequestPhases], res: Any, engine: str, run: str, *, size: int = BATCH
) -> Iterator[list[Any]]:
    """The spans of `size` requests at a time (never every span of a big trace at once)."""
    for lo in range(0, len(phases), size):
        yield [s for p in phases[lo : lo + size] for s in request_spans(p, res, engine, run)]


def encode(spans: Sequence[Any]) -> Any:
    """One ExportTraceServiceRequest (protobuf), exactly what the OTLP exporter sends."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return encode_spans(spans)


def otlp_json(spans: Sequence[Any]) -> dict[str, Any]:
    """The OTLP JSON of one export request: protobuf's JSON mapping with lowerCamelCase keys
    and enums as integers, and trace and span ids as hex (OTLP's rule, not base64)."""
    from google.protobuf import json_format

    doc = json_format.MessageToDict(encode(spans), use_integers_for_enums=True)
    for rs in doc.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for span in ss.get("spans", ()):
                for key in ID_FIELDS:
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return doc


def write_json(path: str | Path, chunks: Iterator[list[Any]]) -> int:
    """Write OTLP JSON Lines (one export request per line, as the collector's file exporter
    writes and its otlpjsonfile receiver reads); returns the spans written. The file appears
    whole or not at all (written aside, then renamed)."""
    out = Path(path)
    tmp = out.with_name(out.name + ".tmp")
    written = 0
    try:
        with open(tmp, "wb") as f:
            for spans in chunks:
                f.write(orjson.dumps(otlp_json(spans)) + b"\n")
                written += len(spans)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return written


# -- what `schedscope export` prints about it --------------------------------------------------


def written_line(path: str | Path, spans: int, requests: int) -> str:
    return f"wrote {path}: {spans:,} spans of {requests:,} requests (OTLP JSON, one export request a line)"


def sent_line(endpoint: str, spans: int, requests: int, seconds: float) -> str:
    return f"sent {spans:,} spans of {requests:,} requests to {endpoint} in {seconds:.2f} s"


def failed_line(endpoint: str, reason: str, sent: int, dropped: int, timeout: float) -> str:
    return error_line(
        f"OTLP collector {endpoint}: {reason}; sent {sent:,} spans, dropped "
        f"{dropped:,} (a batch is given up after {timeout:g} s, retries included: --otlp-timeout)"
    )


def no_wall_clock(exc: NoWallClock) -> str:
    """Why a trace has no spans: its header cannot put the steps on the wall clock."""
    return (
        f"{exc.path}: line 1: the header has no numeric start_time and t0, so its steps "
        "cannot be put on the wall clock"
    )


def nothing_line(path: str) -> str:
    return f"{path}: no request was queued within the trace: no spans to export"


# -- what the live spans (tracer.live.spans, SCHEDSCOPE_OTLP) log ----------------------------


def live_failed_line(endpoint: str, reason: str, dropped: int) -> str:
    return (
        f"OTLP collector {endpoint}: {reason}; {dropped:,} spans dropped (the server goes on; "
        "later failures are counted in schedscope_otlp_spans_dropped_total, not logged)"
    )


def live_queue_line(endpoint: str, limit: int) -> str:
    return (
        f"OTLP collector {endpoint} is behind: {limit:,} spans wait for it; newer spans are "
        "dropped and counted (schedscope_otlp_spans_dropped_total)"
    )


def live_window_line(requests: int, spans: int) -> str:
    return (
        f"{requests:,} requests open too long for the OTLP spans' bounded memory were given up "
        f"({spans:,} spans dropped)"
    )


def live_behind_line() -> str:
    return "the OTLP spans fell too far behind the trace; records dropped from them (the trace keeps them)"


def live_totals_line(endpoint: str, requests: int, sent: int, dropped: int) -> str:
    return f"OTLP spans of {requests:,} requests: {sent:,} sent to {endpoint}, {dropped:,} dropped"
