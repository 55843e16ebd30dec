"""`schedscope tui`: registered through the `schedscope.commands` entry point, so the
tracer package never names the terminal UI. Textual loads only when it runs."""

from __future__ import annotations

import argparse
import sys

from tracer.inputs import viewer_args, viewer_inputs


def cmd_tui(args: argparse.Namespace) -> int:
    """The Textual terminal UI; imported here so tracer never imports textual at module level."""
    try:
        inputs = viewer_inputs(args, "tui")
    except ValueError as exc:
        print(f"schedscope: error: {exc}", file=sys.stderr)
        return 2
    try:
        from tui import make_app
    except ImportError as exc:
        print(
            f"schedscope: error: the terminal UI needs textual ({exc}): pip install 'schedscope[tui]'",
            file=sys.stderr,
        )
        return 2
    app = make_app(spec=inputs)
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
    p.add_argument("--compare", action="store_true", help="compare TRACE and TRACE_B side by side")
    p.set_defaults(func=cmd_tui)
