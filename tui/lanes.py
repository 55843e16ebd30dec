"""Which per-step series the timeline draws, taken from the trace and tracer's analysis.

A lane names arrays that tracer already computed (the columns, the budget
analysis, the flags) and how to draw them; it computes no budget figures itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from tracer.analysis.series import step_series
from tracer.render import empty, labels
from tui.data import RunModel, TraceModel

Kind = Literal["bar", "stack", "marks", "note"]


@dataclass
class Mark:
    rows: np.ndarray  # per-row value; > 0 draws the mark
    glyph: str
    style: str


@dataclass
class Lane:
    name: str
    kind: Kind
    style: str = "target"
    height: int = 1
    values: np.ndarray | None = None  # bar value, or the lower part of a stack
    top: np.ndarray | None = None  # stack: the total (values + the distinct upper part)
    top_style: str = "reserved"
    scale: np.ndarray | float = 1.0  # per-row capacity, or one number
    marks: list[Mark] = field(default_factory=list)  # in priority order: the first present wins
    numbers: np.ndarray | None = None  # marks: figure written in a step when it is wide enough
    note: str = ""
    readout: Callable[[int], str] = lambda row: ""


def _fmt(v: int) -> str:
    return "–" if v < 0 else f"{v}"


def build_lanes(model: TraceModel, *, compact: bool = False) -> list[Lane]:
    trace, analysis = model.trace, model.report.analysis
    s = step_series(trace, analysis)  # every plotted value by its name, as the web app draws it
    n = len(trace)

    def at(arr: np.ndarray, row: int) -> int:
        return int(arr[row]) if 0 <= row < n else -1

    lanes = [
        Lane(
            labels.LANE_TARGET,
            "bar",
            "target",
            height=3,
            values=s["target_used"],
            scale=s["target_cap"],
            readout=lambda r: f"{_fmt(at(s['target_used'], r))}/{_fmt(at(s['target_cap'], r))}",
        ),
        Lane(
            labels.LANE_INPUT,
            "stack",
            "target",
            height=3,
            values=s["input_target"],
            top=s["input_used"],
            scale=s["input_cap"],
            readout=lambda r: labels.reserved_readout(
                _fmt(at(s["input_used"], r)), _fmt(at(s["input_reserved"], r))
            ),
        ),
        Lane(
            labels.LANE_WITHHELD,
            "marks",
            marks=[Mark(s["withheld"], "▼", "withheld"), Mark(s["reserved_excess"], "·", "reserved")],
            numbers=s["withheld"],
            readout=lambda r: (
                labels.tokens_readout(at(s["withheld"], r)) if at(s["withheld"], r) > 0 else "–"
            ),
        ),
    ]
    if analysis.model.q or int(trace.columns["query_per_req"].max(initial=0)) > 0:
        lanes.append(
            Lane(
                labels.LANE_QUERY,
                "bar",
                "query",
                height=1 if compact else 2,
                values=s["query_rows"],
                scale=s["query_cap"],
                readout=lambda r: f"{_fmt(at(s['query_rows'], r))}/{_fmt(at(s['query_cap'], r))}",
            )
        )
    if not compact:
        passes = [
            (labels.LANE_BUFFER_TARGET, "buffer_target_rows", "buffer_target_cap"),
            (labels.LANE_BUFFER_DRAFT, "buffer_draft_rows", "buffer_draft_cap"),
        ]
        shown = [p for p in passes if int(s[p[1]].max(initial=-1)) >= 0]
        for name, rows, cap in shown:
            lanes.append(
                Lane(
                    name,
                    "bar",
                    "buffer",
                    values=np.maximum(s[rows], 0),
                    scale=np.where(s[cap] > 0, s[cap], s["input_cap"]),
                    readout=lambda r, rows=rows, cap=cap: f"{_fmt(at(s[rows], r))}/{_fmt(at(s[cap], r))}",
                )
            )
        if not shown:
            lanes.append(Lane(labels.LANE_BUFFERS, "note", note=empty.NO_RUNNER_RECORDS_LANE))
        seqs = max(int(trace.config.get("max_num_seqs") or 0), int(s["num_running"].max(initial=0)))
        lanes.append(
            Lane(
                labels.LANE_RUNNING,
                "bar",
                "running",
                values=s["num_running"],
                scale=float(seqs),
                readout=lambda r: labels.of_readout(_fmt(at(s["num_running"], r)), seqs),
            )
        )
        lanes.append(
            Lane(
                labels.LANE_WAITING,
                "bar",
                "waiting",
                values=s["num_waiting"],
                scale=float(max(1, int(s["num_waiting"].max(initial=0)))),
                readout=lambda r: _fmt(at(s["num_waiting"], r)),
            )
        )
    sev = model.severity_by_row()
    counts = np.bincount(model.flag_rows[model.flag_rows >= 0], minlength=n) if n else np.zeros(0, np.int64)
    lanes.append(
        Lane(
            labels.LANE_FLAGS,
            "marks",
            marks=[Mark(sev == 3, "✖", "error"), Mark(sev == 2, "▲", "warning"), Mark(sev == 1, "●", "info")],
            readout=lambda r: labels.flags_readout(at(counts, r)) if at(counts, r) > 0 else "–",
        )
    )
    lanes.append(
        Lane(
            labels.LANE_PREEMPT,
            "marks",
            marks=[Mark(s["n_preempted"], "◆", "preempt")],
            numbers=s["n_preempted"],
            readout=lambda r: _fmt(at(s["n_preempted"], r)),
        )
    )
    return lanes


def engine_lanes(run: RunModel, selected: int | None = None) -> list[Lane]:
    """Per engine of a run: target tokens against the target budget, and the tokens withheld."""
    lanes: list[Lane] = []
    n = len(run)
    for i, engine in enumerate(run.run.engines):
        s = engine.session.series
        used, cap, withheld = (run.on_axis(i, s[k]) for k in ("target_used", "target_cap", "withheld"))
        recorded = run.on_axis(i, np.ones(len(s["step"]), dtype=bool))

        def readout(r: int, used: np.ndarray = used, cap: np.ndarray = cap, ok: np.ndarray = recorded) -> str:
            if not 0 <= r < n or not ok[r]:
                return empty.NO_SUCH_STEP
            return f"{int(used[r])}/{int(cap[r])}"

        def held(r: int, withheld: np.ndarray = withheld) -> str:
            return (
                labels.tokens_readout(int(withheld[r]), withheld=True)
                if 0 <= r < n and withheld[r] > 0
                else "–"
            )

        pointer = "▶ " if i == selected else "  "
        lanes.append(
            Lane(pointer + engine.label, "bar", "target", height=2, values=used, scale=cap, readout=readout)
        )
        lanes.append(
            Lane(
                f"    {labels.LANE_WITHHELD}",
                "marks",
                marks=[Mark(withheld, "▼", "withheld")],
                numbers=withheld,
                readout=held,
            )
        )
    return lanes
