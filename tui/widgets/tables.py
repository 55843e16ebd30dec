"""The step table, the flag list and the compare delta table: virtual lists over model arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracer.analysis.flags import glyph
from tracer.render import empty, labels
from tracer.render.flags import message
from tui.data import CompareModel, TraceModel
from tui.widgets.vlist import Cell, VirtualList


def _col(text: object, width: int) -> str:
    return f"{text!s:>{width}}"


class StepTable(VirtualList):
    """One row per step, formatted from the trace's columns when it scrolls into view."""

    HEADS = tuple(zip(labels.STEP_COLUMNS, (7, 7, 7, 5, 6, 5, 6, 4, 4, 4, 5), strict=True))
    empty_text = empty.NO_STEPS_YET

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model: TraceModel | None = None

    def show(self, model: TraceModel | None) -> None:
        self.model = model
        self.set_count(len(model) if model is not None else 0)

    def header(self) -> list[Cell]:
        return [
            (
                "".join(_col(h, w) for h, w in self.HEADS) + f"  {labels.STEP_FLAGS_COLUMN}" + " " * 30,
                "header",
            )
        ]

    def row_cells(self, row: int) -> list[Cell]:
        assert self.model is not None
        col = self.model.trace.columns
        analysis = self.model.report.analysis
        sched = int(col["n_new"][row] + col["n_resumed"][row] + col["n_running"][row])
        withheld = int(analysis.withheld[row])
        withheld_text = "" if not withheld else (f"{withheld}" if analysis.exact[row] else f"≤{withheld}")
        query = f"{int(analysis.query_rows[row])}" if col["query_per_req"][row] else "–"
        rsv = int(col["input_reserved"][row])
        cells: list[Cell] = [
            (_col(int(col["step"][row]), 7), "muted"),
            (_col(int(col["target_used"][row]), 7), "row"),
            (_col(int(col["input_used"][row]), 7), "row"),
            (_col(f"+{rsv}" if rsv else "", 5), "warning"),
            (_col(query, 6), "row"),
            (_col(withheld_text, 5), "withheld"),
            (_col(sched, 6), "row"),
            (_col(int(col["n_new"][row] + col["n_resumed"][row]), 4), "row"),
            (_col(int(col["n_preempted"][row]) or "", 4), "warning"),
            (_col(int(col["n_finished"][row]) or "", 4), "row"),
            (_col(int(col["num_waiting"][row]), 5), "row"),
            ("  ", "row"),
        ]
        for flag in self.model.flags_at(row):
            cells.append((f"{glyph(flag.severity)} {flag.kind} ", flag.severity))
        return cells


class FlagList(VirtualList):
    """Every flag (or those of one kind), one line each; choosing one moves the cursor to its step."""

    empty_text = empty.no_flags_of(None)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model: TraceModel | None = None
        self.index = np.zeros(0, dtype=np.int64)  # position in report.flags of each listed flag
        self.rows = np.zeros(0, dtype=np.int64)  # step row of each listed flag

    def show(self, model: TraceModel | None, kind: str | None) -> None:
        # Index arrays, not a copied list: a trace can carry hundreds of thousands of flags.
        self.model = model
        self.index = model.flag_positions(kind) if model is not None else np.zeros(0, dtype=np.int64)
        self.rows = model.flag_rows[self.index] if model is not None else np.zeros(0, dtype=np.int64)
        self.empty_text = empty.no_flags_of(kind)
        self.set_count(len(self.index))

    def sync_to_row(self, row: int) -> None:
        """Put the list cursor on the last flag at or before step `row`."""
        if len(self.rows):
            self.set_cursor(max(0, int(np.searchsorted(self.rows, row, side="right")) - 1))

    def header(self) -> list[Cell]:
        step, kind, withheld, what = labels.FLAG_COLUMNS
        return [(f"{step:>7}   {kind:<29}{withheld:>8}  {what}" + " " * 60, "header")]

    def row_cells(self, row: int) -> list[Cell]:
        assert self.model is not None
        f = self.model.report.flags[int(self.index[row])]
        withheld = f.numbers.get("tokens_withheld")
        return [
            (f"{f.step:>7} ", "muted"),
            (f"{glyph(f.severity)} ", f.severity),
            (f"{f.kind:<29}", f.severity),
            (f"{withheld if withheld is not None else '':>8}  ", "withheld"),
            (message(f), "row"),
        ]


class DeltaTable(VirtualList):
    """Compare mode: step k of A against step k of B, with each delta coloured by its sign."""

    HEADS = tuple(zip(labels.DELTA_COLUMNS, (7, 10, 10, 7, 9, 9, 11, 12, 12, 9, 9), strict=True))

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model: CompareModel | None = None

    def show(self, model: CompareModel | None) -> None:
        self.model = model
        self.set_count(len(model) if model is not None else 0)

    def header(self) -> list[Cell]:
        return [("".join(_col(h, w) for h, w in self.HEADS) + "  ", "header")]

    def row_cells(self, row: int) -> list[Cell]:
        assert self.model is not None
        c = self.model.comparison
        ta, tb = (int(v[row]) for v in c.values["target_used"])
        cells: list[Cell] = [
            (_col(int(c.steps[row]), 7), "muted"),
            (_col(ta if row < len(self.model.a) else "–", 10), "row"),
            (_col(tb if row < len(self.model.b) else "–", 10), "row"),
        ]
        # More target tokens per step is better; for the other deltas only "changed" matters.
        for name, width, good in (
            ("target_used", 7, 1),
            ("query_rows", 9, 0),
            ("admitted", 9, 0),
            ("preempted", 11, -1),
        ):
            d = int(c.delta(name)[row])
            style = (
                "muted" if d == 0 else ("more" if d * good > 0 else ("less" if d * good < 0 else "warning"))
            )
            cells.append((_col(f"{d:+d}" if d else "0", width), style))
        for side in (self.model.a, self.model.b):
            withheld = int(side.report.analysis.withheld[row]) if row < len(side) else 0
            cells.append((_col(withheld or "", 12), "withheld"))
        for side in (self.model.a, self.model.b):
            flags = side.flags_at(row) if row < len(side) else []
            text = "".join(glyph(f.severity) for f in flags[:4])
            cells.append((_col(text or "", 9), flags[0].severity if flags else "muted"))
        return cells
