"""Request lanes and waiting by reason: what the TUI's requests view and the web app's request
Gantt and waiting-by-reason chart draw, derived once here from tracer.analysis.why.

- `request_lanes(trace, start, end)`: for a window of step rows, one lane per request seen in
  it, as segments (first step, last step, state, reason code): consecutive steps in the same
  state for the same reason. The work is bounded: at most `MAX_WINDOW` steps and
  `MAX_ENTRIES` scheduled request-steps are read (each record is parsed, as `why --step`
  parses it: a busy server's step of 256 running costs as much as 30 quiet ones), and at most
  `max_lanes` lanes are kept (in order of first appearance); `RequestLanes` says how many
  requests and steps were left out.
- `waiting_by_reason(trace)`: per step, the waiting requests (request-steps) by the constraint
  that held them: a step's waiting requests are attributed to its binding constraint
  (tracer.analysis.step_bindings.bindings), as `summary`'s waiting-by-reason line counts them. Columnar:
  cheap over a whole trace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracer.analysis import detail
from tracer.analysis.reasons import CODES
from tracer.analysis.step_bindings import bindings, waiting_weights
from tracer.analysis.why import Config, step_why
from tracer.trace.trace_type import Trace

MAX_WINDOW = 2000  # steps read for one set of lanes
# Request entries (running, new and resumed) those steps may name: at 256 running about 190
# steps, read in about 0.1 s (2,000 such steps took 1.3 s, holding the GIL a viewer's other
# work needs: the web app's zoom waited on it).
MAX_ENTRIES = 50_000
MAX_LANES = 200  # requests kept

# A request's state in a step, from the step's record and its reasons:
SCHEDULED = "scheduled"  # scheduled all it needed (reason "none")
CLIPPED = "clipped"  # scheduled below its demand (the constraint that clipped it)
UNSCHEDULED = "unscheduled"  # running but given no tokens
WAITING = "waiting"  # waiting, not admitted (its reason: its own, or "behind" the head)
PREEMPTED = "preempted"  # evicted in this step (reason "preemption")
STATES = (SCHEDULED, CLIPPED, UNSCHEDULED, WAITING, PREEMPTED)


@dataclass(frozen=True)
class Segment:
    first: int  # step number
    last: int  # step number (inclusive)
    state: str  # one of STATES
    code: str  # reason code (tracer.analysis.reasons.CODES)
    first_row: int
    last_row: int


@dataclass(frozen=True)
class RequestLane:
    id: str
    segments: tuple[Segment, ...]

    def at(self, row: int) -> Segment | None:
        """The segment covering step row `row`, if any."""
        return next((s for s in self.segments if s.first_row <= row <= s.last_row), None)


@dataclass(frozen=True)
class RequestLanes:
    start: int  # first step row read
    end: int  # one past the last step row read
    lanes: tuple[RequestLane, ...]
    requests: int  # distinct requests seen in the window (lanes kept: at most max_lanes)
    rows_asked: int  # rows asked for (the window read is at most MAX_WINDOW of them, fewer past MAX_ENTRIES)
    unlisted: int  # most waiting requests in one step that the trace does not list
    first_step: int = 0  # the step numbers of rows start and end - 1 (0 when none read)
    last_step: int = 0

    @property
    def left_out(self) -> int:
        return self.requests - len(self.lanes)

    @property
    def clipped_window(self) -> bool:
        return self.end - self.start < self.rows_asked

    def codes(self) -> list[str]:
        """The reason codes the lanes use, in tracer.analysis.reasons order."""
        used = {s.code for lane in self.lanes for s in lane.segments}
        return [c for c in CODES if c in used]


def request_lanes(
    trace: Trace, start: int = 0, end: int | None = None, *, max_lanes: int = MAX_LANES
) -> RequestLanes:
    """Lanes for step rows [start, end) (the whole trace by default), bounded as the module says."""
    n = len(trace)
    end = n if end is None else max(0, min(int(end), n))
    start = max(0, min(int(start), end))
    asked = end - start
    end = min(end, start + MAX_WINDOW)
    cols = trace.columns
    named = np.cumsum(sum(cols[k][start:end].astype(np.int64) for k in ("n_running", "n_new", "n_resumed")))
    end = start + min(end - start, max(1, int(np.searchsorted(named, MAX_ENTRIES, side="right"))))
    cfg = Config(trace)
    cells: dict[str, dict[int, tuple[int, str, str]]] = {}  # id -> row -> (step, state, code)
    seen: set[str] = set()
    unlisted = 0

    def put(rid: str, row: int, step: int, state: str, code: str) -> None:
        if rid not in cells:
            seen.add(rid)
            if len(cells) >= max_lanes:
                return
            cells[rid] = {}
        cells[rid][row] = (step, state, code)

    for row, rec in detail.records(trace, range(start, end)):
        why = step_why(trace, row, rec, config=cfg)
        unlisted = max(unlisted, why.unlisted)
        held = {r.id: r for r in why.requests}
        for group in ("running", "resumed", "new"):
            for entry in rec[group]:
                r = held.get(entry[0])
                if r is not None and r.state == CLIPPED:
                    put(entry[0], row, why.step, CLIPPED, r.cause.code)
                else:
                    put(entry[0], row, why.step, SCHEDULED, "none")
        for r in why.requests:
            if r.state in (WAITING, UNSCHEDULED):
                put(r.id, row, why.step, r.state, r.cause.code)
        for rid in rec.get("preempted") or ():
            put(rid, row, why.step, PREEMPTED, "preemption")
    lanes = tuple(RequestLane(rid, _segments(by_row)) for rid, by_row in cells.items())
    steps = trace.columns["step"]
    first, last = (int(steps[start]), int(steps[end - 1])) if end > start else (0, 0)
    return RequestLanes(start, end, lanes, len(seen), asked, unlisted, first, last)


def _segments(by_row: dict[int, tuple[int, str, str]]) -> tuple[Segment, ...]:
    out: list[Segment] = []
    for row in sorted(by_row):
        step, state, code = by_row[row]
        prev = out[-1] if out else None
        if prev is not None and prev.last_row == row - 1 and (prev.state, prev.code) == (state, code):
            out[-1] = Segment(prev.first, step, state, code, prev.first_row, row)
        else:
            out.append(Segment(step, step, state, code, row, row))
    return tuple(out)


def waiting_by_reason(trace: Trace, codes: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per reason code, the request-steps it held in each step (arrays of the trace's length),
    largest total first; only codes that held any. They sum, step by step, to the waiting
    requests of tracer.analysis.step_bindings.waiting_weights."""
    codes = bindings(trace) if codes is None else codes
    weights = waiting_weights(trace)
    out: dict[str, np.ndarray] = {}
    for i in np.unique(codes[weights > 0]).tolist():
        out[CODES[i]] = np.where(codes == i, weights, 0).astype(np.int64)
    return dict(sorted(out.items(), key=lambda kv: -int(kv[1].sum())))
