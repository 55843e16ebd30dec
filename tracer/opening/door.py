"""One way in: whatever a command, a viewer, doctor or the what-if harness opens, it opens here.

As harlequin's single `connect()` stands between its adapters and everything that reads a
database, `open_input(spec)` stands between the inputs and everything that reads a trace. A
`Spec` names what to open (one trace, the two traces of a comparison, the engines of one run,
an upload's bytes, a growing file or a live stream, or a source already made) and how (strict
or lenient, with progress, with entry columns, the viewer's own Session class); `Opened` holds
one analysis Session per trace opened whole, the Run when they are one run's engines, and the
TraceSource of an input shown while it reads (not started: the viewer binds its callbacks
first). The checks of what may be opened together are `check`, here once, for the command
line and every viewer's factory alike.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracer.analysis.engines import Run
from tracer.analysis.session import Session
from tracer.opening.open_pair import load_pair
from tracer.opening.open_run import open_run
from tracer.trace.builder import Progress
from tracer.trace.ingest import load_bytes
from tracer.trace.reader import load
from tracer.trace.source import TraceSource
from tracer.trace.trace_type import EntriesWanted, Trace


@dataclass(frozen=True)
class Upload:
    """A whole trace's bytes already in memory (a web upload); `name` only labels it."""

    data: bytes
    name: str
    max_decompressed: int = 1 << 30  # what a small upload may expand to


@dataclass(frozen=True)
class Spec:
    """What to open, and how. At most one live input (`follow`, `attach` or a live source)."""

    traces: tuple[str | Path, ...] = ()  # TRACE, or A and B to compare
    engines: tuple[str | Path, ...] = ()  # the traces of one data-parallel run
    follow: str | Path | None = None  # a file a server is writing
    attach: str | None = None  # a live server's stream URL
    token: str | None = None  # with attach: its bearer token
    save: str | Path | None = None  # with attach: keep what is received in this file
    upload: Upload | None = None
    sources: tuple[TraceSource, ...] = ()  # sources already made (a file, a growing file or a stream)
    strict: bool = True
    progress: Progress | None = None  # bytes read of the traces opened whole
    entries: EntriesWanted = False  # collect one trace's entry columns (a pair always does)
    shown_while_loading: bool = False  # one trace: a TraceSource.file the viewer shows as it reads
    compare: bool = False  # the viewer was asked to compare (TRACE and TRACE_B)
    live_beside: bool = False  # the viewer can show a live input beside traces (the web app)
    viewer: str | None = None  # "tui" or "web": the viewer asked to open these (named in errors)
    session: Callable[[Trace], Session] = Session  # makes each Session (a viewer's, built warm)
    source_options: dict[str, Any] = field(default_factory=dict)  # interval, poll: a source's pace


@dataclass
class Opened:
    """What `open_input` opened: Sessions over the traces read whole, in the order named
    (TRACE; A then B; the engines), the Run of engines, and a source shown while it reads."""

    sessions: list[Session] = field(default_factory=list)
    run: Run | None = None  # Spec.engines, checked to be one run
    source: TraceSource | None = None  # one complete file shown while it reads (not live)
    live: TraceSource | None = None  # a growing file or a live stream

    @property
    def session(self) -> Session:
        """The one Session opened (TRACE, an upload)."""
        if len(self.sessions) != 1:
            raise ValueError(f"{len(self.sessions)} traces were opened, not one")
        return self.sessions[0]

    @property
    def pair(self) -> tuple[Session, Session]:
        """A and B, for a comparison."""
        if len(self.sessions) != 2:
            raise ValueError(f"{len(self.sessions)} traces were opened, not two")
        return self.sessions[0], self.sessions[1]


