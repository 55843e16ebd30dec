"""Comparison model: two traces aligned by step and by request, per-step deltas,
totals and a one-paragraph headline. Used by `schedscope diff` and both views.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tracer.analysis.flags import FlagReport
from tracer.analysis.requests import RequestEvents, request_events
from tracer.render.text import totals_lines
from tracer.trace.reader import Trace
from tracer.trace.schema import OFFLINE_MODEL_NAME
from tracer.whatif.clock import (
    NoClock,
    Performance,
    StepClock,
    clock_for,
    is_replay,
    is_timed,
    performance,
    performance_note,
    performance_rows,
    withheld_cost_sentence,
)
from tracer.whatif.fidelity import identity_line

if TYPE_CHECKING:
    from tracer.analysis.session import Session

DELTA_COLUMNS = ("target_used", "query_rows", "admitted", "preempted")


@dataclass
class Side:
    trace: Trace
    flags: FlagReport
    lives: dict[str, RequestEvents]  # admission, prefill, preemption and finish of each request

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
    # Throughput and latency of each side (tracer.whatif.clock): measured, or predicted for a replay.
    perf: tuple[Performance, Performance] | None = None

    def delta(self, column: str) -> np.ndarray:
        a, b = self.values[column]
        return b - a

    def headline(self) -> str:
        return " ".join(headline_sentences(self))


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
    side_a = Side(a, sa.report, request_events(a))
    side_b = Side(b, sb.report, request_events(b))
    n = max(len(a), len(b))
    va, vb = _aligned(a, n), _aligned(b, n)
    values = {name: (va[name], vb[name]) for name in DELTA_COLUMNS}
    common = [rid for rid in side_a.lives if rid in side_b.lives]
    perf = None
    if len(a) and len(b):
        clock = _pricing_clock(a, b)
        perf = (performance(a, clock), performance(b, clock))
    return Comparison(side_a, side_b, np.arange(1, n + 1), values, common, perf)


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


def headline_sentences(c: Comparison) -> list[str]:
    a, b = c.a, c.b
    da, db = a.steps_to_drain, b.steps_to_drain
    verb = "the same" if da == db else ("fewer" if db < da else "more")
    out = [
        f"B ({b.name}) drained the workload in {db} steps instead of {da} (A, {a.name}): {verb}"
        + ("." if da == db else f" by {abs(da - db)}.")
    ]
    # The request whose prefill length changed most says what the budget did.
    best: tuple[int, str, int, int] | None = None
    for rid in c.common_requests:
        pa, pb = a.lives[rid].prefill_steps, b.lives[rid].prefill_steps
        if pa is not None and pb is not None and pa != pb and (best is None or abs(pa - pb) > best[0]):
            best = (abs(pa - pb), rid, pa, pb)
    if best is not None:
        _, rid, pa, pb = best
        out.append(f"Request {rid!r} finished its prefill in {pb} steps instead of {pa}.")
    for side, label in ((a, "A"), (b, "B")):
        withheld = side.flags.tokens_withheld
        if not withheld:
            continue
        per_step = [f.numbers["tokens_withheld"] for f in side.flags.flags if "tokens_withheld" in f.numbers]
        if len(set(per_step)) == 1:
            spread = f"{per_step[0]} target tokens in each of {len(per_step)} steps"
        else:
            spread = f"{withheld} target tokens over {len(per_step)} steps"
        out.append(f"In {label} the additive draft-slot reservation withheld {spread} ({withheld} in all).")
        if label == "A" and c.perf is not None:
            offline = a.trace.config.get("model") == OFFLINE_MODEL_NAME
            cost = withheld_cost_sentence(*c.perf, withheld, offline)
            if cost is not None:
                out.append(cost)
    fa, fb = len(a.flags.flags), len(b.flags.flags)
    if fa != fb:
        out.append(f"Flags: {fa} in A, {fb} in B.")
    return out


def diff_lines(c: Comparison, *, rows: int = 20) -> list[str]:
    """The text report of `schedscope diff`."""
    a, b = c.a, c.b
    lines = [
        f"A  {a.trace.path}  policy {a.name}, vLLM {a.trace.header.get('vllm_version')}",
        f"B  {b.trace.path}  policy {b.name}, vLLM {b.trace.header.get('vllm_version')}",
        "",
        *headline_sentences(c),
    ]
    # A what-if trace keeps its baseline's identity check: say how much of this diff
    # could be replay error rather than the policy.
    for side in (b, a):
        line = identity_line(side.trace.header)
        if line is not None:
            lines.append(f"{line}.")
            break
    lines += ["", *totals_lines(c)]
    if c.perf is not None:
        lines += ["", performance_note(*c.perf)]
        for label, va, vb in performance_rows(*c.perf):
            lines.append(f"{label:24}{va:>12}{vb:>12}")
    changed = np.flatnonzero(np.any([c.delta(n) != 0 for n in DELTA_COLUMNS], axis=0))
    lines += ["", f"{len(changed)} steps differ" + (":" if len(changed) else ".")]
    if len(changed):
        heads = (("step", 6), ("target A", 10), ("target B", 10), ("Δ", 7), ("query Δ", 9), ("admit Δ", 9))
        lines.append("".join(f"{h:>{w}}" for h, w in heads) + f"{'preempt Δ':>11}")
        for i in changed[:rows]:
            ta, tb = c.values["target_used"][0][i], c.values["target_used"][1][i]
            lines.append(
                f"{int(c.steps[i]):>6}{int(ta):>10}{int(tb):>10}{int(tb - ta):>+7}"
                f"{int(c.delta('query_rows')[i]):>+9}{int(c.delta('admitted')[i]):>+9}"
                f"{int(c.delta('preempted')[i]):>+11}"
            )
        if len(changed) > rows:
            lines.append(f"... {len(changed) - rows} more (--rows)")
    return lines
