"""What the views show, computed once per trace snapshot (off the UI thread).

Everything here comes from tracer: the trace's columns, the budget analysis,
the flag report and the comparison. This module only indexes those results
for quick navigation; it holds no budget logic and imports no Textual.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tracer.analysis.compare import Comparison, compare
from tracer.analysis.flags import KINDS, Flag, FlagReport, detect
from tracer.analysis.lookup import flag_rows
from tracer.trace.reader import Trace

SEVERITY_CODE = {"info": 1, "warning": 2, "error": 3}


def _neighbour(rows: np.ndarray, row: int, backwards: bool) -> int | None:
    """The first of the sorted `rows` after `row` (or the last before it)."""
    if backwards:
        i = int(np.searchsorted(rows, row, side="left")) - 1
        return int(rows[i]) if i >= 0 else None
    i = int(np.searchsorted(rows, row, side="right"))
    return int(rows[i]) if i < len(rows) else None


@dataclass
class TraceModel:
    """A trace with its flag report, indexed by row. Per-flag arrays, no per-step objects."""

    trace: Trace
    report: FlagReport
    flag_rows: np.ndarray  # row of each flag, sorted (flags are sorted by step)
    flag_kinds: np.ndarray  # kind of each flag (object array)
    flag_severity: np.ndarray  # 1 info, 2 warning, 3 error

    @classmethod
    def build(cls, trace: Trace, report: FlagReport | None = None) -> TraceModel:
        report = report if report is not None else detect(trace)
        rows, kinds = flag_rows(trace, report)
        severity = np.fromiter((SEVERITY_CODE.get(f.severity, 1) for f in report.flags), np.int8, len(rows))
        return cls(trace, report, rows, kinds, severity)

    @property
    def name(self) -> str:
        return Path(self.trace.path).name

    def __len__(self) -> int:
        return len(self.trace)

    @property
    def kinds_present(self) -> list[str]:
        present = set(self.flag_kinds.tolist())
        return [k for k in KINDS if k in present]

    def flags_at(self, row: int) -> list[Flag]:
        lo, hi = np.searchsorted(self.flag_rows, [row, row + 1])
        return self.report.flags[int(lo) : int(hi)]

    def flag_index(self, kind: str | None) -> np.ndarray:
        """Positions in report.flags of the flags of `kind` (all when None)."""
        if kind is None:
            return np.arange(len(self.flag_rows))
        return np.flatnonzero(self.flag_kinds == kind)

    def next_flag(self, row: int, kind: str | None = None, *, backwards: bool = False) -> int | None:
        """Row of the next (or previous) flagged step after `row`, optionally of one kind."""
        rows = self.flag_rows if kind is None else self.flag_rows[self.flag_kinds == kind]
        return _neighbour(rows, row, backwards)

    def severity_by_row(self) -> np.ndarray:
        """The worst flag severity of each row (0: none), for the timeline's markers."""
        out = np.zeros(len(self.trace), dtype=np.int8)
        ok = self.flag_rows >= 0
        np.maximum.at(out, self.flag_rows[ok], self.flag_severity[ok])
        return out


@dataclass
class CompareModel:
    a: TraceModel
    b: TraceModel
    comparison: Comparison
    changed: np.ndarray  # aligned rows where any per-step delta is nonzero

    @classmethod
    def build(cls, a: Trace, b: Trace) -> CompareModel:
        comparison = compare(a, b)
        deltas = [comparison.delta(name) != 0 for name in comparison.values]
        changed = np.flatnonzero(np.any(deltas, axis=0)) if deltas else np.zeros(0, dtype=np.int64)
        # compare() already ran the detectors; reuse its reports rather than running them twice.
        a_model = TraceModel.build(a, comparison.a.flags)
        return cls(a_model, TraceModel.build(b, comparison.b.flags), comparison, changed)

    def __len__(self) -> int:
        return len(self.comparison.steps)

    def next_change(self, row: int, *, backwards: bool = False) -> int | None:
        return _neighbour(self.changed, row, backwards)
