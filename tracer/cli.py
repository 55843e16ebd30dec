"""The `schedscope` command line: the top-level parser, the plugins' commands and `main`.

argparse (standard library) rather than click/typer: the tracer package must
stay importable with no dependencies beyond orjson and numpy. The built-in commands
are tracer.commands (their arguments: tracer.commands.arguments); what a command or a
viewer opens is read from its arguments by tracer.inputs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from tracer import __version__
from tracer.commands.arguments import add_commands

EPILOG = """\
examples:
  schedscope summary sample_traces/dflash_k7_additive.jsonl
  schedscope step sample_traces/dflash_k7_additive.jsonl 1
  schedscope serve --trace /tmp/run.jsonl -- MODEL_DIR --speculative-config '{"method":"ngram",...}'

Record your own server: run vLLM with
  SCHEDSCOPE_TRACE=/tmp/run.jsonl vllm serve MODEL --scheduler-cls tracer.scheduler.TracingScheduler
(tracer.scheduler.TracingAsyncScheduler when async scheduling is on).
"""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; `command`: the one to be run, when known (the plugins' commands are
    added unless it is a built-in one)."""
    parser = argparse.ArgumentParser(
        prog="schedscope",
        description="Record, read and explain vLLM scheduler traces: budgets, draft-slot "
        "reservations, admissions and preemptions, step by step.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"schedscope {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_commands(sub)

    # Commands that live beside their apps (tui/cli.py, web/cli.py), found through the
    # `schedscope.commands` entry points so that tracer never names a UI package. Not looked
    # up for a built-in command: scanning the installed packages' metadata costs
    # about 0.1 s of every `summary` or `flags`.
    if command in sub.choices:
        return parser
    from importlib.metadata import entry_points

    for entry in sorted(entry_points(group="schedscope.commands"), key=lambda e: e.name):
        try:
            register = entry.load()
        except ImportError as exc:
            sub.add_parser(entry.name, help=f"(unavailable here: {exc})")
            continue
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from tracer.trace.errors import TraceError

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
        from tracer.render.command_lines import trace_error

        print(trace_error(exc, lenient=getattr(args, "lenient", True)), file=sys.stderr)
        return 2
    except BrokenPipeError:  # `schedscope summary … | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
