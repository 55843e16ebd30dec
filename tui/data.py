"""What the views show, computed once per trace snapshot (off the UI thread).

Everything here comes from tracer: the trace's columns, the budget analysis,
the flag report and the comparison. This module only indexes those results
for quick navigation; it holds no budget logic and imports no Textual.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tracer.compare import Comparison, compare
from tracer.flags import KINDS, SEVERITY, Flag, FlagReport, detect
from tracer.lookup import flag_rows
from tracer.reader import Trace


@dataclass
class TraceModel:
    trace: Trace
    report: FlagReport
    flag_rows: np.ndarray  # row of each flag, sorted (flags are sorted by step)
    flag_kinds: np.ndarray  # kind of each flag (object array)
    flags_by_row: dict[int, list[Flag]] = field(default_factory=dict)

    @classmethod
    def build(cls, trace: Trace, report: FlagReport | None = None) -> TraceModel:
        report = report if report is not None else detect(trace)
        rows, kinds = flag_rows(trace, report)
        by_row: dict[int, list[Flag]] = {}
        for row, flag in zip(rows.tolist(), report.flags, strict=True):
            by_row.setdefault(row, []).append(flag)
        return cls(trace, report, rows, kinds, by_row)

    @property
    def name(self) -> str:
        return Path(self.trace.path).name

    def __len__(self) -> int:
        return len(self.trace)

    @property
    def kinds_present(self) -> list[str]:
        present = set(self.flag_kinds.tolist())
        return [k for k in KINDS if k in present]

    def flag_mask(self, kind: str | None) -> np.ndarray:
        return np.ones(len(self.flag_rows), bool) if kind is None else self.flag_kinds == kind

    def next_flag(self, row: int, kind: str | None = None, *, backwards: bool = False) -> int | None:
        """Row of the next (or previous) flagged step after `row`, optionally of one kind."""
        rows = self.flag_rows[self.flag_mask(kind)]
        if backwards:
            i = int(np.searchsorted(rows, row, side="left")) - 1
            return int(rows[i]) if i >= 0 else None
        i = int(np.searchsorted(rows, row, side="right"))
        return int(rows[i]) if i < len(rows) else None

    def severity_rows(self) -> dict[str, np.ndarray]:
        """Rows flagged at each severity (for the timeline's markers)."""
        out: dict[str, np.ndarray] = {}
        for sev in ("error", "warning", "info"):
            kinds = [k for k, s in SEVERITY.items() if s == sev]
            out[sev] = (
                self.flag_rows[np.isin(self.flag_kinds, kinds)] if len(self.flag_rows) else self.flag_rows
            )
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
        rows = self.changed
        if backwards:
            i = int(np.searchsorted(rows, row, side="left")) - 1
            return int(rows[i]) if i >= 0 else None
        i = int(np.searchsorted(rows, row, side="right"))
        return int(rows[i]) if i < len(rows) else None
