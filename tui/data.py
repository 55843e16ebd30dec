"""What the TUI shows, computed once per trace snapshot (off the UI thread).

A TraceModel is a tracer.analysis.session.Session whose flags and flag index are computed when it
is built, in the feed's or the compare screen's worker thread, so the UI thread only reads them.
This module holds no budget logic and imports no Textual.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracer.analysis.compare import Comparison, compare
from tracer.analysis.flags import FlagReport
from tracer.analysis.session import Session, neighbour
from tracer.trace.reader import Trace


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
    def build(cls, a: Trace, b: Trace) -> CompareModel:
        a_model, b_model = TraceModel.build(a), TraceModel.build(b)
        comparison = compare(a_model, b_model)  # the sessions' reports: nothing detects twice
        deltas = [comparison.delta(name) != 0 for name in comparison.values]
        changed = np.flatnonzero(np.any(deltas, axis=0)) if deltas else np.zeros(0, dtype=np.int64)
        return cls(a_model, b_model, comparison, changed)

    def __len__(self) -> int:
        return len(self.comparison.steps)

    def next_change(self, row: int, *, backwards: bool = False) -> int | None:
        return neighbour(self.changed, row, backwards)
