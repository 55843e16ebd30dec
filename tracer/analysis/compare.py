"""Comparison model: two traces aligned by step and by request, per-step deltas and
each side's performance. Used by `schedscope diff` and both views; its sentences (the
headline, the diff report, the performance table) are tracer.render.compare's.
"""

from __future__ import annotations

import operator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tracer.analysis import release_memory
from tracer.analysis.clock import (
    NoClock,
    Performance,
    StepClock,
    clock_for,
    common_ttft_from,
    is_replay,
    is_timed,
    performance,
)
from tracer.analysis.flags import FlagReport
from tracer.analysis.requests import NO_STEP, EventsView, request_events
from tracer.analysis.step_features import step_pass
from tracer.trace.trace_type import Trace

if TYPE_CHECKING:
    from tracer.analysis.session import Session

DELTA_COLUMNS = ("target_used", "query_rows", "admitted", "preempted")


@dataclass
class Side:
    trace: Trace
    flags: FlagReport
    lives: EventsView  # admission, prefill, preemption and finish of each request

    @property
    def name(self) -> str:
        return str(self.trace.header.get("policy") or "stock")

    @property
    def steps_to_drain(self) -> int:
        """Steps up to the last one that scheduled any token."""
        busy = np.flatnonzero(self.trace.columns["target_used"] > 0)
        return int(self.trace.columns["step"][busy[-1]]) if len(busy) else 0

    @property
    def tokens_per_step(self) -> float:
        drain = self.steps_to_drain
        return float(self.trace.columns["target_used"].sum()) / drain if drain else 0.0


@dataclass
class Comparison:
    a: Side
    b: Side
    steps: np.ndarray  # aligned step numbers 1..max(len(a), len(b))
    values: dict[str, tuple[np.ndarray, np.ndarray]]  # per column: (a, b) aligned, 0-padded
    common_requests: list[str]
    # Where each common request sits in A's and in B's request columns.
    common_at: tuple[np.ndarray, np.ndarray]
    # Throughput and latency of each side (tracer.analysis.clock): measured, or predicted for a replay.
    perf: tuple[Performance, Performance] | None = None

    def delta(self, column: str) -> np.ndarray:
        a, b = self.values[column]
        return b - a

    def prefill_change(self) -> tuple[str, int, int] | None:
        """The common request whose prefill took the most steps more or fewer in B than in A
        (the first such): (id, steps in A, steps in B); None when none changed."""
        if not self.common_requests:
            return None
        pa = self.a.lives.columns.prefill_steps()[self.common_at[0]]
        pb = self.b.lives.columns.prefill_steps()[self.common_at[1]]
        gap = np.where((pa != NO_STEP) & (pb != NO_STEP) & (pa != pb), np.abs(pa - pb), 0)
        i = int(np.argmax(gap))
        if gap[i] == 0:
            return None
        return self.common_requests[i], int(pa[i]), int(pb[i])


def _aligned(trace: Trace, n: int) -> dict[str, np.ndarray]:
    col = trace.columns
    rows = {
        "target_used": col["target_used"],
        "query_rows": col["query_rows"],
        "admitted": col["n_new"] + col["n_resumed"],
        "preempted": col["n_preempted"],
    }
    out = {}
    for name, values in rows.items():
        padded = np.zeros(n, dtype=np.int64)
        padded[: len(values)] = values
        out[name] = padded
    return out


