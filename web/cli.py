"""`schedscope web`: registered through the `schedscope.commands` entry point, so the
tracer package never names the web app. Dash and plotly load only when it runs."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from tracer.inputs import viewer_args, viewer_inputs
from tracer.render import labels
from tracer.render.command_lines import error_line


def cmd_web(args: argparse.Namespace) -> int:
    """Serve the Dash web app over one or two traces and/or a growing file; loopback unless --allow-remote."""
    from tracer.live.net import is_loopback

    try:
        inputs = viewer_inputs(args, "web", live_beside=True)
    except ValueError as exc:
        print(error_line(exc), file=sys.stderr)
        return 2
    if not is_loopback(args.host):
        if not args.allow_remote:
            print(labels.not_loopback(args.host), file=sys.stderr)
            return 2
        print(labels.serving_remote(args.host, args.port), file=sys.stderr)
    try:
        from web.app import make_app  # lazily: dash and plotly only for this command
    except ImportError as exc:
        print(labels.needs_dash(exc), file=sys.stderr)
        return 2
    from tracer.opening.door import open_input

    # One trace is shown while it loads; two (compare) and --engines are opened whole, the two
    # at once, the engines checked to be one run (a TraceError names file and field).
    opened = open_input(replace(inputs, shown_while_loading=True))
    sweep = None
    if args.sweep:
        from tracer.whatif.sweep import SweepFileError, load_sweep

        try:
            sweep = load_sweep(args.sweep)
        except SweepFileError as exc:
            print(labels.bad_sweep(exc), file=sys.stderr)
            return 2
    app = make_app(opened=opened, max_upload=args.max_upload_mb << 20, sweep=sweep)
    from web.plotlyjs import fallback

    if reason := fallback():
        print(labels.web_note(reason), file=sys.stderr)
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(labels.serving(host, args.port), flush=True)
    try:
        app.run(host=args.host, port=args.port, debug=False)
    finally:
        for feed in app.feeds:  # type: ignore[attr-defined]
            feed.stop()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "web",
        help=labels.WEB_HELP,
        description=labels.WEB_DESCRIPTION,
    )
    viewer_args(p)
    p.add_argument("--host", default="127.0.0.1", help=labels.HOST_HELP)
    p.add_argument("--port", type=int, default=8050, help=labels.PORT_HELP)
    p.add_argument("--allow-remote", action="store_true", help=labels.ALLOW_REMOTE_HELP)
    p.add_argument("--max-upload-mb", type=int, default=64, help=labels.MAX_UPLOAD_HELP)
    p.add_argument("--sweep", metavar=labels.SWEEP_METAVAR, help=labels.SWEEP_HELP)
    p.set_defaults(func=cmd_web)
