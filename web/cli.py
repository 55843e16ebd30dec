"""`schedscope web`: registered through the `schedscope.commands` entry point, so the
tracer package never names the web app. Dash and plotly load only when it runs."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from tracer.inputs import viewer_args, viewer_inputs


def cmd_web(args: argparse.Namespace) -> int:
    """Serve the Dash web app over one or two traces and/or a growing file; loopback unless --allow-remote."""
    from tracer.live.net import is_loopback

    try:
        inputs = viewer_inputs(args, "web", live_beside=True)
    except ValueError as exc:
        print(f"schedscope: error: {exc}", file=sys.stderr)
        return 2
    if not is_loopback(args.host):
        if not args.allow_remote:
            print(
                f"schedscope: error: {args.host} is not a loopback address and the web app has no "
                "authentication; pass --allow-remote to serve it there anyway",
                file=sys.stderr,
            )
            return 2
        print(
            f"schedscope: warning: serving on {args.host}: anyone who can reach port {args.port} can read "
            "these traces and upload files",
            file=sys.stderr,
        )
    try:
        from web.app import make_app  # lazily: dash and plotly only for this command
    except ImportError as exc:
        print(f"schedscope: error: the web app needs: pip install 'schedscope[web]' ({exc})", file=sys.stderr)
        return 2
    from tracer.analysis.opening import open_input

    # One trace is shown while it loads; two (compare) and --engines are opened whole, the two
    # at once, the engines checked to be one run (a TraceError names file and field).
    opened = open_input(replace(inputs, shown_while_loading=True))
    sweep = None
    if args.sweep:
        from tracer.whatif.sweep import SweepFileError, load_sweep

        try:
            sweep = load_sweep(args.sweep)
        except SweepFileError as exc:
            print(f"schedscope: error: --sweep {exc}", file=sys.stderr)
            return 2
    app = make_app(opened=opened, max_upload=args.max_upload_mb << 20, sweep=sweep)
    from web.plotlyjs import fallback

    if reason := fallback():
        print(f"schedscope web: note: {reason}", file=sys.stderr)
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"schedscope web: http://{host}:{args.port}/  (Ctrl-C to stop)", flush=True)
    try:
        app.run(host=args.host, port=args.port, debug=False)
    finally:
        for feed in app.feeds:  # type: ignore[attr-defined]
            feed.stop()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "web",
        help="interactive web app: timelines, step inspector, flags, compare, live --follow",
        description="Serves a Dash app (needs the 'web' extra) on loopback and prints its URL. "
        "With TRACE_B the compare page opens on A vs B; --engines shows the engines of a "
        "data-parallel run as lanes; --follow FILE shows a growing trace live.",
    )
    viewer_args(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8050, help="port (default 8050)")
    p.add_argument(
        "--allow-remote", action="store_true", help="allow a non-loopback --host (no authentication!)"
    )
    p.add_argument("--max-upload-mb", type=int, default=64, help="upload size limit in MiB (default 64)")
    p.add_argument("--sweep", metavar="JSON", help="show a saved `schedscope sweep --json` on a Sweep page")
    p.set_defaults(func=cmd_web)
