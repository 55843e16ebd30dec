"""The budget model, written once: what a step reserved, what its method needed,
and the target tokens any excess withheld.

Shared-buffer methods (draft_model, P-EAGLE, PARD) put their draft rows into
the target pass, so their per-request draft slots are needed. Separate-pass
methods (DFlash, DSpark) run their query rows in a second, sequential forward
with its own buffer: any draft slot charged against the target's input budget
is excess, and where it bound the budget it withheld target tokens.

Tokens withheld in a step = the target tokens the same step would have
scheduled without the excess reservation, minus those it did schedule
(docs/budget-model.md). It is replayed from the step's recorded demands in vLLM's
order (running, then admitted, then waiting), so it is exact when one request
binds the budget and an upper bound otherwise (the KV cache, the long-prefill
threshold or an encoder budget may also have limited the step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tracer.analysis.methods import is_separate_pass
from tracer.trace.reader import Trace


@dataclass(frozen=True)
class MethodModel:
    """What a trace's spec-decode method asks of the buffers, and what it was charged."""

    method: str | None
    k: int
    draft_slots: int  # rows per scheduled request the scheduler charged to the input budget
    needed_slots: int  # rows per request the target pass really needs for drafting
    q: int  # rows per request in the separate drafter pass (0 if none)
    separate_pass: bool
    buffer_capacity: int | None

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> MethodModel:
        method = config.get("spec_method")
        separate = is_separate_pass(method)
        slots = int(config.get("draft_slots") or 0)
        return cls(
            method=method,
            k=int(config.get("num_speculative_tokens") or 0),
            draft_slots=slots,
            needed_slots=0 if separate else slots,
            q=int(config.get("query_rows_per_req") or 0),
            separate_pass=separate,
            buffer_capacity=config.get("buffer_capacity"),
        )


@dataclass(frozen=True)
class Withheld:
    tokens: int  # target tokens the excess reservation kept out of the step
    would_schedule: int  # target tokens the step would have scheduled without it
    exact: bool  # at most one request's allocation changes: the figure is exact


def simulate_without_excess(step: dict[str, Any], config: dict[str, Any], model: MethodModel) -> Withheld:
    """Re-run one step's budget loop with only the slots the method needs."""
    target_left = int(step["target"]["cap"])
    input_left = int(step["input"]["cap"])
    slots = model.needed_slots
    entries = step["running"] + step["resumed"] + step["new"]
    actual = {e[0]: e[1] for e in entries}
    demand = {e[0]: e[3] for e in entries}
    order: list[str] = [e[0] for e in step["running"]]
    order += [e[0] for e in step.get("unscheduled", ())]
    demand.update((e[0], e[1]) for e in step.get("unscheduled", ()))
    waiting = [e[0] for e in step["resumed"] + step["new"]]
    waiting += [e[0] for e in step.get("waiting_demand", ())]
    demand.update((e[0], e[1]) for e in step.get("waiting_demand", ()))
    # Admission is bounded by the cap; any preemption in a step admits nobody.
    cap = int(config.get("max_num_active_seqs") or config.get("max_num_seqs") or 1 << 30)
    running = len(order)
    admissible = 0 if step.get("preempted") else max(0, cap - running)
    order += waiting[:admissible]

    total = 0
    changed = 0
    # vLLM pads a waiting request that needs one token to 1+K rows (a uniform spec-decode
    # batch) when running requests were scheduled before it and none of them is mid-
    # prefill; if the padded rows do not fit, the waiting loop stops admitting.
    k = model.k
    spec_of = {e[0]: e[2] for e in step["running"]}
    waiting_ids = set(waiting)
    resumed_ids = {e[0] for e in step["resumed"]}  # they have computed tokens: padded alone too
    scheduled_running = False
    prefill_scheduled = False
    for rid in order:
        if target_left <= 0 or input_left <= slots:
            break
        need = demand.get(rid, -1)
        if need < 0:  # unknown demand: assume it got what it needed
            need = actual.get(rid, 0)
        room = min(target_left, input_left - slots)
        pads = scheduled_running or rid in resumed_ids
        if rid in waiting_ids and k > 0 and need == 1 and pads and not prefill_scheduled:
            if 1 + k > room:
                break
            need = 1 + k
        n = min(need, room)
        if n <= 0:
            continue
        if rid not in waiting_ids:
            scheduled_running = True
            # Mid-prefill: offered no drafts and needs more than a decode step.
            prefill_scheduled |= spec_of.get(rid, 0) == 0 and need > 1 + k
        target_left -= n
        input_left -= n + slots
        total += n
        changed += n != actual.get(rid, 0)
    scheduled = int(step["target"]["used"])
    return Withheld(tokens=max(0, total - scheduled), would_schedule=total, exact=changed <= 1)


