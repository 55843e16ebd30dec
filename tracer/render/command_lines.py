"""What the command line prints beside its commands' reports: its error lines (the
`schedscope: error:` prefix, and the errors a command finds in its arguments or meets while it
writes or runs something), what it says while it opens a trace (how much of a big file is read,
the stream it attaches to), a progress frame redrawn in place (`parquet`'s and `sweep_report`'s
progress are made with `progress_frame` too), a file written beside a report, and the JSON
documents of `step` and the `--json` forms. The commands (tracer.commands, tracer.cli) print
these as they are."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tracer.trace.errors import TraceError, TraceOrderError, skippable


def error_line(problem: object) -> str:
    """A command's error, on stderr: the problem (a sentence worded in render, or an error
    worded where it was raised) after the command line's prefix."""
    return f"schedscope: error: {problem}"


def trace_error(error: TraceError, lenient: bool) -> str:
    """A reader's error that ended a command; without --lenient, what --lenient would skip
    past it, when it would (tracer.trace.errors.skippable)."""
    if lenient or not skippable(error):
        return error_line(error)
    return error_line(f"{error} ({lenient_hint(error)})")


def lenient_hint(error: TraceError) -> str:
    """What `--lenient` would skip past a reader's error."""
    what = "out-of-order steps" if isinstance(error, TraceOrderError) else "malformed lines"
    return f"--lenient skips {what}"


def cannot_write(path: str | Path, exc: OSError) -> str:
    """An output a command could not write: the operating system's reason, without its errno."""
    return error_line(f"cannot write {path}: {exc.strerror or exc}")


def cannot_run(python: str, exc: OSError) -> str:
    """`replay --python PYTHON` when PYTHON cannot be started."""
    return error_line(f"cannot run {python}: {exc}")


def client_unreadable(path: str, why: object) -> str:
    """`timing --client FILE` when FILE cannot be read or split against the trace."""
    return error_line(f"--client {path}: {why}")


# -- usage errors: arguments that argparse accepts but the command cannot take together ----------
WHY_NEEDS_ONE = error_line("give a REQUEST_ID or --step N (one of them)")
EXPORT_NEEDS_OUTPUT = error_line("export needs -o/--output (or --otlp / --otlp-json)")
ENGINE_IS_PARQUET = error_line("--engine names a parquet export's engine column")
OTLP_TAKES_NO_OUTPUT = error_line("--otlp/--otlp-json export spans; leave out -o and --format")
OTLP_TIMEOUT_POSITIVE = error_line("--otlp-timeout must be a positive number of seconds")
CHECK_NEEDS_TRACE = error_line("--check needs a recorded trace, not a workload file")
REPLAY_NEEDS_OUTPUT = error_line("replay needs -o OUTPUT (or --check)")
TIMED_NEEDS_TRACE = error_line("--timed needs a recorded trace to fit on")


def unknown_policy(name: str, known: Iterable[str]) -> str:
    """`sweep --policy` naming a policy that is not one of `known`."""
    return error_line(f"unknown policy {name!r}; one of {', '.join(known)}")


def grid_not_a_number(exc: ValueError) -> str:
    """`sweep`'s grid (B, K or N values) holding something that is not a number."""
    return error_line(f"a grid value is not a number ({exc})")


def plot_unavailable(exc: Exception) -> str:
    """`sweep --plot/--png` without the web extra that draws the figure."""
    return error_line(f"the plot needs: pip install 'schedscope[web]' ({exc})")


# -- status -----------------------------------------------------------------------------------
def loading_text(done: int, total: int) -> str:
    """How much of a big trace is read ("loading  42.0%"), as a command prints it on a terminal
    while it opens the trace (tracer.inputs): a frame redrawn in place."""
    return progress_frame(f"loading {done / total:6.1%}", done, total)


def attaching_text(url: str, save: str | None) -> str:
    """What a viewer attaches to (and where it keeps what it receives), on stderr before its
    screen opens (tracer.inputs)."""
    saving = f"; saving to {save}" if save else ""
    return f"schedscope: attaching to {url}{saving}"


def wrote_line(path: str | Path) -> str:
    """A file a command wrote beside its report (the sweep figure), on stderr."""
    return f"wrote {path}"


def progress_frame(text: str, done: int, total: int) -> str:
    """One frame of a progress text redrawn in place on a terminal: a carriage return before
    it, and a newline after the last (`done == total`) so that what follows starts a line."""
    return f"\r{text}" if done < total else f"\r{text}\n"


# -- JSON ---------------------------------------------------------------------------------------
def json_bytes(doc: Any) -> bytes:
    """A JSON document as `step` and every `--json` write it to stdout: indented, one newline."""
    import orjson

    return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"