def compare(session_a: Session | Trace, session_b: Session | Trace) -> Comparison:
    """Align by step index (step k of A against step k of B) and by request id. Sessions bring
    their flag reports (computed at most once each); a bare Trace gets a Session of its own."""
    # Imported here: tracer.analysis.session builds on lookup, which builds on this module.
    from tracer.analysis.session import Session

    sa, sb = Session.of(session_a), Session.of(session_b)
    a, b = sa.trace, sb.trace
    # Each side's passes (flags, request index, step pass) on a thread of its own: most of a
    # big trace's time is NumPy's, which lets go of the GIL, so two cores share the work.
    with ThreadPoolExecutor(2, thread_name_prefix="schedscope-compare") as pool:
        for done in [pool.submit(prepare, s) for s in (sa, sb)]:
            done.result()
    release_memory.trim()  # both threads' arenas now: a side's own trim ran while the other still worked
    side_a = Side(a, sa.report, request_events(a))
    side_b = Side(b, sb.report, request_events(b))
    n = max(len(a), len(b))
    va, vb = _aligned(a, n), _aligned(b, n)
    values = {name: (va[name], vb[name]) for name in DELTA_COLUMNS}
    common, common_at = common_requests(side_a.lives.columns.ids, side_b.lives.columns.ids)
    perf = None
    if len(a) and len(b):
        clock = _pricing_clock(a, b)
        start = common_ttft_from(a, b)  # both TTFTs from the same point, or they do not compare
        perf = (performance(a, clock, start), performance(b, clock, start))
    return Comparison(side_a, side_b, np.arange(1, n + 1), values, common, common_at, perf)


def common_requests(ids_a: list[Any], ids_b: list[Any]) -> tuple[list[Any], tuple[np.ndarray, np.ndarray]]:
    """The ids in both lists, in A's order, and where each sits in A and in B (ids are unique
    in each). Half a million ids each in a big run: matched by their hashes with NumPy, each
    match then checked equal; a hash shared within B or a false match falls back to a dict."""
    if ids_a == ids_b:  # the same workload in the same order (one C comparison)
        at = np.arange(len(ids_a), dtype=np.int64)
        return list(ids_a), (at, at.copy())
    ha = np.fromiter(map(hash, ids_a), np.int64, len(ids_a))
    hb = np.fromiter(map(hash, ids_b), np.int64, len(ids_b))
    sorter = np.argsort(hb, kind="stable")
    sb = hb[sorter]
    if len(sb) and not (sb[1:] != sb[:-1]).all():
        return _common_by_dict(ids_a, ids_b)
    found = np.minimum(np.searchsorted(sb, ha), max(len(sb) - 1, 0))
    at_a = np.flatnonzero(sb[found] == ha) if len(sb) else np.zeros(0, np.int64)
    at_b = sorter[found[at_a]]
    common = list(map(ids_a.__getitem__, at_a.tolist()))
    if not all(map(operator.eq, common, map(ids_b.__getitem__, at_b.tolist()))):
        return _common_by_dict(ids_a, ids_b)
    return common, (at_a.astype(np.int64), at_b.astype(np.int64))


def _common_by_dict(ids_a: list[Any], ids_b: list[Any]) -> tuple[list[Any], tuple[np.ndarray, np.ndarray]]:
    in_b = {rid: j for j, rid in enumerate(ids_b)}
    at_a = [i for i, rid in enumerate(ids_a) if rid in in_b]
    common = [ids_a[i] for i in at_a]
    return common, (
        np.asarray(at_a, dtype=np.int64),
        np.asarray([in_b[rid] for rid in common], dtype=np.int64),
    )


def prepare(session: Session) -> None:
    """Everything compare() reads of one side, computed (and kept: each is cached per Trace)."""
    trace = session.trace
    session.report  # noqa: B018 (computed on first access)
    request_events(trace)
    if len(trace) and not (is_replay(trace) and not is_timed(trace)):  # else priced on a retimed copy
        step_pass(trace)
    release_memory.trim()  # the passes' freed temporaries (about 60 MB a side at 200k steps)


def _pricing_clock(a: Trace, b: Trace) -> StepClock | None:
    """The clock an untimed replay is priced with: the recording's (A's, else B's); None when
    no side needs pricing (fitting reads every step: not for two recordings)."""
    if not any(is_replay(t) and not is_timed(t) for t in (a, b)):
        return None
    for side in (a, b):
        if not is_replay(side):
            try:
                return clock_for(side)
            except NoClock:
                return None
    return None
