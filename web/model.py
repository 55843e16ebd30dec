"""A loaded trace as the web app sees it: a tracer.analysis.session.Session under a key.

Everything here is computed by tracer (budget analysis, flags, named series, the summary line);
the view only keeps a snapshot's session together with the key the browser names it by.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tracer.analysis.engines import ReadsRun, Run
from tracer.analysis.flags import Flag, FlagReport
from tracer.analysis.session import Session
from tracer.render.text import RunLine, engine_line, run_totals_line
from tracer.trace.trace_type import Trace


@dataclass
class TraceView:
    key: str  # server-chosen id; the browser names traces only by it
    label: str
    session: Session
    version: int = 0  # bumps each time a followed file grows

    @property
    def cache(self) -> dict[str, Any]:
        """Derived view objects (charts), kept in the trace's memo (tracer.analysis.memo)
        with everything else derived from this snapshot. They must not hold the view."""
        return self.session.memo.once("web.views", dict)

    @classmethod
    def build(cls, key: str, label: str, trace: Trace | Session, *, version: int = 0) -> TraceView:
        session = Session.of(trace)  # a Session given keeps what it has computed
        # Computed now, on the loading or following thread, not in the first callback that asks.
        _ = session.report, session.series
        return cls(key, label, session, version)

    @property
    def trace(self) -> Trace:
        return self.session.trace

    @property
    def report(self) -> FlagReport:
        return self.session.report

    @property
    def series(self) -> dict[str, np.ndarray]:
        return self.session.series

    @property
    def steps(self) -> np.ndarray:
        return self.series["step"]

    def __len__(self) -> int:
        return len(self.session)

    def row_of(self, step: int) -> int | None:
        """Row index of a recorded step number, or None."""
        return self.session.row_of(step)

    def flags_at(self, step: int) -> list[Flag]:
        row = self.session.row_of(step)
        return self.session.flags_at(row) if row is not None else []

    def summary(self) -> str:
        """One line: tracer.render.text's engine line, then its run line."""
        return f"{engine_line(self.trace.config)} | {RunLine.of(self.trace, self.report).text}"


@dataclass
class RunView(ReadsRun):
    """The engines of one data-parallel run (tracer.analysis.engines.Run), each a TraceView over
    the engine's own Session. The shared step axis (step k of each engine at x = k) and the
    totals are the Run's, read through, never copied."""

    run: Run
    views: list[TraceView]

    @property
    def cache(self) -> dict[str, Any]:
        """Derived view objects (the engines' chart), kept with the run's (Run.memo)."""
        return self.run.memo.once("web.views", dict)

    @classmethod
    def build(cls, run: Run, key: str = "engine") -> RunView:
        views = []
        for i, engine in enumerate(run.engines):
            _ = engine.session.report, engine.session.series  # now, not in the first callback
            views.append(TraceView(f"{key}-{i}", engine.label, engine.session))
        return cls(run, views)

    def on_axis(self, engine: int, values: np.ndarray, missing: int) -> np.ndarray:
        """An engine's per-row array placed on the shared axis; `missing` where it has no such step."""
        return self.run.axis.place(engine, values, missing)

    def totals_line(self) -> str:
        return run_totals_line(self.totals)
