"""What the command line asks to open, as the one way in's Spec (tracer.opening.door):
the traces a command names (`open_traces`, `open_trace`) and what a viewer was asked to open
(`viewer_args`, `viewer_inputs`). The viewers (tui/cli.py, web/cli.py) import this module, so
they need not load the whole command line to read their options."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracer.analysis.session import Session
    from tracer.opening.door import EntriesWanted, Opened, Spec


def progress(done: int, total: int) -> None:
    """How much of a big trace is read, on a terminal's stderr."""
    if total > 64 << 20 and sys.stderr.isatty():
        from tracer.render.command_lines import loading_text

        print(loading_text(done, total), end="", file=sys.stderr)


def open_traces(args: argparse.Namespace, *paths: str, entries: EntriesWanted = False) -> Opened:
    """The traces a command names, through the one way in (tracer.opening.door): one
    trace, or several, which must be the engines of one run (refused otherwise)."""
    from tracer.opening.door import open_paths

    return open_paths(paths, strict=not args.lenient, progress=progress, entries=entries)


def open_trace(args: argparse.Namespace, *, entries: EntriesWanted = False) -> Session:
    """The Session over the command's one TRACE."""
    from tracer.opening.door import open_path

    return open_path(args.trace, strict=not args.lenient, progress=progress, entries=entries)


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


def viewer_inputs(args: argparse.Namespace, command: str, *, live_beside: bool = False) -> Spec:
    """What `schedscope tui|web` was asked to open, as the one way in's Spec, checked there
    (tracer.opening.door.check): ValueError with the sentence to print, before the terminal
    switches screens or anything is served, so the user reads it. `live_beside`: the viewer can
    show a live source beside traces (the web app compares them)."""
    from tracer.opening.door import Spec, check

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
        from tracer.render.command_lines import attaching_text

        print(attaching_text(attach, args.save), file=sys.stderr)
    return spec