def check(spec: Spec, *, files: bool = False) -> None:
    """The one check of what may be opened together: ValueError with the sentence to print,
    before anything is read (a viewer says it before the terminal switches screens or anything
    is served). `files`: every trace path must also be a file (the command line's viewers ask
    now; the others learn it from the reader, as a TraceError naming the file)."""
    # A complete file's source made already is a trace where the viewer shows traces beside a
    # live input (the web app), and a source of its own otherwise (the TUI shows one at a time).
    made_live = sum(1 for s in spec.sources if s.live or not spec.live_beside)
    live = (spec.follow is not None) + (spec.attach is not None) + made_live
    traces = len(spec.traces) + (spec.upload is not None) + len(spec.sources) - made_live
    engines = len(spec.engines)
    if spec.attach is not None and spec.follow is not None:
        raise ValueError("give --attach URL or --follow FILE, not both")
    if live > 1:
        raise ValueError("give --attach URL or --follow FILE, not both")
    if spec.save is not None and spec.attach is None:
        raise ValueError("--save FILE keeps what --attach URL receives: give --attach too")
    if live and traces and not spec.live_beside:
        raise ValueError("--follow and --attach open a trace alone: give no other trace")
    if engines and (traces or live):
        raise ValueError("--engines opens one run's traces: give no other trace")
    if spec.compare and traces != 2:
        raise ValueError("--compare needs two traces: A and B")
    if traces > 2:
        raise ValueError(f"{traces} traces: give one, or two to compare")
    if not (live or traces or engines):
        what = spec.viewer or "schedscope"
        raise ValueError(
            f"{what} needs a TRACE, two to compare, --engines TRACE..., --follow FILE or --attach URL"
        )
    if files:
        for path in (*spec.traces, *spec.engines):
            if not os.path.isfile(path):
                what = "is a directory, not a trace file" if os.path.isdir(path) else "no such file"
                raise ValueError(f"{path}: {what}")


def open_input(spec: Spec) -> Opened:
    """Check `spec` (ValueError), then open it (TraceError naming file, line and field).

    One trace is read whole into a Session, or, `shown_while_loading`, made a TraceSource.file;
    two are opened at once (tracer.opening.open_pair); engines are read in turn and checked to be
    one run (tracer.opening.open_run); an upload is parsed in memory (tracer.trace.ingest). A
    live input becomes a TraceSource, not started."""
    check(spec)
    opened = Opened(live=_live(spec), source=next((s for s in spec.sources if not s.live), None))
    make = spec.session
    if spec.upload is not None:
        up = spec.upload
        trace = load_bytes(up.data, up.name, strict=spec.strict, max_decompressed=up.max_decompressed)
        opened.sessions.append(make(trace))
    elif spec.engines:
        opened.run = open_run(list(spec.engines), strict=spec.strict, progress=spec.progress, session=make)
        opened.sessions = [e.session for e in opened.run.engines]
    elif len(spec.traces) == 2:
        a, b = spec.traces
        opened.sessions = list(load_pair(a, b, strict=spec.strict, progress=spec.progress, session=make))
    elif spec.traces and spec.shown_while_loading:
        opened.source = TraceSource.file(spec.traces[0], strict=spec.strict, **spec.source_options)
    elif spec.traces:
        trace = load(spec.traces[0], strict=spec.strict, progress=spec.progress, entries=spec.entries)
        opened.sessions.append(make(trace))
    return opened


def open_paths(
    paths: Sequence[str | Path],
    *,
    strict: bool = True,
    progress: Progress | None = None,
    entries: EntriesWanted = False,
) -> Opened:
    """The traces a command names, through `open_input`: one trace (`entries`: with its entry
    columns), or several, which must be the engines of one run (refused otherwise)."""
    if len(paths) > 1:
        return open_input(Spec(engines=tuple(paths), strict=strict, progress=progress))
    return open_input(Spec(traces=tuple(paths), strict=strict, progress=progress, entries=entries))


def open_path(
    path: str | Path, *, strict: bool = True, progress: Progress | None = None, entries: EntriesWanted = False
) -> Session:
    """The Session over a command's one trace: the command line's door, one call."""
    return open_paths((path,), strict=strict, progress=progress, entries=entries).session


def _live(spec: Spec) -> TraceSource | None:
    made = next((s for s in spec.sources if s.live), None)
    if made is not None:
        return made
    if spec.attach is not None:
        url, options = spec.attach, spec.source_options
        return TraceSource.stream(url, token=spec.token, save=spec.save, strict=spec.strict, **options)
    if spec.follow is not None:
        return TraceSource.follow(spec.follow, strict=spec.strict, **spec.source_options)
    return None