@dataclass
class BudgetAnalysis:
    """Per-step arrays, aligned with trace.columns."""

    model: MethodModel
    reserved: np.ndarray  # draft-slot rows charged to the input budget
    needed: np.ndarray  # rows of those the method needs in the target pass
    excess: np.ndarray  # reserved - needed
    withheld: np.ndarray  # target tokens the excess withheld
    exact: np.ndarray  # bool: withheld is exact (else an upper bound)
    query_rows: np.ndarray
    query_cap: np.ndarray


def analyze(trace: Trace) -> BudgetAnalysis:
    """The budget model over a whole trace. Only steps where the excess could have
    bound the input budget are re-simulated, so large traces stay fast."""
    col = trace.columns
    model = MethodModel.from_config(trace.config)
    n_sched = col["n_new"] + col["n_resumed"] + col["n_running"]
    reserved = col["input_reserved"]
    needed = n_sched * model.needed_slots
    excess = reserved - needed
    withheld = np.zeros(len(trace), dtype=np.int64)
    exact = np.ones(len(trace), dtype=bool)
    # The input budget binds only when the loop stopped on it (left <= slots) or
    # clipped a request with it (left == 0); otherwise no token was withheld.
    candidates = np.flatnonzero(
        (excess > 0) & (col["input_left"] <= model.draft_slots) & (col["target_left"] > 0)
    )
    for i in candidates:
        result = simulate_without_excess(trace.step(int(i)), trace.config, model)
        withheld[i] = result.tokens
        exact[i] = result.exact
    query_rows = n_sched * model.q if model.q and model.separate_pass else col["query_rows"]
    query_cap = np.where(col["query_cap"] >= 0, col["query_cap"], model.buffer_capacity or 0)
    return BudgetAnalysis(model, reserved, needed, excess, withheld, exact, query_rows, query_cap)


def arithmetic(trace: Trace, i: int, analysis: BudgetAnalysis | None = None) -> list[str]:
    """The budget arithmetic of step row i written out, one line per budget."""
    col = trace.columns
    n = int(col["n_new"][i] + col["n_resumed"][i] + col["n_running"][i])
    used, reserved = int(col["input_used"][i]), int(col["input_reserved"][i])
    slots = (reserved // n) if n else 0
    lines = [
        f"target {int(col['target_used'][i])} of {int(col['target_cap'][i])} "
        f"({int(col['target_left'][i])} left)",
        f"input {used} = {used - reserved} target + {n}×{slots} reserved draft slots "
        f"(of {int(col['input_cap'][i])}, {int(col['input_left'][i])} left)",
    ]
    if col["query_per_req"][i]:
        q = int(col["query_per_req"][i])
        lines.append(f"query {n}×{q} = {int(col['query_rows'][i])} rows of {int(col['query_cap'][i])}")
    if analysis is not None and analysis.withheld[i]:
        kind = "exactly" if analysis.exact[i] else "at most"
        lines.append(f"withheld {kind} {int(analysis.withheld[i])} target tokens by the excess reservation")
    return lines
