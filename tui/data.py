"""What the TUI shows, computed once per trace snapshot (off the UI thread).

A TraceModel is a tracer.analysis.session.Session whose flags and flag index are computed when it
is built, in the feed's or the compare screen's worker thread, so the UI thread only reads them.
This module holds no budget logic and imports no Textual.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from tracer.analysis.compare import Comparison, compare
from tracer.analysis.engines import ReadsRun, Run
from tracer.analysis.flags import FlagReport
from tracer.analysis.session import Session, neighbour
from tracer.trace.trace_type import Trace


class TraceModel(Session):
    """A Session, built with everything the first frame draws."""

    @classmethod
    def build(cls, trace: Trace, report: FlagReport | None = None) -> TraceModel:
        model = cls(trace, report=report)
        _ = model.flag_index  # the report and its index, computed now (off the UI thread)
        return model


@dataclass
class CompareModel:
    a: TraceModel
    b: TraceModel
    comparison: Comparison
    changed: np.ndarray  # aligned rows where any per-step delta is nonzero

    @classmethod
    def build(cls, a: TraceModel | Trace, b: TraceModel | Trace) -> CompareModel:
        """Over two TraceModels (as tracer.opening.door made them: nothing is computed
        again), or two traces."""
        a_model, b_model = (m if isinstance(m, TraceModel) else TraceModel.build(m) for m in (a, b))
        comparison = compare(a_model, b_model)  # the sessions' reports: nothing detects twice
        deltas = [comparison.delta(name) != 0 for name in comparison.values]
        changed = np.flatnonzero(np.any(deltas, axis=0)) if deltas else np.zeros(0, dtype=np.int64)
        return cls(a_model, b_model, comparison, changed)

    def __len__(self) -> int:
        return len(self.comparison.steps)

    def next_change(self, row: int, *, backwards: bool = False) -> int | None:
        return neighbour(self.changed, row, backwards)


@dataclass
class RunModel(ReadsRun):
    """The engines of one data-parallel run (tracer.analysis.engines.Run), each a TraceModel. The
    shared step axis and the totals are the Run's, read through, never copied."""

    run: Run  # opened with TraceModel.build (tracer.opening.door)

    @property
    def models(self) -> list[TraceModel]:
        return cast("list[TraceModel]", [e.session for e in self.run.engines])  # as load/build made them

    def __len__(self) -> int:
        return len(self.steps)

    def on_axis(self, engine: int, values: np.ndarray) -> np.ndarray:
        """An engine's per-row array placed on the shared axis; 0 where it recorded no such step."""
        return self.run.axis.place(engine, values, 0)

    def row_of(self, step: int) -> int | None:
        return self.run.axis.row_of(step)
