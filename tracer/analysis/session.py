"""One analysis session per trace snapshot.

In the manner of pyinstrument's Session (one recorded profile that every renderer reads), a
`Session` holds one loaded trace snapshot and reads everything the model layer derives from
it: the budget analysis, the flag report, the plotted series, the flag index and the lookups.
Each is computed on first use and kept in the trace's memo (tracer.analysis.memo, the one
place whole-trace results are remembered), so `schedscope summary`, `flags`, `diff`, the
Perfetto export, the TUI and the web app never run the budget model or the detectors twice over
one snapshot. A followed trace that grows is a new snapshot (a new Trace), so it gets a new
Session and a new memo.

It also gives the views typed request entries (`RequestEntry`, `Demand`), so no view indexes a
raw `[id, tokens, spec_tokens, demand]` list.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import numpy as np

from tracer.analysis import flags, request_story, step_bindings, why
from tracer.analysis import request_lanes as lanes_model
from tracer.analysis.budget import BudgetAnalysis, analyze
from tracer.analysis.detail import rows_of_steps
from tracer.analysis.flags import Flag, FlagReport, detect
from tracer.analysis.lookup import flag_rows, matching_ids, request_life
from tracer.analysis.memo import memo
from tracer.analysis.requests import RequestLife
from tracer.analysis.series import step_series
from tracer.trace.trace_type import Trace

T = TypeVar("T")

# The record's groups of scheduled requests, in the order the inspectors list them.
SCHEDULED_GROUPS = ("new", "resumed", "running")
SEVERITY_CODE = {"info": 1, "warning": 2, "error": 3}
LANES_KEPT = 4  # windows of request lanes a Session keeps (Session.request_lanes)


class RequestEntry(NamedTuple):
    """A scheduled request of one step (an entry of the record's `new`, `resumed` or `running`)."""

    id: str
    tokens: int  # target tokens scheduled in the step
    spec: int  # of those, draft tokens scheduled for verification
    demand: int  # tokens it still needed before schedule() clipped it; -1 when unknown
    kind: str  # "new", "resumed" or "running": the record group it came from


class Demand(NamedTuple):
    """A request with demand left that the step did not schedule (`unscheduled`, `waiting_demand`)."""

    id: str
    demand: int


@dataclass(frozen=True)
class StepRequests:
    """The requests of one step record, typed."""

    scheduled: list[RequestEntry]  # new, then resumed, then running
    unscheduled: list[Demand]  # running requests the budget ran out before
    waiting: list[Demand]  # waiting requests not admitted, queue order (at most 32)
    waiting_truncated: int  # waiting requests beyond those listed
    preempted: list[str]
    finished: list[str]
    sampled: dict[str, int]  # tokens each scheduled request sampled; empty when not recorded


def request_entries(rec: dict[str, Any], groups: Iterable[str] = SCHEDULED_GROUPS) -> list[RequestEntry]:
    """The scheduled requests of a step record, group by group in `groups` order."""
    out = []
    for group in groups:
        for e in rec[group]:
            # Entries written before spec_tokens/demand existed are shorter: default them.
            spec = e[2] if len(e) > 2 else 0
            demand = e[3] if len(e) > 3 else -1
            out.append(RequestEntry(e[0], e[1], spec, demand, group))
    return out


def step_requests(rec: dict[str, Any]) -> StepRequests:
    return StepRequests(
        scheduled=request_entries(rec),
        unscheduled=[Demand(e[0], e[1]) for e in rec.get("unscheduled") or ()],
        waiting=[Demand(e[0], e[1]) for e in rec.get("waiting_demand") or ()],
        waiting_truncated=int(rec.get("waiting_demand_truncated") or 0),
        preempted=list(rec["preempted"]),
        finished=list(rec["finished"]),
        sampled=dict(rec.get("sampled") or {}),
    )


@dataclass(frozen=True)
class FlagIndex:
    """The flag report indexed by row: per-flag arrays, no per-step objects."""

    rows: np.ndarray  # row of each flag, sorted (flags are sorted by step)
    kinds: np.ndarray  # kind of each flag (object array)
    severity: np.ndarray  # 1 info, 2 warning, 3 error

    @classmethod
    def of(cls, trace: Trace, report: FlagReport) -> FlagIndex:
        rows, kinds = flag_rows(trace, report)
        severity = np.ones(len(rows), dtype=np.int8)
        for kind in set(kinds.tolist()):  # a handful of kinds over (maybe) every step
            severity[kinds == kind] = SEVERITY_CODE.get(flags.kind_info(kind).severity, 1)
        return cls(rows, kinds, severity)


def neighbour(rows: np.ndarray, row: int, backwards: bool) -> int | None:
    """The first of the sorted `rows` after `row` (or the last before it)."""
    if backwards:
        i = int(np.searchsorted(rows, row, side="left")) - 1
        return int(rows[i]) if i >= 0 else None
    i = int(np.searchsorted(rows, row, side="right"))
    return int(rows[i]) if i < len(rows) else None


class Session:
    """One trace snapshot and the model layer's results over it, each computed once on first use."""

    def __init__(self, trace: Trace, *, report: FlagReport | None = None) -> None:
        self.trace = trace
        # Results live in the Trace's memo (tracer.analysis.memo), not here: two Sessions
        # over one snapshot share them, and a new snapshot (a new Trace) starts afresh.
        self.memo = memo(trace)
        if report is not None:
            self.memo.once("report", lambda: report)
            self.memo.once("analysis", lambda: report.analysis)

    @classmethod
    def of(cls, source: Session | Trace) -> Session:
        """`source` itself when it is a Session, else a new Session over the trace."""
        return source if isinstance(source, Session) else cls(source)

    def _once(self, name: str, compute: Callable[[], T]) -> T:
        return self.memo.once(name, compute)

    # -- what the model layer computes ---------------------------------------------------
    @property
    def analysis(self) -> BudgetAnalysis:
        return self._once("analysis", lambda: analyze(self.trace))

    @property
    def report(self) -> FlagReport:
        return self._once("report", lambda: detect(self.trace, self.analysis, bindings=self.bindings))

    @property
    def bindings(self) -> np.ndarray:
        """tracer.analysis.step_bindings.bindings: each step's binding constraint (a reasons.CODES index)."""
        return self._once("bindings", lambda: step_bindings.bindings(self.trace))

    @property
    def waiting_summary(self) -> step_bindings.WaitingSummary:
        return self._once("waiting_summary", lambda: step_bindings.waiting_summary(self.trace, self.bindings))

    def step_why(self, row: int, rec: dict[str, Any] | None = None) -> why.StepWhy:
        """The reasons of one step (not kept: a step's record is parsed again on each call,
        unless the caller passes the record it already holds)."""
        return why.step_why(self.trace, row, rec)

    def request_story(self, request_id: str) -> request_story.RequestStory | None:
        return request_story.request_story(self.trace, request_id)

    @property
    def series(self) -> dict[str, np.ndarray]:
        """tracer.analysis.series.step_series: the per-step arrays the views plot, by name."""
        return self._once("series", lambda: step_series(self.trace, self.analysis))

    @property
    def flag_index(self) -> FlagIndex:
        return self._once("flag_index", lambda: FlagIndex.of(self.trace, self.report))

    # -- about the trace -------------------------------------------------------------------
    @property
    def name(self) -> str:
        return Path(self.trace.path).name

    def __len__(self) -> int:
        return len(self.trace)

    def row_of(self, step: int) -> int | None:
        """Row index of a recorded step number, or None."""
        row = int(rows_of_steps(self.trace, [step])[0])
        return row if row >= 0 else None

    def requests(self, row: int) -> StepRequests:
        return step_requests(self.trace.step(row))

    def request_life(self, request_id: str) -> RequestLife | None:
        return request_life(self.trace, request_id)

    def matching_ids(self, prefix: str, *, limit: int = 20) -> list[str]:
        return matching_ids(self.trace, prefix, limit=limit)

    # -- flags by row ------------------------------------------------------------------------
    @property
    def flag_rows(self) -> np.ndarray:
        return self.flag_index.rows

    @property
    def flag_kinds(self) -> np.ndarray:
        return self.flag_index.kinds

    @property
    def kinds_present(self) -> list[str]:
        present = set(self.flag_kinds.tolist())
        # In the registry's order; a kind it lacks (a newer trace's) last, never dropped.
        return [k for k in flags.KINDS if k in present] + sorted(present - set(flags.KINDS))

    def flags_at(self, row: int) -> list[Flag]:
        lo, hi = np.searchsorted(self.flag_rows, [row, row + 1])
        return self.report.flags[int(lo) : int(hi)]

    def flag_positions(self, kind: str | None) -> np.ndarray:
        """Positions in report.flags of the flags of `kind` (all when None)."""
        if kind is None:
            return np.arange(len(self.flag_rows))
        return np.flatnonzero(self.flag_kinds == kind)

    def next_flag(self, row: int, kind: str | None = None, *, backwards: bool = False) -> int | None:
        """Row of the next (or previous) flagged step after `row`, optionally of one kind."""
        rows = self.flag_rows if kind is None else self.flag_rows[self.flag_kinds == kind]
        return neighbour(rows, row, backwards)

    def severity_by_row(self) -> np.ndarray:
        """The worst flag severity of each row (0: none), for the timeline's markers."""
        index = self.flag_index
        out = np.zeros(len(self.trace), dtype=np.int8)
        ok = index.rows >= 0
        np.maximum.at(out, index.rows[ok], index.severity[ok])
        return out

    # -- request lanes and waiting by reason (tracer.analysis.request_lanes) ------------------
    def request_lanes(
        self, start: int = 0, end: int | None = None, *, max_lanes: int = lanes_model.MAX_LANES
    ) -> lanes_model.RequestLanes:
        """One lane per request over step rows [start, end), bounded. The last LANES_KEPT windows
        asked are kept (a zoom in and back out finds the wider window again: each costs about
        1.3 ms a step at 256 running), and a window asked from two threads is computed once."""
        key = (start, end, max_lanes)
        held, lock = self._once("request_lanes", lambda: (OrderedDict(), threading.Lock()))
        with lock:
            lanes = held.get(key)
            if lanes is None:
                lanes = lanes_model.request_lanes(self.trace, start, end, max_lanes=max_lanes)
                if len(held) >= LANES_KEPT:
                    held.popitem(last=False)
            held[key] = lanes
            held.move_to_end(key)
            return lanes

    @property
    def waiting_by_reason(self) -> dict[str, np.ndarray]:
        """Per reason code, the waiting request-steps it held in each step."""
        return self._once(
            "waiting_by_reason", lambda: lanes_model.waiting_by_reason(self.trace, self.bindings)
        )
