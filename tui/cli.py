"""`schedscope tui`: registered through the `schedscope.commands` entry point, so the
tracer package never names the terminal UI. Textual loads only when it runs."""

from __future__ import annotations

import argparse
import os
import sys

from tracer.cli import viewer_args, viewer_source


def cmd_tui(args: argparse.Namespace) -> int:
    """The Textual terminal UI; imported here so tracer never imports textual at module level."""
    try:
        source = viewer_source(args)
    except ValueError as exc:
        print(f"schedscope: error: {exc}", file=sys.stderr)
        return 2
    engines = args.engines or []
    if engines and (source is not None or args.trace is not None):
        print("schedscope: error: --engines opens one run's traces: give no other trace", file=sys.stderr)
        return 2
    if source is None and args.trace is None and not engines:
        print(
            "schedscope: error: give a trace, two traces to compare, --engines TRACE..., "
            "--follow FILE or --attach URL",
            file=sys.stderr,
        )
        return 2
    for path in (args.trace, args.trace_b, *engines):  # a clear message before the terminal switches screens
        if path is not None and not os.path.isfile(path):
            what = "is a directory, not a trace file" if os.path.isdir(path) else "no such file"
            print(f"schedscope: error: {path}: {what}", file=sys.stderr)
            return 2
    try:
        from tui import make_app
    except ImportError as exc:
        print(
            f"schedscope: error: the terminal UI needs textual ({exc}): pip install 'schedscope[tui]'",
            file=sys.stderr,
        )
        return 2
    try:
        if engines:
            app = make_app(engines=engines, strict=not args.lenient)
        elif source is not None:
            if args.trace is not None:
                raise ValueError("--follow and --attach open a trace alone: give no other trace")
            app = make_app(source)
        else:
            app = make_app(args.trace, args.trace_b, compare=args.compare, strict=not args.lenient)
    except ValueError as exc:
        print(f"schedscope: error: {exc}", file=sys.stderr)
        return 2
    app.run()
    if app.error is not None:
        print(f"schedscope: error: {app.error}", file=sys.stderr)
        return 2
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tui",
        help="the terminal UI: timeline, step table, inspector, flags, replay, follow, compare",
        description="Open a trace in the terminal UI; two traces open side by side (compare); "
        "--engines shows the engines of a data-parallel run as lanes; "
        "--follow tails a trace that a live server is still writing. Press ? in the UI for every key.",
    )
    viewer_args(p)
    p.add_argument(
        "--engines",
        nargs="+",
        metavar="TRACE",
        help="the traces of one data-parallel run (SCHEDSCOPE_TRACE=run.{pid}.jsonl), one lane per engine",
    )
    p.add_argument("--compare", action="store_true", help="compare TRACE and TRACE_B side by side")
    p.add_argument("--lenient", action="store_true", help="skip malformed lines instead of stopping")
    p.set_defaults(func=cmd_tui)
