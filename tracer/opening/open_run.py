"""The traces of one run's engines, opened in turn, then checked to be one run
(tracer.analysis.engines: `Run.of` refuses traces of another model, budget or vLLM)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from tracer.analysis.engines import Run
from tracer.analysis.session import Session
from tracer.trace.builder import Progress
from tracer.trace.reader import load
from tracer.trace.trace_type import Trace


def open_run(
    paths: Sequence[str | Path],
    *,
    strict: bool = True,
    progress: Progress | None = None,
    session: Callable[[Trace], Session] = Session,
) -> Run:
    """Each trace in turn, then the one-run check (TraceError if not one run). `progress`
    covers the whole run, in bytes of the files; `session` makes each engine's Session
    (a viewer's subclass, built with what its first frame draws)."""
    sizes = []
    for p in paths:
        try:
            sizes.append(os.stat(p).st_size)
        except OSError:
            sizes.append(0)  # load names the problem
    whole = max(1, sum(sizes))
    sessions = []
    for i, path in enumerate(paths):
        before = sum(sizes[:i])

        def each(done: int, total: int, before: int = before, size: int = sizes[i]) -> None:
            if progress is not None:  # the files differ in size: their share of the whole
                progress(before + size * done // max(1, total), whole)

        sessions.append(session(load(path, strict=strict, progress=each)))
    return Run.of(sessions)
