"""The what-if commands: `replay` re-runs a trace's workload through vLLM's real scheduler,
`sweep` replays it over a grid of settings and ranks them."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tracer.inputs import open_trace
from tracer.render.command_lines import (
    CHECK_NEEDS_TRACE,
    REPLAY_NEEDS_OUTPUT,
    TIMED_NEEDS_TRACE,
    cannot_run,
    error_line,
    grid_not_a_number,
    json_bytes,
    plot_unavailable,
    unknown_policy,
    wrote_line,
)


def cmd_replay(args: argparse.Namespace) -> int:
    from tracer.opening.door import Spec, open_input
    from tracer.render.fidelity import fidelity_lines
    from tracer.render.notes import note_line, written_line
    from tracer.whatif.fidelity import check_fidelity
    from tracer.whatif.replay import replay
    from tracer.whatif.workload import WorkloadError, workload_from_file, workload_from_trace

    if args.python:
        return replay_in(args.python, args.argv)
    is_file = str(args.source).endswith((".json", ".yaml", ".yml"))
    if args.check and is_file:
        print(CHECK_NEEDS_TRACE, file=sys.stderr)
        return 2
    if not args.check and not args.output:
        print(REPLAY_NEEDS_OUTPUT, file=sys.stderr)
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
            from tracer.render.clock import clock_document, no_clock_sentence, timed_line
            from tracer.whatif.replay_clock import attach_frontend_delays, attach_idle_waits

            if recorded is None:
                print(TIMED_NEEDS_TRACE, file=sys.stderr)
                return 2
            try:
                clock = clock_for(recorded)
            except NoClock as exc:
                print(error_line(no_clock_sentence(exc)), file=sys.stderr)
                return 2
            header["replay"]["clock"] = clock_document(clock)  # type: ignore[index]
            attach_idle_waits(workload, recorded, clock)
            attach_frontend_delays(workload, recorded)
            print(timed_line(clock, args.arrivals))
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
        print(error_line(exc), file=sys.stderr)
        return 2
    for note in workload.notes:
        print(note_line(note))
    print(written_line(out, len(workload.requests), policy))
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
    root = str(Path(__file__).resolve().parents[2])  # the directory holding tracer/
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    try:
        return subprocess.run([python, "-m", "tracer.cli", *rest], env=env, check=False).returncode
    except OSError as exc:
        print(cannot_run(python, exc), file=sys.stderr)
        return 2


def _ints(text: str | None) -> list[int | None]:
    return [None] if not text else [int(x) for x in text.split(",") if x.strip()]


def cmd_sweep(args: argparse.Namespace) -> int:
    """Replay a trace's workload over a grid of settings and rank them (tracer.whatif.sweep)."""
    from tracer.analysis.clock import NoClock
    from tracer.render.clock import no_clock_sentence
    from tracer.render.sweep_report import progress_text, sweep_document, sweep_lines
    from tracer.whatif.sweep import POLICIES, default_workers, grid, sweep
    from tracer.whatif.workload import WorkloadError

    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        print(unknown_policy(unknown[0], POLICIES), file=sys.stderr)
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
        print(grid_not_a_number(exc), file=sys.stderr)
        return 2
    workers = args.workers or default_workers(len(settings))

    def progress(done: int, total: int, label: str) -> None:
        print(progress_text(done, total, label), end="", file=sys.stderr, flush=True)

    trace = open_trace(args).trace
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
    except NoClock as exc:
        print(error_line(no_clock_sentence(exc)), file=sys.stderr)
        return 2
    except WorkloadError as exc:
        print(error_line(exc), file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.buffer.write(json_bytes(doc))
    else:
        for line in sweep_lines(doc):
            print(line)
    if args.plot or args.png:
        # The figure is a view: the web package provides it through an entry point.
        from importlib.metadata import entry_points

        plots = {e.name: e for e in entry_points(group="schedscope.plots")}
        try:
            write_plot = plots["sweep"].load()
        except (KeyError, ImportError) as exc:
            print(plot_unavailable(exc), file=sys.stderr)
            return 2
        for path in write_plot(doc, html=args.plot, png=args.png):
            print(wrote_line(path), file=sys.stderr)
    return 0
