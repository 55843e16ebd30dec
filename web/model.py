"""A loaded trace as the web app sees it: the Trace plus the model layer's results.

Everything here is computed by tracer (budget analysis, flags, named series);
the view only keeps them together under a key the browser can name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracer.analysis.budget import analyze
from tracer.analysis.flags import Flag, FlagReport, detect
from tracer.analysis.series import step_series
from tracer.render.summary import describe_engine, describe_gaps
from tracer.trace.reader import Trace


@dataclass
class TraceView:
    key: str  # server-chosen id; the browser names traces only by it
    label: str
    trace: Trace
    report: FlagReport
    series: dict[str, np.ndarray]
    version: int = 0  # bumps each time a followed file grows
    cache: dict[str, Any] = field(default_factory=dict)  # derived view objects (charts)

    @classmethod
    def build(cls, key: str, label: str, trace: Trace, *, version: int = 0) -> TraceView:
        analysis = analyze(trace)
        report = detect(trace, analysis)
        return cls(key, label, trace, report, step_series(trace, analysis), version)

    @property
    def steps(self) -> np.ndarray:
        return self.series["step"]

    def __len__(self) -> int:
        return len(self.trace)

    def row_of(self, step: int) -> int | None:
        """Row index of a recorded step number, or None."""
        steps = self.steps
        i = int(np.searchsorted(steps, step))
        return i if i < len(steps) and int(steps[i]) == step else None

    def flags_at(self, step: int) -> list[Flag]:
        by_step = self.cache.get("by_step")
        if by_step is None:
            by_step = self.cache["by_step"] = self.report.by_step()
        return by_step.get(step, [])

    def summary(self) -> str:
        """One line: engine, steps, flags and tokens lost."""
        t = self.trace
        counts = ", ".join(f"{kind} ×{n}" for kind, n in self.report.counts().items()) or "no flags"
        lost = self.report.tokens_lost
        tail = f"; {lost} target tokens lost to additive double-reservation" if lost else ""
        torn = f"; {t.torn.describe()}" if t.torn else ""
        gaps = f"; {describe_gaps(t)}" if t.gaps else ""
        return f"{describe_engine(t)} | {len(t)} steps: {counts}{tail}{torn}{gaps}"
