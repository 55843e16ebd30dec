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
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

from tracer.analysis import detail
from tracer.trace.spec_decode_methods import is_separate_pass
from tracer.trace.trace_type import Trace


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
    bound the input budget are re-simulated, so large traces stay fast: their request
    lists are read without the rest of each record and replayed together in NumPy."""
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
    for lo in range(0, len(candidates), detail.BATCH):
        rows = candidates[lo : lo + detail.BATCH]
        lists = [d for _, d in detail.region(trace, rows, "new", "waiting_demand_truncated")]
        tokens, ok = simulate_many(trace, rows, lists, model)
        withheld[rows] = tokens
        exact[rows] = ok
    query_rows = n_sched * model.q if model.q and model.separate_pass else col["query_rows"]
    query_cap = np.where(col["query_cap"] >= 0, col["query_cap"], model.buffer_capacity or 0)
    return BudgetAnalysis(model, reserved, needed, excess, withheld, exact, query_rows, query_cap)


_GROUPS = ("running", "unscheduled", "resumed", "new", "waiting_demand")  # vLLM's order
_SENTINEL = 1 << 62  # a last entry per step that never fits: every step's loop ends on an event


def simulate_many(
    trace: Trace, rows: np.ndarray, lists: list[dict[str, Any]], model: MethodModel
) -> tuple[np.ndarray, np.ndarray]:
    """`simulate_without_excess` for many steps at once: (tokens withheld, exact) per row.

    `lists[j]` holds row j's request lists (at least the five of _GROUPS; missing ones are
    empty). Same arithmetic, in NumPy: without a clip, each request gets its demand and the
    budgets left before it are the caps minus the demands before it (exclusive cumulative
    sums per step), so the loop's end is the first request whose (padded) demand exceeds
    the room left, or whose turn finds no room. A step that names a request twice (its
    dicts then merge entries) goes through `simulate_without_excess` itself."""
    n = len(rows)
    if not n:
        return np.zeros(0, dtype=np.int64), np.ones(0, dtype=bool)
    col, k, slots = trace.columns, model.k, model.needed_slots
    cfg = trace.config
    cap = int(cfg.get("max_num_active_seqs") or cfg.get("max_num_seqs") or 1 << 30)
    groups = [[d.get(g) or [] for d in lists] for g in _GROUPS]
    counts = np.array([list(map(len, g)) for g in groups], dtype=np.int64)  # (5, n)
    flat = [list(chain.from_iterable(g)) for g in groups]
    ids = [list(map(_ID, f)) for f in flat]
    seg_of = [np.repeat(np.arange(n), c) for c in counts]
    # A request named twice in one step: the reference's dicts decide, not this replay.
    pairs = list(
        chain.from_iterable(zip(s.tolist(), i, strict=True) for s, i in zip(seg_of, ids, strict=True))
    )
    dup = np.zeros(n, dtype=bool)
    if len(set(pairs)) < len(pairs):
        seen: set[tuple[int, str]] = set()
        for pair in pairs:
            if pair in seen:
                dup[pair[0]] = True
            seen.add(pair)
    # need, actual, spec per entry (running/resumed/new: [id, tokens, spec, demand];
    # unscheduled/waiting_demand: [id, demand], scheduled nothing).
    need, actual, spec = [], [], []
    for g, f in enumerate(flat):
        m = len(f)
        if g in (0, 2, 3):
            need.append(np.fromiter(map(_DEMAND, f), np.int64, m))
            actual.append(np.fromiter(map(_TOKENS, f), np.int64, m))
            spec.append(np.fromiter(map(_SPEC, f), np.int64, m) if g == 0 else np.zeros(m, np.int64))
        else:
            need.append(np.fromiter(map(_TOKENS, f), np.int64, m))
            actual.append(np.zeros(m, np.int64))
            spec.append(np.zeros(m, np.int64))
    group = np.concatenate([np.full(c.sum(), g) for g, c in enumerate(counts)] + [np.full(n, 5)])
    seg = np.concatenate([*seg_of, np.arange(n)])
    need_a = np.concatenate([*need, np.full(n, _SENTINEL)])
    actual_a = np.concatenate([*actual, np.zeros(n, np.int64)])
    spec_a = np.concatenate([*spec, np.zeros(n, np.int64)])
    order = np.lexsort((group, seg))  # per step: running, unscheduled, resumed, new, waiting
    group, seg, need_a, actual_a, spec_a = (
        group[order],
        seg[order],
        need_a[order],
        actual_a[order],
        spec_a[order],
    )
    need_a = np.where(need_a < 0, actual_a, need_a)  # unknown demand: what it got

    waiting = (group >= 2) & (group <= 4)
    # Admission is bounded by the cap; any preemption in a step admits nobody.
    admissible = np.where(col["n_preempted"][rows] > 0, 0, np.maximum(0, cap - counts[0] - counts[1]))
    starts = np.searchsorted(seg, np.arange(n))
    rank = np.cumsum(waiting) - waiting
    rank -= rank[starts][seg]
    keep = ~waiting | (rank < admissible[seg])
    group, seg, need_a, actual_a, spec_a, waiting = (
        a[keep] for a in (group, seg, need_a, actual_a, spec_a, waiting)
    )
    starts = np.searchsorted(seg, np.arange(n))
    sentinel = group == 5

    # Padding of a one-token waiting request to 1+K rows, decided by the running part.
    ran = ~waiting & ~sentinel & (need_a > 0)
    scheduled_running = np.bincount(seg[ran], minlength=n) > 0
    prefill = np.bincount(seg[ran & (spec_a == 0) & (need_a > 1 + k)], minlength=n) > 0
    resumed = group == 2
    pad = waiting & (k > 0) & (need_a == 1) & (scheduled_running[seg] | resumed) & ~prefill[seg]
    need_a = np.where(pad, 1 + k, need_a)

    c = np.where(need_a > 0, need_a, 0)
    c[sentinel] = 0
    q = (c > 0).astype(np.int64)
    before = np.cumsum(c) - c
    before -= before[starts][seg]
    count_before = np.cumsum(q) - q
    count_before -= count_before[starts][seg]
    t0, i0 = col["target_cap"][rows][seg], col["input_cap"][rows][seg]
    room = np.minimum(t0 - before, i0 - before - slots * count_before - slots)
    event = (room <= 0) | (need_a > room)
    idx = np.arange(len(seg))
    first = np.minimum.reduceat(np.where(event, idx, len(seg)), starts)
    clip = (room[first] > 0) & ~pad[first] & ~sentinel[first]
    total = before[first] + np.where(clip, room[first], 0)
    done = (idx < first[seg]) & (need_a > 0) & ~sentinel
    changed = np.bincount(seg[done & (need_a != actual_a)], minlength=n)
    changed += clip & (room[first] != actual_a[first])

    tokens = np.maximum(0, total - col["target_used"][rows])
    exact = changed <= 1
    for j in np.flatnonzero(dup):
        row = int(rows[j])
        result = simulate_without_excess(trace.step(row), cfg, model)
        tokens[j], exact[j] = result.tokens, result.exact
    return tokens, exact


_ID, _TOKENS, _SPEC, _DEMAND = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(3)
