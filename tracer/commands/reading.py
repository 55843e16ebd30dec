"""The commands that read traces and say what they hold: `summary`, `step`, `flags`, `why`,
`timing`, `diff`, and `doctor` (is a trace complete and exact)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from typing import Any

from tracer.inputs import open_trace, open_traces
from tracer.render.command_lines import WHY_NEEDS_ONE, client_unreadable, error_line, json_bytes


def cmd_summary(args: argparse.Namespace) -> int:
    from tracer.analysis.engines import Run
    from tracer.render.summary import summary_lines
    from tracer.render.text import engine_heading, run_row

    sessions = open_traces(args, *args.traces).sessions
    limit = None if args.limit == 0 else args.limit
    if len(sessions) == 1:
        for line in summary_lines(sessions[0], first=args.first, limit=limit):
            print(line)
        return 0
    run = Run.of(sessions)
    for engine in run.engines:
        print(engine_heading(engine.label, engine.trace.path))
        for line in summary_lines(engine.session, first=args.first, limit=limit):
            print(line)
        print()
    print(run_row(run.totals()))
    return 0


def cmd_step(args: argparse.Namespace) -> int:
    from tracer.render.empty import trace_lacks_step

    trace = open_trace(args).trace
    rows = [i for i, s in enumerate(trace.columns["step"]) if s == args.step]
    if not rows:
        print(error_line(trace_lacks_step(args.trace, args.step)), file=sys.stderr)
        return 2
    sys.stdout.buffer.write(json_bytes(trace.step(rows[0])))
    return 0


def cmd_flags(args: argparse.Namespace) -> int:
    from tracer.analysis.engines import Run
    from tracer.render.flags import flag_lines, flags_document
    from tracer.render.text import RunLine, run_row

    opened = open_traces(args, *args.traces)
    run = opened.run or Run.of(opened.sessions)
    several = len(run.engines) > 1
    docs = []
    for engine in run.engines:
        trace, report = engine.trace, engine.session.report
        wanted = report.flags.positions(args.kind or None)
        if args.json:
            flags = report.flags.take(wanted)
            docs.append(flags_document(trace.path, engine.label if several else None, report, flags))
            continue
        where = f"{engine.label}  " if several else ""
        sys.stdout.write(flag_lines(report, wanted, where))
        print(f"{where}{RunLine.of(trace, report).text}")
    if args.json:
        doc = docs[0] if not several else {"engines": docs}
        sys.stdout.buffer.write(json_bytes(doc))
    elif several:
        print(run_row(run.totals()))
    return 0


def cmd_why(args: argparse.Namespace) -> int:
    """A request's life with its reasons, or one step's binding constraint and every listed request's."""

    from tracer.render.empty import starting_alike, trace_lacks_step, trace_never_names
    from tracer.render.why import step_document, step_lines, story_document, story_lines

    if (args.request is None) == (args.step is None):  # before the trace is read, which may take long
        print(WHY_NEEDS_ONE, file=sys.stderr)
        return 2
    from tracer.trace.trace_type import WHILE_PARSING

    # A story reads the request index, made by the entry pass: a load that parses the file
    # collects its entry columns on the way, so the pass does not read every record again
    # (a sidecar without them is mapped as it is: its derived sidecars may hold the index).
    session = open_trace(args, entries=WHILE_PARSING if args.request is not None else False)
    if args.step is not None:
        row = session.row_of(args.step)
        if row is None:
            print(error_line(trace_lacks_step(args.trace, args.step)), file=sys.stderr)
            return 2
        why = session.step_why(row)
        if args.exact:
            from tracer.whatif.probe import settle

            why = settle(session.trace, why)
        return _report(args, lambda: step_document(why), lambda: step_lines(why))
    story = session.request_story(args.request)
    if story is None:
        print(error_line(trace_never_names(args.trace, args.request)), file=sys.stderr)
        near = session.matching_ids(args.request[:8], limit=5)
        if near:
            print(starting_alike(near), file=sys.stderr)
        return 2
    if args.exact:
        from tracer.whatif.probe import settle_story

        story = settle_story(session.trace, story)
    return _report(args, lambda: story_document(story), lambda: story_lines(story))


def _report(args: argparse.Namespace, doc: Callable[[], Any], lines: Callable[[], Iterable[str]]) -> int:
    """Print a command's result: its JSON document with --json, else its lines."""
    if args.json:
        sys.stdout.buffer.write(json_bytes(doc()))
    else:
        for line in lines():
            print(line)
    return 0


def cmd_timing(args: argparse.Namespace) -> int:
    """The step-time model, its held-out error and measured throughput; exit 1 if the model was refused."""
    import orjson

    from tracer.render.timing_report import client_doc, client_mismatch_sentence, timing_lines, timing_report

    trace = open_trace(args, entries=True).trace  # the step pass reads the entry columns
    doc = timing_report(trace)
    if args.client:
        from tracer.analysis.client_ttft import ClientMismatch

        try:
            with open(args.client, "rb") as f:
                result = orjson.loads(f.read())
            doc["client"] = client_doc(trace, result, args.client, args.client_prefix)
        except (OSError, orjson.JSONDecodeError, ClientMismatch) as exc:
            why = client_mismatch_sentence(exc) if isinstance(exc, ClientMismatch) else exc
            print(client_unreadable(args.client, why), file=sys.stderr)
            return 2
    if args.json:
        sys.stdout.buffer.write(json_bytes(doc))
    else:
        for line in timing_lines(doc):
            print(line)
    return 0 if doc["model"] is not None else 1


def cmd_diff(args: argparse.Namespace) -> int:
    from tracer.analysis.compare import compare
    from tracer.opening.door import Spec, open_input
    from tracer.render.compare import diff_lines

    # Both at once, each on a core (tracer.opening.open_pair); the request index and the step pass
    # read the entry columns, collected by the same parse.
    a, b = open_input(Spec(traces=(args.trace_a, args.trace_b), strict=not args.lenient)).pair
    comparison = compare(a, b)
    for line in diff_lines(comparison, rows=args.rows):
        print(line)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check traces for completeness and exactness; exit 1 on any FAIL."""
    from tracer.doctor import run
    from tracer.render.doctor import metrics_unreadable

    try:
        code, lines = run(
            args.traces, url=args.metrics_url, metrics_file=args.metrics_file, strict=not args.lenient
        )
    except (OSError, ValueError) as exc:  # /metrics unreachable or unparsable, unreadable file
        print(error_line(metrics_unreadable(exc)), file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    return code
