"""The binding constraint of every step of a whole trace, cheaply, and what it held: the
waiting request-steps by reason, their summary, and the steps where a cap or limit held
requests back. This is the pass `schedscope flags`, the views' waiting charts and the live
`/metrics` run over every step; one step's full answer is tracer.analysis.why's."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracer.analysis import detail
from tracer.analysis.reasons import CODE_INDEX, CODES, REASONS
from tracer.analysis.why import Config, admission, has_why_fields
from tracer.trace.trace_type import Trace


def waiting_by_reason(trace: Trace, codes: np.ndarray) -> dict[str, int]:
    """Waiting request-steps by the reason that held them (a step's waiting requests by its binding)."""
    weights = waiting_weights(trace)
    sums = np.bincount(codes.astype(np.int64), weights=weights, minlength=len(CODES))
    return {CODES[i]: int(v) for i, v in enumerate(sums.tolist()) if v}


_COLUMN_CODES = ("none", "preemption", "target_budget", "input_budget")


def bindings(trace: Trace) -> np.ndarray:
    """The code index (tracer.analysis.reasons.CODES) of every step's binding constraint.

    Decided from the reader's columns where they suffice (nothing waiting, a preemption, a
    spent budget, the admission cap); the remaining steps' records are parsed (only those)."""
    col = trace.columns
    cfg = Config(trace)
    n = len(trace)
    out = np.full(n, CODE_INDEX["unknown"], dtype=np.int8)
    waiting = np.maximum(col["num_waiting"] - col["n_preempted"], 0)
    undecided = np.ones(n, dtype=bool)

    def decide(mask: np.ndarray, code: str) -> None:
        hit = mask & undecided
        out[hit] = CODE_INDEX[code]
        undecided[hit] = False

    decide(waiting == 0, "none")
    decide(col["n_preempted"] > 0, "preemption")
    # A step that scheduled nothing may have been paused: only its record says.
    idle = undecided & (col["target_used"] == 0)
    undecided &= ~idle
    decide(col["target_left"] <= 0, "target_budget")
    decide(col["input_left"] <= cfg.draft_slots, "input_budget")
    if cfg.draft_budget:
        decide(cfg.draft_budget - col["query_rows"] < cfg.q, "draft_budget")
    if cfg.active:
        decide(col["num_running"] >= int(cfg.active), cfg.cap_code())
    rest = np.flatnonzero(undecided | idle)
    if not len(rest):
        return out
    # Only the keys the waiting loop's tests read: the queue and the 1.3 facts (a step's
    # running list, most of its bytes, is not parsed); the budgets come from the columns.
    queues = detail.region(trace, rest, "waiting_demand", "priority")
    facts = detail.region(trace, rest, "kv_free", None) if has_why_fields(trace) else None
    scheduled = (col["n_new"] + col["n_resumed"] + col["n_running"]) > 0
    for row, queue in queues:
        rec = dict(queue)
        if facts is not None:
            rec.update(next(facts)[1])
        rec["preempted"] = []  # steps with a preemption were decided above
        rec["num_waiting"], rec["num_running"] = int(col["num_waiting"][row]), int(col["num_running"][row])
        rec["kv_usage"] = float(col["kv_usage"][row])
        rec["target"] = {
            "left": int(col["target_left"][row]),
            "cap": int(col["target_cap"][row]),
            "used": int(col["target_used"][row]),
        }
        rec["input"] = {
            "left": int(col["input_left"][row]),
            "cap": int(col["input_cap"][row]),
            "reserved": int(col["input_reserved"][row]),
        }
        out[row] = CODE_INDEX[admission(rec, cfg, bool(scheduled[row]))[0].code]
    return out


def waiting_weights(trace: Trace) -> np.ndarray:
    """Requests that waited through each step (queued before it and not admitted)."""
    col = trace.columns
    return np.maximum(col["num_waiting"] - col["n_preempted"], 0)


@dataclass(frozen=True)
class WaitingSummary:
    """Waiting request-steps by the constraint that held them, over a whole trace."""

    total: int
    by_reason: dict[str, int]  # code -> request-steps, largest first
    steps_by_reason: dict[str, int]  # code -> steps in which it bound admission
    idle_tokens: dict[str, float]  # code -> mean target tokens left in those steps
    idle_kv: dict[str, float]  # code -> mean KV share free in those steps
    config: dict[str, Any]

    def share(self, code: str) -> float:
        return self.by_reason.get(code, 0) / self.total if self.total else 0.0


def waiting_summary(trace: Trace, codes: np.ndarray | None = None) -> WaitingSummary:
    codes = bindings(trace) if codes is None else codes
    weights = waiting_weights(trace)
    col = trace.columns
    by: Counter[str] = Counter()
    steps: Counter[str] = Counter()
    idle: dict[str, float] = {}
    kv: dict[str, float] = {}
    for i in np.unique(codes).tolist():
        mask = (codes == i) & (weights > 0)
        if not mask.any():
            continue
        code = CODES[i]
        by[code] = int(weights[mask].sum())
        steps[code] = int(mask.sum())
        idle[code] = float(col["target_left"][mask].mean())
        kv[code] = float(1.0 - col["kv_usage"][mask].mean())
    return WaitingSummary(
        total=int(sum(by.values())),
        by_reason=dict(by.most_common()),
        steps_by_reason=dict(steps),
        idle_tokens=idle,
        idle_kv=kv,
        config=dict(trace.config),
    )


def limit_steps(trace: Trace, codes: np.ndarray | None = None) -> np.ndarray:
    """Rows where a cap or limit (tracer.analysis.reasons.Reason.limit) held requests back."""
    codes = bindings(trace) if codes is None else codes
    limits = [CODE_INDEX[r.code] for r in REASONS.values() if r.limit]
    return np.flatnonzero(np.isin(codes, limits) & (waiting_weights(trace) > 0))
