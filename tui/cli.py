"""`schedscope tui`: registered through the `schedscope.commands` entry point, so the
tracer package never names the terminal UI. Textual loads only when it runs."""

from __future__ import annotations

import argparse
import sys

from tracer.inputs import viewer_args, viewer_inputs
from tracer.render import labels
from tracer.render.command_lines import error_line


def cmd_tui(args: argparse.Namespace) -> int:
    """The Textual terminal UI; imported here so tracer never imports textual at module level."""
    try:
        inputs = viewer_inputs(args, "tui")
    except ValueError as exc:
        print(error_line(exc), file=sys.stderr)
        return 2
    try:
        from tui import make_app
    except ImportError as exc:
        print(labels.needs_textual(exc), file=sys.stderr)
        return 2
    app = make_app(spec=inputs)
    app.run()
    if app.error is not None:
        print(error_line(app.error), file=sys.stderr)
        return 2
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tui",
        help=labels.TUI_HELP,
        description=labels.TUI_DESCRIPTION,
    )
    viewer_args(p)
    p.add_argument("--compare", action="store_true", help=labels.TUI_COMPARE_HELP)
    p.set_defaults(func=cmd_tui)
