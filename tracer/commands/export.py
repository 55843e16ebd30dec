"""`schedscope export`: a Perfetto timeline, Parquet tables, or OpenTelemetry spans."""

from __future__ import annotations

import argparse
import sys

from tracer.inputs import open_trace
from tracer.render.command_lines import (
    ENGINE_IS_PARQUET,
    EXPORT_NEEDS_OUTPUT,
    OTLP_TAKES_NO_OUTPUT,
    OTLP_TIMEOUT_POSITIVE,
    cannot_write,
    error_line,
)


def cmd_export(args: argparse.Namespace) -> int:
    if args.otlp or args.otlp_json:
        return _export_otlp(args)
    if not args.output:
        print(EXPORT_NEEDS_OUTPUT, file=sys.stderr)
        return 2
    if args.format == "parquet":
        return _export_parquet(args)
    if args.engine:
        print(ENGINE_IS_PARQUET, file=sys.stderr)
        return 2
    from tracer.render.perfetto import export, written_line

    trace = open_trace(args).trace
    try:
        out = export(trace, args.output)
    except OSError as exc:
        print(cannot_write(args.output, exc), file=sys.stderr)
        return 2
    print(written_line(out, len(trace)))
    return 0


def _export_parquet(args: argparse.Namespace) -> int:
    from tracer.render.parquet import ParquetUnavailable, export, progress_text, require, written_line

    try:
        require()  # before loading what may be a big trace
    except ParquetUnavailable as exc:
        print(error_line(exc), file=sys.stderr)
        return 2
    trace = open_trace(args).trace

    def progress(done: int, total: int) -> None:
        if total >= 20_000 and sys.stderr.isatty():
            print(progress_text(done, total), end="", file=sys.stderr)

    try:
        steps, requests = export(trace, args.output, engine=args.engine, progress=progress)
    except OSError as exc:
        print(cannot_write(args.output, exc), file=sys.stderr)
        return 2
    print(written_line(steps, requests, len(trace)))
    return 0


def _export_otlp(args: argparse.Namespace) -> int:
    """Each request as OpenTelemetry spans: sent to a collector (--otlp), written as OTLP JSON
    (--otlp-json), or both; exit 1 when the collector did not take them all."""
    from tracer.analysis.request_phases import NoWallClock, request_phases
    from tracer.render import otlp
    from tracer.render.parquet import engine_name
    from tracer.send_spans import endpoint_url, send

    if args.output or args.format != "perfetto":
        print(OTLP_TAKES_NO_OUTPUT, file=sys.stderr)
        return 2
    if not 0 < args.otlp_timeout < float("inf"):
        print(OTLP_TIMEOUT_POSITIVE, file=sys.stderr)
        return 2
    try:
        otlp.require()
        url = endpoint_url(args.otlp) if args.otlp else None
    except (otlp.OtlpUnavailable, ValueError) as exc:
        print(error_line(exc), file=sys.stderr)
        return 2
    session = open_trace(args)
    trace = session.trace
    try:
        phases = request_phases(session)
    except NoWallClock as exc:
        print(error_line(otlp.no_wall_clock(exc)), file=sys.stderr)
        return 2
    if not phases:
        print(otlp.nothing_line(trace.path), file=sys.stderr)
        return 1
    engine = args.engine or engine_name(trace)
    run = str(trace.header.get("start_time"))
    res = otlp.resource(engine, trace.header, str(trace.path))
    if args.otlp_json:
        try:
            spans = otlp.write_json(args.otlp_json, otlp.batches(phases, res, engine, run))
        except OSError as exc:
            print(cannot_write(args.otlp_json, exc), file=sys.stderr)
            return 2
        print(otlp.written_line(args.otlp_json, spans, len(phases)))
    if url is None:
        return 0
    done = send(
        otlp.batches(phases, res, engine, run), otlp.span_count(phases), url, timeout=args.otlp_timeout
    )
    if done.failure is not None:
        print(
            otlp.failed_line(url, done.failure, done.sent, done.dropped, args.otlp_timeout), file=sys.stderr
        )
        return 1
    print(otlp.sent_line(url, done.sent, len(phases), done.seconds))
    return 0
